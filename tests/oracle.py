"""transformers 5.23 as a test oracle: how transformers itself reads a config.json and sizes its KV cache.

:func:`read_with_transformers` builds transformers' own config object from a config.json mapping
(``AutoConfig.for_model(model_type, **config)``; a multimodal config's decoder text config via
``get_text_config(decoder=True)``), builds the causal LM on the ``meta`` device (no memory is allocated,
shapes only), runs a 2-token forward into ``StaticCache(config=text_config, max_cache_len=N)`` and returns,
per decoder layer, as plain frozen data:

- ``layer_type``: the cache layer type transformers assigns (``transformers.cache_utils.get_layer_types_and_kwargs``,
  called, not re-implemented: ``layer_types`` of the config, or inferred from ``sliding_window`` /
  ``attention_chunk_size``; ``moe``/``mlp`` and KV-sharing consumers become ``dummy``);
- ``window``: the ``sliding_window`` that function passes to a sliding / chunked cache layer;
- ``mixer``: class name of the layer's token mixer (``LlamaAttention``, ``NemotronHMamba2Mixer`` ...);
- ``num_kv_heads``, ``head_dim``, ``v_head_dim``: read from the key and value tensors the layer's attention
  module hands to ``Cache.update`` (``[batch, heads, tokens, dim]``); for an MLA module (DeepSeek) those are
  the latent (``kv_lora_rank``) and the rope key (``qk_rope_head_dim``), one "head" each;
- ``tensors``: every tensor the StaticCache layer holds after the forward (keys, values, the DSA indexer keys,
  conv and recurrent states), with shape and dtype, so bytes follow;
- ``attends_as`` / ``shared_from``: for a layer whose cache is another layer's (``kv_sharing_modes`` 'reuse',
  Gemma 4), its own attention type and the index of the 'store' layer of that type.

The model is built in bfloat16, so cache tensors are bf16 unless a module keeps its state in another dtype
(recorded per tensor). Nothing is shrunk: on the meta device a weight costs no memory and no time, the
whole build and forward take well under a second per model (measured on a 2-core CPU), and leaving the
config untouched means no layout key can be changed by mistake. Only ``quantization_config`` (how the
checkpoint's weights are stored; it does not change the cache) is dropped before the build.

Model types transformers 5.23 has no config class for are mapped by :data:`ORACLE_ALIASES` (each with
its reason); any other unknown model_type raises :class:`OracleUnavailable`.

Some families keep what they cache outside a StaticCache, and are read where they keep it:

- :data:`DYNAMIC_CACHE_TYPES` (DeepSeek-V4): the model refuses a StaticCache, so the forward runs
  ``max_cache_len`` tokens into its own ``DynamicCache`` (its layers are V4's ``DeepseekV4CSACache`` /
  ``DeepseekV4HCACache``), and the tensors are what that cache holds after those tokens: ``keys`` (and
  ``values`` unless they are the same tensor), ``compressed_kv[compressor|indexer]``, the unfinished window
  ``buffer_kv`` / ``buffer_gate`` and the CSA ``overlap_kv`` / ``overlap_gate``;
- state held by the token mixer module itself (RecurrentGemma's ``conv1d_state`` and
  ``rg_lru.recurrent_states``): recorded as ``conv_states[0]`` / ``recurrent_states[0]`` of that layer;
- :data:`OWN_CACHE_TYPES` (RWKV, xLSTM, XLNet): a cache the model returns rather than a Cache object
  (``state``, ``cache_params``, ``mems``), read per layer from the forward's output.

The model is put in eval mode, and parameters a class creates outside the meta device (XLNet's
``nn.Parameter(torch.FloatTensor(...))``) are moved there.

Results are cached (``functools.lru_cache``) per (config, max_cache_len). torch and transformers are imported
on first use only.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import json
from dataclasses import dataclass, field
from typing import Any

# model_type transformers 5.23 has no class for -> (transformers model_type, key renames, reason).
ORACLE_ALIASES: dict[str, tuple[str, dict[str, str], str]] = {
    "kimi_k2": (
        "deepseek_v3",
        {},
        "Kimi-K2 ships remote code; its config.json names DeepseekV3ForCausalLM in `architectures` and has "
        "DeepseekV3Config's keys",
    ),
    "RefinedWebModel": (
        "falcon",
        {"n_layer": "num_hidden_layers", "n_head": "num_attention_heads", "n_head_kv": "num_kv_heads"},
        "pre-transformers Falcon remote code (RWForCausalLM); FalconConfig is its port, with these key renames",
    ),
    "RefinedWeb": (
        "falcon",
        {"n_layer": "num_hidden_layers", "n_head": "num_attention_heads", "n_head_kv": "num_kv_heads"},
        "pre-transformers Falcon remote code (RWForCausalLM); FalconConfig is its port, with these key renames",
    ),
}

# model_type -> why its cache is read from a DynamicCache filled with max_cache_len tokens.
DYNAMIC_CACHE_TYPES: dict[str, str] = {
    "deepseek_v4": "DeepseekV4PreTrainedModel: the compressor state lives on V4's own cache layers "
    "(DeepseekV4HCACache / DeepseekV4CSACache) and 'isn't compatible with StaticCache' (modeling_deepseek_v4.py)",
    "inkling_text": "InklingAttention cannot run a StaticCache longer than its sliding window (its relative bias is "
    "built for the window while a static sliding layer hands back max_cache_len keys: 'Attempting to broadcast a "
    "dimension of length 512'); a DynamicCache runs",
    "inkling2_text": "as inkling_text (Inkling2SlidingAttention, window 1024)",
    "cpmant": "CpmAntModel.forward prepends prompt_length learned prompt tokens to the request and caches them with "
    "it (modeling_cpmant.py), so a StaticCache of max_cache_len slots cannot hold a max_cache_len-token request; a "
    "DynamicCache shows every token cached",
}

# Model types that keep their cache outside transformers' Cache classes: model_type -> (the forward's output
# attribute holding it, the layer type the reading reports, tokens fed ("max": max_cache_len), why). The forward
# runs with no cache given and the per-layer tensors are read from that output.
OWN_CACHE_TYPES: dict[str, tuple[str, str, str, str]] = {
    "rwkv": ("state", "rwkv_state", "2", "RwkvModel.forward keeps RWKV-4's state as five (batch, hidden_size, "
             "num_hidden_layers) tensors returned as outputs.state (modeling_rwkv.py), not in a Cache"),
    "xlstm": ("cache_params", "mlstm_state", "2", "xLSTMModel.forward keeps its own xLSTMCache (rnn_state per layer: "
              "C, n, m; modeling_xlstm.py) and refuses a StaticCache"),
    "xlnet": ("mems", "hidden_states", "max", "XLNetModel.forward returns each layer's input hidden states as "
              "outputs.mems (cache_mem: the last mem_len tokens; modeling_xlnet.py), from which K and V are recomputed"),
    "reformer": ("past_buckets_states", "hidden_states", "max", "ReformerModel keeps a ReformerDynamicCache of each "
                 "layer's input hidden states and, on LSH layers, their bucket ids (modeling_reformer.py)"),
}  # fmt: skip

# Model types whose forward reads tensor values as Python numbers at several places (so no single stand-in lets
# it run on meta): model_type -> why. They are built on the CPU in float32 (random weights) and run for real;
# their cached hidden states are compared by shape and priced in the model dtype (tests/test_oracle.py
# KNOWN_DIFFERENCES "cpu-float32-run").
CPU_RUN_TYPES: dict[str, str] = {
    "reformer": "ReformerModel reads position_ids.max().item() (AxialPositionEmbeddings) and attention_mask.sum()"
    ".item() (its padding to whole chunks); its CPU layer norm refuses bfloat16 activations",
}

# Model types whose 2-token meta forward stops at an op that reads tensor values, which the meta device has none
# of, outside what is cached: model_type -> (module class, method, stand-in name, why the stand-in keeps every
# cached shape). A stand-in replaces that method for the forward only (:func:`_standins`); the attention modules,
# and so every K/V tensor handed to the cache, run unchanged.
META_STANDINS: dict[str, tuple[str, str, str, str]] = {
    "dbrx": (
        "DbrxExperts",
        "forward",
        "zeros",
        "the routed experts pick their tokens with torch.nonzero (modeling_dbrx.py DbrxExperts); the experts' "
        "output has their input's shape whatever the routing (it is zeros_like(input) when no expert is hit), "
        "so the stand-in returns zeros of that shape",
    ),
    "longcat_flash": (
        "LongcatFlashExperts",
        "forward",
        "zeros",
        "as DBRX: LongcatFlashExperts routes with torch.nonzero and returns a tensor of its input's shape",
    ),
    "jetmoe": (
        "JetMoeTopKGating",
        "forward",
        "fixed_routing",
        "the router of both the attention's query experts (MoA) and the MLP experts reads its per-expert token "
        "counts as Python ints (expert_size.tolist()); the stand-in routes each token's k-th slot to expert k, a "
        "valid top-k routing, so every query and output keeps the shape any routing gives; the K/V projection "
        "(kv_proj) is not routed",
    ),
    "mpt": (
        "StaticCache",
        "get_seq_length",
        "tokens_fed",
        "MptAttention reads the cache's length as a Python number to slice its ALiBi bias (modeling_mpt.py); a "
        "StaticCache counts its filled slots from the cached values (keys.any()), which meta has none of; the "
        "stand-in answers the tokens handed to that layer so far (2), what the count would be",
    ),
}

# Model types whose forward cannot run a cache longer than a config length: model_type -> (that attribute, why).
# The cache is read at that length instead (the reading's ``max_cache_len`` says which length was read).
POSITION_LIMITED: dict[str, tuple[str, str]] = {
    "mpt": ("max_seq_len", "MPT's ALiBi bias is built for max_seq_len positions (build_mpt_alibi_tensor) and does not "
            "broadcast over a longer cache"),
}

# Module attributes in which a token mixer keeps its own recurrent state (RecurrentGemmaRecurrentBlock).
_MODULE_STATES = (("conv1d_state", "conv_states[0]"), ("recurrent_states", "recurrent_states[0]"))

# Child attribute names under which a decoder layer keeps its token mixer (attention, Mamba, conv ...).
_MIXER_NAMES = (
    "cross_attn",
    "self_attn",
    "attn",
    "attention",
    "self_attention",
    "linear_attn",
    "mamba",
    "mixer",
    "conv",
    "short_conv",
    "token_mixer",
    "temporal_block",
)

# Config attributes worth reporting, read from transformers' resolved text config (its defaults applied).
_CONFIG_ATTRS = (
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "hidden_size",
    "sliding_window",
    "attention_chunk_size",
    "kv_lora_rank",
    "qk_rope_head_dim",
    "index_head_dim",
    "max_position_embeddings",
    "num_kv_shared_layers",
    "compress_rates",
)


class OracleUnavailable(Exception):
    """transformers 5.23 cannot build this config (no config class, or the meta build/forward failed)."""


@dataclass(frozen=True)
class OracleTensor:
    """One tensor of a StaticCache layer: ``name`` (keys, values, indexer_keys, conv_states[i],
    recurrent_states[i]), ``shape`` with the batch dimension (batch = 1), ``dtype`` (``bfloat16`` ...)."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    itemsize: int

    @property
    def nbytes(self) -> int:
        """Bytes the tensor would take (elements × itemsize)."""
        n = self.itemsize
        for d in self.shape:
            n *= d
        return n


@dataclass(frozen=True)
class OracleLayer:
    """transformers' reading of one decoder layer (see the module docstring)."""

    index: int
    layer_type: str
    cache_layer: str
    mixer: str
    window: int | None
    num_kv_heads: int | None
    head_dim: int | None
    v_head_dim: int | None
    tensors: tuple[OracleTensor, ...]
    attends_as: str | None = None
    shared_from: int | None = None

    @property
    def nbytes(self) -> int:
        """Bytes of all this layer's StaticCache tensors."""
        return sum(t.nbytes for t in self.tensors)

    def tensor(self, prefix: str) -> OracleTensor | None:
        """The first tensor whose name starts with ``prefix`` (``conv``, ``recurrent``, ``keys`` ...)."""
        return next((t for t in self.tensors if t.name.startswith(prefix)), None)


@dataclass(frozen=True)
class OracleReading:
    """transformers' reading of a whole config.json.

    Attributes:
        model_type: the model_type transformers built (after :data:`ORACLE_ALIASES`).
        text_model_type: the decoder config's model_type (``gemma3_text`` inside ``gemma3``).
        config_class, model_class: transformers class names used.
        max_cache_len: N given to StaticCache.
        method: how the shapes were obtained (``meta forward``).
        layers: one :class:`OracleLayer` per decoder layer.
        config: selected attributes of the resolved text config (:data:`_CONFIG_ATTRS`), class defaults applied.
        notes: anything the oracle did to the config (alias used, keys dropped).
    """

    model_type: str
    text_model_type: str
    config_class: str
    model_class: str
    max_cache_len: int
    method: str
    layers: tuple[OracleLayer, ...]
    config: tuple[tuple[str, Any], ...] = field(default=())
    notes: tuple[str, ...] = ()

    @property
    def nbytes(self) -> int:
        """Bytes of the whole StaticCache (batch 1)."""
        return sum(layer.nbytes for layer in self.layers)

    def attr(self, name: str) -> Any:
        """A resolved config attribute from :attr:`config` (None when the class has none)."""
        return dict(self.config).get(name)


def read_with_transformers(config: dict, max_cache_len: int) -> OracleReading:
    """transformers 5.23's reading of a parsed config.json (see the module docstring).

    Raises:
        OracleUnavailable: transformers has no class for the model_type, or building / running it failed
            (the message says which step and why).
    """
    return _read_cached(json.dumps(config, sort_keys=True), max_cache_len)


@functools.lru_cache(maxsize=None)
def _read_cached(config_json: str, max_cache_len: int) -> OracleReading:
    import torch
    import transformers
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, StaticCache
    from transformers.cache_utils import get_layer_types_and_kwargs
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    transformers.logging.set_verbosity_error()
    raw = json.loads(config_json)
    notes: list[str] = []
    model_type = raw.pop("model_type", None)
    if model_type in ORACLE_ALIASES and model_type not in CONFIG_MAPPING_NAMES:
        target, renames, reason = ORACLE_ALIASES[model_type]
        notes.append(f"model_type {model_type!r} built as {target!r}: {reason}")
        for old, new in renames.items():
            if old in raw and new not in raw:
                raw[new] = raw.pop(old)
        model_type = target
    if model_type not in CONFIG_MAPPING_NAMES:
        raise OracleUnavailable(f"transformers {transformers.__version__} has no config class for {model_type!r}")
    if raw.pop("quantization_config", None) is not None:
        notes.append("quantization_config dropped (weight storage only)")
    try:
        full = AutoConfig.for_model(model_type, **raw)
        text = full.get_text_config(decoder=True)
    except Exception as e:  # noqa: BLE001 - reported as the oracle being unavailable
        raise OracleUnavailable(f"{model_type}: building the config failed: {type(e).__name__}: {e}") from e
    text = copy.deepcopy(text)
    text._attn_implementation = "eager"  # the plain path: K and V reach the cache exactly as computed

    layer_types, layer_kwargs = get_layer_types_and_kwargs(text)
    if model_type in POSITION_LIMITED:
        attr, why = POSITION_LIMITED[model_type]
        limit = getattr(text, attr)
        if max_cache_len > limit:
            notes.append(f"cache read at {attr} = {limit} tokens, not {max_cache_len}: {why}")
            max_cache_len = limit
    if model_type in CPU_RUN_TYPES:
        notes.append(f"built on the CPU in float32 and run for real: {CPU_RUN_TYPES[model_type]}")
        try:
            model = AutoModelForCausalLM.from_config(text, dtype=torch.float32)
        except Exception as e:  # noqa: BLE001
            raise OracleUnavailable(f"{model_type}: building the model failed: {type(e).__name__}: {e}") from e
        model.eval()
        return _read_own_cache(model, text, model_type, max_cache_len, layer_types, notes, device="cpu")
    try:
        with torch.device("meta"):
            try:  # a wrapper's text config (Qwen3VLTextConfig ...) has no causal-LM class: its base text model
                model = AutoModelForCausalLM.from_config(text, dtype=torch.bfloat16)
            except ValueError:
                causal = getattr(transformers, type(text).__name__.replace("TextConfig", "ForCausalLM"), None)
                if causal is not None:  # MllamaTextConfig -> MllamaForCausalLM (not in the auto mapping)
                    model = causal(text).to(torch.bfloat16)
                else:
                    model = AutoModel.from_config(text, dtype=torch.bfloat16)
    except Exception as e:  # noqa: BLE001
        raise OracleUnavailable(f"{model_type}: building the model on meta failed: {type(e).__name__}: {e}") from e
    if any(p.device.type != "meta" for p in model.parameters()):  # XLNet: nn.Parameter(torch.FloatTensor(...))
        model.to("meta", torch.bfloat16)
        notes.append("parameters created outside the meta device (torch.FloatTensor) moved to meta in bfloat16")
    model.eval()  # inference: no dropout (Reformer's and others' training-only checks stay off)

    if model_type in OWN_CACHE_TYPES:
        return _read_own_cache(model, text, model_type, max_cache_len, layer_types, notes)

    dynamic = model_type in DYNAMIC_CACHE_TYPES
    if dynamic:
        notes.append(f"read from a DynamicCache after {max_cache_len} tokens: {DYNAMIC_CACHE_TYPES[model_type]}")
        cache = transformers.DynamicCache(config=text)
    else:
        cache = StaticCache(config=text, max_cache_len=max_cache_len)
    extra: dict = {}
    if getattr(text, "cross_attention_layers", None) and model_type == "mllama":
        # the cross-attention layers cache the vision states: transformers' own cache for them
        # (MllamaForConditionalGeneration._prepare_static_cache), fed vision states of that length
        with torch.device("meta"):
            wrapper = transformers.MllamaForConditionalGeneration(full).to(torch.bfloat16)
        cache = wrapper._prepare_static_cache("static", 1, max_cache_len, None, model_kwargs={})
        length = cache.layers[text.cross_attention_layers[0]].max_cache_len
        extra["cross_attention_states"] = torch.zeros((1, length, text.hidden_size), dtype=torch.bfloat16, device="meta")
        notes.append(f"cross-attention layers fed {length} vision states (transformers' _prepare_static_cache)")
    seen: dict[int, tuple[tuple[int, ...], tuple[int, ...]]] = {}
    update = cache.update

    stored: dict[int, int] = {}

    def recording_update(key_states, value_states, layer_idx, *args, **kwargs):
        if key_states is not None and value_states is not None:
            seen.setdefault(layer_idx, (tuple(key_states.shape), tuple(value_states.shape)))
            stored[layer_idx] = stored.get(layer_idx, 0) + key_states.shape[-2]
        return update(key_states, value_states, layer_idx, *args, **kwargs)

    cache.update = recording_update
    ids = torch.zeros((1, max_cache_len if dynamic else 2), dtype=torch.long, device="meta")
    standin = META_STANDINS.get(model_type)
    if standin:
        notes.append(f"{standin[0]}.{standin[1]} stood in for on meta: {standin[3]}")
    try:
        with torch.no_grad(), _standins(standin, model, cache, stored):
            model(input_ids=ids, **{_cache_kwarg(model): cache}, use_cache=True, **extra)
    except Exception as e:  # noqa: BLE001
        raise OracleUnavailable(f"{model_type}: the 2-token meta forward failed: {type(e).__name__}: {e}") from e

    n = text.num_hidden_layers
    blocks = _decoder_layers(model, n)
    sharing = getattr(text, "kv_sharing_modes", None) or [None] * n
    base_types = list(getattr(text, "layer_types", None) or layer_types)
    layers = []
    for i, (layer_type, kwargs, cache_layer) in enumerate(zip(layer_types, layer_kwargs, cache.layers, strict=True)):
        k, v = seen.get(i, (None, None))
        attends_as = shared_from = None
        if sharing[i] == "reuse":
            attends_as = base_types[i]
            stores = [j for j in range(n) if sharing[j] == "store" and base_types[j] == attends_as]
            shared_from = stores[0] if stores else None
        layers.append(
            OracleLayer(
                index=i,
                layer_type=layer_type,
                cache_layer=type(cache_layer).__name__,
                mixer=_mixer_name(blocks[i]) if blocks is not None else "",
                window=kwargs.get("sliding_window"),
                num_kv_heads=k[1] if k else None,
                head_dim=k[-1] if k else None,
                v_head_dim=v[-1] if v else None,
                tensors=_layer_tensors(cache_layer) + _module_states(blocks[i] if blocks is not None else None),
                attends_as=attends_as,
                shared_from=shared_from,
            )
        )
    return OracleReading(
        model_type=model_type,
        text_model_type=str(getattr(text, "model_type", model_type)),
        config_class=type(text).__name__,
        model_class=type(model).__name__,
        max_cache_len=max_cache_len,
        method="meta forward (DynamicCache)" if dynamic else "meta forward",
        layers=tuple(layers),
        config=tuple((a, _plain(_attr(text, a))) for a in _CONFIG_ATTRS),
        notes=tuple(notes),
    )


def _read_own_cache(
    model, text, model_type: str, max_cache_len: int, layer_types, notes: list, device: str = "meta"
) -> OracleReading:
    """A model of :data:`OWN_CACHE_TYPES`: a forward with no cache given, then each layer's slice of what the
    model returns as its cache (RWKV's ``state``, xLSTM's ``cache_params.rnn_state``, XLNet's ``mems``).

    Raises:
        OracleUnavailable: the forward failed.
    """
    import torch
    from transformers import PreTrainedModel

    attr, layer_type, fed, why = OWN_CACHE_TYPES[model_type]
    tokens = max_cache_len if fed == "max" else int(fed)
    notes.append(f"read from the model's own cache after {tokens} tokens: {why}")
    extra = {"use_mems": True} if attr == "mems" else {}
    warn = PreTrainedModel.warn_if_padding_and_no_attention_mask
    PreTrainedModel.warn_if_padding_and_no_attention_mask = lambda *a, **k: None  # reads token values
    try:
        with torch.no_grad(), torch.device(device):
            out = model(input_ids=torch.ones((1, tokens), dtype=torch.long), use_cache=True, **extra)
    except Exception as e:  # noqa: BLE001
        raise OracleUnavailable(f"{model_type}: the meta forward failed: {type(e).__name__}: {e}") from e
    finally:
        PreTrainedModel.warn_if_padding_and_no_attention_mask = warn
    held = getattr(out, attr)
    n = text.num_hidden_layers
    blocks = _decoder_layers(model, n)
    layers = []
    for i in range(n):
        if attr == "state":  # five (B, hidden, layers) tensors: this layer's slice of each
            tensors = tuple(_tensor(f"state[{j}]", t[:, :, i]) for j, t in enumerate(held))
        elif attr == "cache_params":
            tensors = tuple(_tensor(f"rnn_state[{j}]", t) for j, t in enumerate(held.rnn_state[i]))
        elif attr == "past_buckets_states":  # states (B, tokens, hidden); LSH buckets (B, heads, hashes, tokens)
            buckets = held.buckets_cache[i]
            tensors = (_tensor("states", held.states_cache[i]),)
            tensors += (_tensor("buckets", buckets),) if buckets.numel() else ()
        else:  # mems: (tokens kept, B, d_model)
            tensors = (_tensor("mems", held[i]),)
        layers.append(
            OracleLayer(
                index=i,
                layer_type=layer_type,
                cache_layer=type(held).__name__,
                mixer=_mixer_name(blocks[i]) if blocks is not None else "",
                window=None,
                num_kv_heads=None,
                head_dim=None,
                v_head_dim=None,
                tensors=tensors,
            )
        )
    return OracleReading(
        model_type=model_type,
        text_model_type=str(getattr(text, "model_type", model_type)),
        config_class=type(text).__name__,
        model_class=type(model).__name__,
        max_cache_len=tokens,
        method="meta forward (the model's own cache)",
        layers=tuple(layers),
        config=tuple((a, _plain(_attr(text, a))) for a in _CONFIG_ATTRS),
        notes=tuple(notes),
    )


@contextlib.contextmanager
def _standins(standin: tuple[str, str, str, str] | None, model, cache, stored: dict[int, int]):
    """Replace one method for the meta forward (:data:`META_STANDINS`), restored afterwards."""
    import torch

    if standin is None:
        yield
        return
    cls_name, method, kind, _ = standin
    if kind == "tokens_fed":  # the cache object's own method
        cache.get_seq_length = lambda layer_idx=0, *a, **k: stored.get(layer_idx, 0)
        yield
        return
    cls = next(type(m) for m in model.modules() if type(m).__name__ == cls_name)
    original = getattr(cls, method)

    def zeros(self, hidden_states, *args, **kwargs):
        return torch.zeros_like(hidden_states)

    def fixed_routing(self, hidden_states):
        tokens = hidden_states.shape[0]
        logits = self.layer(hidden_states).float()
        experts = torch.arange(self.top_k, device=hidden_states.device).repeat(tokens)  # token t, slot k -> expert k
        _, index_sorted_experts = experts.sort(0)
        batch_index = index_sorted_experts.div(self.top_k, rounding_mode="trunc")
        gates = torch.softmax(logits[:, : self.top_k], dim=1).type_as(hidden_states).flatten()
        expert_size = [tokens if e < self.top_k else 0 for e in range(self.num_experts)]
        return index_sorted_experts, batch_index, gates[index_sorted_experts], expert_size, logits

    setattr(cls, method, {"zeros": zeros, "fixed_routing": fixed_routing}[kind])
    try:
        yield
    finally:
        setattr(cls, method, original)


def _cache_kwarg(model) -> str:
    """The forward argument a model takes its cache in: ``past_key_values``, or ``cache_params`` (Mamba)."""
    import inspect

    params = inspect.signature(model.forward).parameters
    return "cache_params" if "cache_params" in params and "past_key_values" not in params else "past_key_values"


def _attr(config, name: str) -> Any:
    """``getattr(config, name, None)``; a heterogeneous config (per-layer values, Gemma 4) raises on a
    global read of a per-layer attribute: reported as ``"per-layer"``."""
    try:
        return getattr(config, name, None)
    except Exception:  # noqa: BLE001 - transformers' AmbiguousGlobalPerLayerAttributeError
        return "per-layer"


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return tuple(_plain(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((str(k), _plain(v)) for k, v in value.items()))
    return str(value)


def _decoder_layers(model, n: int):
    """The ModuleList of the ``n`` decoder layers (``model.layers``, ``transformer.h`` ...), or None."""
    import torch

    for _, module in model.named_modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) == n:
            return module
    return None


def _mixer_name(block) -> str:
    children = dict(block.named_children())
    for name in _MIXER_NAMES:
        if name in children:
            return type(children[name]).__name__
    return ""


def _tensor(name: str, t) -> OracleTensor:
    return OracleTensor(name, tuple(int(d) for d in t.shape), str(t.dtype).removeprefix("torch."), t.element_size())


def _layer_tensors(layer) -> tuple[OracleTensor, ...]:
    out = []
    for name in ("keys", "values", "indexer_keys"):
        t = getattr(layer, name, None)
        if t is not None and not (name == "values" and t is getattr(layer, "keys", None)):  # V4: values = keys
            out.append(_tensor(name, t))
    # recurrent states (LinearAttentionLayer), and DeepSeek-V4's compressor entries and unfinished windows
    for name in ("conv_states", "recurrent_states", "compressed_kv", "buffer_kv", "buffer_gate", "overlap_kv",
                 "overlap_gate"):  # fmt: skip
        states = getattr(layer, name, None) or {}
        for idx, t in sorted(states.items()):
            if t is not None:
                out.append(_tensor(f"{name}[{idx}]", t))
    return tuple(out)


def _module_states(block) -> tuple[OracleTensor, ...]:
    """State tensors a decoder layer's own modules hold (:data:`_MODULE_STATES`), outside the Cache object."""
    import torch

    if block is None:
        return ()
    out = []
    for _, module in block.named_modules():
        for attr, name in _MODULE_STATES:
            t = module.__dict__.get(attr)
            if isinstance(t, torch.Tensor):
                out.append(_tensor(name, t))
    return tuple(out)


@dataclass(frozen=True)
class OracleParams:
    """transformers' parameter count of a config.json's causal LM, built on the meta device.

    Attributes:
        total: ``sum(p.numel() for p in model.parameters())`` (tied weights once).
        embedding: the input embedding plus an untied output embedding (lm_head).
        moe_layers: decoder layers whose MLP holds routed experts (an ``experts`` child).
        expert: parameters of one routed expert of the first MoE layer (its slice of every expert tensor),
            or None for a dense model.
        experts: routed experts per MoE layer, or None.
    """

    total: int
    embedding: int
    moe_layers: int
    expert: int | None
    experts: int | None


def count_parameters(config: dict) -> OracleParams:
    """transformers 5.23's parameter count of ``config`` (see :class:`OracleParams`), cached per config.

    Raises:
        OracleUnavailable: no config class, or the meta build failed.
    """
    return _params_cached(json.dumps(config, sort_keys=True))


@functools.lru_cache(maxsize=None)
def _params_cached(config_json: str) -> OracleParams:
    import torch
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    transformers.logging.set_verbosity_error()
    raw = json.loads(config_json)
    model_type = raw.pop("model_type", None)
    if model_type in ORACLE_ALIASES and model_type not in CONFIG_MAPPING_NAMES:
        target, renames, _ = ORACLE_ALIASES[model_type]
        for old, new in renames.items():
            if old in raw and new not in raw:
                raw[new] = raw.pop(old)
        model_type = target
    if model_type not in CONFIG_MAPPING_NAMES:
        raise OracleUnavailable(f"transformers {transformers.__version__} has no config class for {model_type!r}")
    raw.pop("quantization_config", None)  # how weights are stored, not how many there are
    try:
        config = AutoConfig.for_model(model_type, **raw)
        with torch.device("meta"):
            try:
                model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
            except ValueError:  # a multimodal wrapper: its image-text-to-text class (vision tower included)
                model = transformers.AutoModelForImageTextToText.from_config(config, dtype=torch.bfloat16)
    except Exception as e:  # noqa: BLE001
        raise OracleUnavailable(f"{model_type}: building the model on meta failed: {type(e).__name__}: {e}") from e
    total = sum(p.numel() for p in model.parameters())
    inp, out = model.get_input_embeddings(), model.get_output_embeddings()
    embedding = inp.weight.numel()
    if out is not None and out.weight is not inp.weight:
        embedding += sum(p.numel() for p in out.parameters())
    moe_layers, expert, experts = 0, None, None
    for name, module in model.named_modules():
        if name.endswith(".experts") and not name.endswith("shared_experts"):
            tensors = list(module.parameters(recurse=False))
            if not tensors:
                continue
            moe_layers += 1
            if expert is None:
                experts = tensors[0].shape[0]
                expert = sum(t.numel() // t.shape[0] for t in tensors)
    return OracleParams(total, embedding, moe_layers, expert, experts)
