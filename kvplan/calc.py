"""Exact KV-cache byte math per layer kind: pure functions on Python ints, no I/O, no floats.

The plain formula (Vaswani et al. 2017, cached K and V per layer)::

    bytes = 2 × num_layers × H_kv × head_dim × S × bytes_per_element

e.g. Llama-3-8B (L=32, H_kv=8, d=128, bf16): 2 × 32 × 8 × 128 × 2 B = 131,072 B per token, and
536,870,912 B (0.5 GiB) at S = 4096. Real models break it per layer; kvplan sums per layer kind:

- full: S tokens of ``row(H_kv × head_dim) + row(H_kv × v_head_dim)`` bytes each;
- sliding / chunked: ``min(S, window)`` tokens of the same (vLLM ``SlidingWindowSpec`` /
  ``ChunkedLocalAttentionSpec``; llama.cpp's SWA cache);
- mla: S tokens of ``row(kv_lora_rank + qk_rope_head_dim)`` bytes, no factor 2 (DeepSeek-V2 paper §2.1;
  vLLM ``MLAAttentionSpec``), kept whole on every tensor-parallel rank; plus ``row(index_head_dim)``
  per token for DeepSeek-V3.2's sparse-attention indexer key;
- mamba, mamba2, gdn, short_conv, linear_attention, rglru: a fixed state per request whatever S, the conv
  and recurrent tensors of :meth:`kvplan.specs.StateConfig.tensors` (vLLM ``MambaStateShapeCalculator``;
  rglru: transformers' RecurrentGemma, which no engine serves);
- compressed (DeepSeek-V4): ``min(S, window)`` tokens of ``row(head_dim)`` (one shared K=V vector), plus
  ``S // m`` compressed entries of ``row(head_dim)`` and, on CSA layers, ``row(index_head_dim)`` (the
  indexer key), plus the compressor's fixed fp32 state (:meth:`kvplan.specs.CompressedConfig.state_elements`),
  all kept whole on every TP rank (vLLM ``max_tp_shards=1``);
- rwkv4, mlstm (and the ``cca`` / ``sconv`` states kept beside ZAYA's and Inkling's attention layers): a fixed
  state per request in transformers' own shapes and dtypes (no engine kvplan models serves them);
- hidden (XLNet, Reformer): ``min(S, window)`` tokens (every token without a window) of ``row(width)``, the
  layer's input hidden states, plus ``8 × index_width`` bytes per token of int64 LSH bucket ids (Reformer);
- a model with ``prefix_tokens`` (CPM-Ant's learned prompt) caches ``S + prefix_tokens`` tokens in every
  token-caching layer (transformers ``CpmAntModel.forward`` prepends them to every request);
- shared: 0 B (reads an earlier layer's cache); none: 0 B (MLP/MoE-only block);
- cross: K and V of the request's ``encoder_tokens`` (image tokens), a fixed cost per request whatever S
  (vLLM 0.33 ``CrossAttentionSpec``: one static allocation of ``cdiv(num_encoder_tokens, block_size)``
  blocks per request, ``v1/core/kv_cache_coordinator.py``; transformers' Mllama ``_prepare_static_cache``:
  ``num_images × max_num_tiles × ((image_size // patch_size)² + 1)`` tokens per cross layer).

Each layer has its own geometry (H_kv, head_dim, v_head_dim: Gemma 4's global layers, OpenELM), so
kvplan sums layer by layer and reports the sums per kind.

``row()`` is :meth:`kvplan.dtypes.KVDtype.row_bytes` (block scales included). Tensor parallelism keeps
``max(1, H_kv // TP)`` KV heads per rank (vLLM ``get_num_kv_heads``: heads are replicated when
TP > H_kv). With ``block_size`` set, each layer group's tokens round up to whole blocks per request.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvplan.dtypes import KVDtype, get_kv_dtype
from kvplan.errors import UsageError
from kvplan.specs import COMPRESSED_KIND, CROSS_KIND, HIDDEN_KIND, KV_HEAD_KINDS, LAYER_KINDS, LayerSpec, ModelSpec
from kvplan.units import MAX_BATCH, MAX_TOKENS

TOKEN_KINDS = ("full", "sliding", "chunked", "mla", COMPRESSED_KIND, HIDDEN_KIND)
INDEX_BYTES = 8  # an int64 LSH bucket id (Reformer: torch.argmax's output dtype)


def cdiv(a: int, b: int) -> int:
    """Ceiling division of non-negative ints."""
    return -(-a // b)


def largest_true(ok, lo: int, hi: int) -> int:
    """The largest k in [lo, hi] with ``ok(k)``, by bisection, for a monotone ``ok`` (true up to some k) with
    ``ok(lo)`` known true; ``lo`` when ``hi <= lo``."""
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def kv_heads_per_rank(num_kv_heads: int, tensor_parallel_size: int = 1) -> int:
    """KV heads one tensor-parallel rank stores: ``max(1, H_kv // TP)`` (replicated when TP > H_kv).

    Source: vLLM ``ModelConfig.get_num_kv_heads``.
    """
    return max(1, num_kv_heads // tensor_parallel_size)


# State dimensions vLLM splits across TP ranks with ``divide()`` (which asserts divisibility), per state kind.
# Source: vLLM 0.33 ``MambaStateShapeCalculator`` and the mixers' column-parallel projections
# (mamba_mixer.py, mamba_mixer2.py, gdn / qwen3_next.py, short_conv.py, minimax lightning attention).
_STATE_SPLIT_FIELDS = {
    "mamba": ("d_inner",),
    "mamba2": ("num_heads",),
    "gdn": ("num_k_heads", "num_v_heads"),
    "short_conv": ("d_inner",),
    "linear_attention": ("num_heads",),
    "rglru": ("d_inner",),
    "rwkv4": ("d_inner",),
    "mlstm": ("num_heads",),
    "cca": ("num_heads", "num_k_heads"),
    "sconv": ("d_inner",),
}


def state_split_dims(spec: ModelSpec) -> tuple[tuple[str, int], ...]:
    """The distinct ``(kind.field, size)`` state dimensions TP must divide, e.g. ``("gdn.num_v_heads", 32)``."""
    return spec.memo(("state_split_dims",), lambda: _state_split_dims(spec))


def _state_split_dims(spec: ModelSpec) -> tuple[tuple[str, int], ...]:
    dims = set()
    for layer in spec.layers:
        state = layer.state
        if state is None:
            continue
        for field in _STATE_SPLIT_FIELDS.get(state.kind, ()):
            size = getattr(state, field)
            if size:
                dims.add((f"{state.kind}.{field}", size))
    return tuple(sorted(dims))


def _tp_allowed(spec: ModelSpec, tp: int) -> bool:
    heads = spec.kv_head_counts or (spec.num_kv_heads,)
    return (
        spec.num_q_heads % tp == 0
        and all(h % tp == 0 or tp % h == 0 for h in heads)
        and all(size % tp == 0 for _, size in state_split_dims(spec))
    )


def valid_tp_sizes(spec: ModelSpec, limit: int = 64) -> list[int]:
    """TP degrees the model's heads allow: H_q % TP == 0, for every attention layer's H_kv
    H_kv % TP == 0 or TP % H_kv == 0, and every recurrent state's split dimension (mamba/short_conv
    ``d_inner``, mamba2 / linear_attention ``num_heads``, gdn ``num_k_heads`` and ``num_v_heads``)
    divisible by TP (vLLM ``divide()`` asserts it; a 0-head rank would hold no state).

    Source: vLLM ``ModelConfig.verify_with_parallel_config`` (attention heads divisible by TP) and
    ``get_num_kv_heads`` (KV heads split, or replicated when TP > H_kv).
    """
    return [tp for tp in range(1, limit + 1) if _tp_allowed(spec, tp)]


def check_tp(spec: ModelSpec, tensor_parallel_size: int, flag: str = "--tp") -> None:
    """Raise UsageError unless the model's heads allow this TP (see :func:`valid_tp_sizes`)."""
    tp = tensor_parallel_size
    if isinstance(tp, bool) or not isinstance(tp, int) or tp < 1:
        raise UsageError(f"{flag}: {tp!r} must be an integer >= 1")
    if not _tp_allowed(spec, tp):
        allowed = ", ".join(str(t) for t in valid_tp_sizes(spec))
        heads = "/".join(str(h) for h in spec.kv_head_counts) or str(spec.num_kv_heads)
        state = "".join(f", {name}={size}" for name, size in state_split_dims(spec))
        raise UsageError(
            f"{flag}: {tensor_parallel_size} does not divide {spec.name}'s heads (H_q={spec.num_q_heads}, "
            f"H_kv={heads}{state}); allowed: {allowed or 'none'}"
        )


def resolve_kv_dtype(spec: ModelSpec, kv_dtype: str | KVDtype | None) -> KVDtype:
    """The KV dtype to use: the given one, or the model's dtype when None / ``auto``.

    Raises:
        UsageError: unknown dtype name.
    """
    if isinstance(kv_dtype, KVDtype):
        return kv_dtype
    if kv_dtype is None or str(kv_dtype).lower() == "auto":
        return get_kv_dtype(spec.dtype)
    return get_kv_dtype(kv_dtype)


def resolve_kv_dtypes(spec: ModelSpec, kv_dtype: str | KVDtype | None) -> tuple[KVDtype, KVDtype]:
    """(K dtype, V dtype): ``kv_dtype`` for both, or each of a ``K/V`` label (``q8_0/fp16``: llama.cpp's
    ``-ctk`` and ``-ctv`` when they differ, as :attr:`kvplan.fit.FitResult.kv_dtype` names them).

    Raises:
        UsageError: an unknown dtype name.
    """
    if isinstance(kv_dtype, str) and "/" in kv_dtype:
        k, _, v = kv_dtype.partition("/")
        return resolve_kv_dtype(spec, k), resolve_kv_dtype(spec, v)
    d = resolve_kv_dtype(spec, kv_dtype)
    return d, d


def kv_dtype_label(k: KVDtype, v: KVDtype) -> str:
    """The name of a cache of K in ``k`` and V in ``v``: the one name when they are alike, else ``K/V``."""
    return k.name if k.name == v.name else f"{k.name}/{v.name}"


def layer_token_bytes(
    layer: LayerSpec, kv_dtype: KVDtype, tensor_parallel_size: int = 1, v_dtype: KVDtype | None = None
) -> int:
    """Bytes one token costs in one layer on one TP rank (0 for state, shared and none layers).

    full/sliding/chunked: ``row(h × head_dim, h) + row(h × v_head_dim, h)`` with
    ``h = max(1, H_kv // TP)`` (the layer's own H_kv and head dims), the V row in ``v_dtype`` when given
    (llama.cpp's ``-ctv`` other than ``-ctk``: ``llama-kv-cache.cpp`` keeps K rows in ``type_k`` and V rows in
    ``type_v``); one-vector caches (MLA's latent, the compressed kind) are in ``kv_dtype``.
    mla: ``row(kv_lora_rank + qk_rope_head_dim)`` (one latent, every rank), plus ``row(index_head_dim)``
    for a DeepSeek-V3.2 indexer key (transformers caches it beside the latent, in the KV dtype).
    compressed: ``row(head_dim)``, the one K=V vector of a token in the sliding branch (every rank); the
    compressed entries are :func:`layer_compressed_bytes`.
    hidden: ``row(width)`` (the layer's input hidden state) plus ``8 × index_width`` bytes of int64 bucket ids
    (Reformer's LSH layers), whole on every rank (the residual stream is not sharded; no engine serves them).
    """
    if layer.kind in KV_HEAD_KINDS:
        h = kv_heads_per_rank(layer.num_kv_heads, tensor_parallel_size)
        return kv_dtype.row_bytes(h * layer.head_dim, h) + (v_dtype or kv_dtype).row_bytes(h * layer.v_head_dim, h)
    if layer.kind == "mla":
        assert layer.mla is not None  # guaranteed by build_spec
        index = kv_dtype.row_bytes(layer.mla.index_head_dim, 1) if layer.mla.index_head_dim else 0
        return kv_dtype.row_bytes(layer.mla.latent_dim, 1) + index
    if layer.kind == COMPRESSED_KIND:
        assert layer.compressed is not None  # guaranteed by build_spec
        return kv_dtype.row_bytes(layer.compressed.head_dim, 1)
    if layer.kind == HIDDEN_KIND:
        assert layer.hidden is not None  # guaranteed by build_spec
        return kv_dtype.row_bytes(layer.hidden.width, 1) + INDEX_BYTES * layer.hidden.index_width
    return 0


def layer_compressed_bytes(layer: LayerSpec, kv_dtype: KVDtype, seq_len: int, block_size: int | None = None) -> int:
    """Bytes of the compressed entries one request of ``seq_len`` tokens keeps in one ``compressed`` layer (0
    for other kinds and for ratio 0): ``(S // m) × (row(head_dim) + row(index_head_dim))``, the indexer key
    on CSA layers only, S rounded up to whole blocks when ``block_size`` is set; every TP rank keeps them.

    Source: transformers 5.23 ``modeling_deepseek_v4.py`` (``DeepseekV4HCACache.update_compressor_states``:
    one entry per closed window of m tokens, ``compressed_kv["compressor"]`` and, for CSA,
    ``compressed_kv["indexer"]``); vLLM 0.33 ``vllm/models/deepseek_v4/attention.py`` (``MLAAttentionSpec``
    with ``tokens_per_state = compress_ratio``, ``max_tp_shards=1``).
    """
    c = layer.compressed
    if layer.kind != COMPRESSED_KIND or c is None or not c.ratio:
        return 0
    per_entry = kv_dtype.row_bytes(c.head_dim, 1) + (kv_dtype.row_bytes(c.index_head_dim, 1) if c.index_head_dim else 0)
    return c.entries(tokens_cached(seq_len, None, block_size)) * per_entry


def layer_state_bytes(layer: LayerSpec, model_dtype: str, tensor_parallel_size: int = 1) -> int:
    """Fixed bytes one request keeps in one layer (recurrent state), 0 for token-caching kinds.

    The conv and ssm states are kept in their own dtypes (``conv_dtype`` / ``ssm_dtype``, default the
    model dtype), whatever the KV dtype; shapes per :meth:`kvplan.specs.StateConfig.tensors` (vLLM
    ``MambaStateShapeCalculator``), split across TP ranks. A ``compressed`` layer's compressor state is
    :meth:`~kvplan.specs.CompressedConfig.state_elements` float32 values (vLLM ``CompressorStateCache``),
    on every rank.
    """
    if layer.kind == COMPRESSED_KIND and layer.compressed is not None:
        return get_kv_dtype("fp32").bytes_for(layer.compressed.state_elements())
    if layer.state is None:
        return 0
    tensors = layer.state.tensors(model_dtype, tensor_parallel_size)
    return sum(get_kv_dtype(t.dtype).bytes_for(t.elements) for t in tensors)


def layer_cross_bytes(
    layer: LayerSpec,
    kv_dtype: KVDtype,
    tensor_parallel_size: int = 1,
    block_size: int | None = None,
    v_dtype: KVDtype | None = None,
) -> int:
    """Fixed bytes one request keeps in one ``cross`` layer (0 for other kinds): the K and V of its
    ``encoder_tokens`` (rounded up to whole blocks when ``block_size`` is set), in the KV dtype, with
    ``max(1, H_kv // TP)`` heads per rank.

    Source: vLLM 0.33 ``v1/kv_cache_interface.py`` ``CrossAttentionSpec`` (an ``AttentionSpec``: page =
    ``block_size × 2 × H_kv × head_size × dtype``) and ``v1/core/kv_cache_coordinator.py``
    (``CrossAttentionManager``: "a single static allocation of blocks based on the number of encoder input
    tokens"): ``cdiv(num_encoder_tokens, block_size)`` blocks per request, whatever the decoder length.
    """
    if layer.kind != CROSS_KIND:
        return 0
    h = kv_heads_per_rank(layer.num_kv_heads, tensor_parallel_size)
    per_token = kv_dtype.row_bytes(h * layer.head_dim, h) + (v_dtype or kv_dtype).row_bytes(h * layer.v_head_dim, h)
    return per_token * tokens_cached(layer.encoder_tokens, None, block_size)


def tokens_cached(seq_len: int, window: int | None, block_size: int | None = None) -> int:
    """Tokens a layer keeps for a request of ``seq_len`` tokens: ``min(S, window)``, rounded up to blocks."""
    tokens = seq_len if window is None else min(seq_len, window)
    if block_size:
        tokens = cdiv(tokens, block_size) * block_size
    return tokens


@dataclass(frozen=True, eq=False)
class LayerGroup:
    """Layers of one kind (and window) and what they cache for one request.

    Attributes:
        kind: one of ``full, sliding, chunked, mla, mamba, shared``.
        layers: number of layers in the group.
        window: the sliding window or chunk (tokens), or None.
        tokens_cached: tokens each layer keeps per request (after window and block rounding).
        bytes_per_token: bytes one cached token costs across all layers of the group (0 for state kinds).
        state_bytes: fixed bytes per request across the group (Mamba states, the encoder tokens of
            ``cross`` layers, DeepSeek-V4's compressor states; else 0).
        bytes: bytes per request: ``bytes_per_token × tokens_cached + state_bytes + compressed_bytes``.
        compressed_bytes: bytes of the compressed entries of ``compressed`` layers (they grow as S / m).
    """

    kind: str
    layers: int
    window: int | None
    tokens_cached: int
    bytes_per_token: int
    state_bytes: int
    bytes: int
    compressed_bytes: int = 0


@dataclass(frozen=True)
class KVReplication:
    """Copies of each cached token across the GPUs of a tensor-parallel group, when there is more than one.

    Attributes:
        factor: GPUs holding a copy of each KV head (``TP // H_kv`` when TP > H_kv) or of the MLA latent
            (TP: every rank keeps it whole); the largest over the model's layers.
        kv_heads: the H_kv that is replicated (1 for an MLA latent).
        kind: ``heads`` or ``mla``.
        note: one line saying so, for the CLI.
    """

    factor: int
    kv_heads: int
    kind: str
    note: str


# Where the two rules of :func:`kv_replication` come from, as the note names them: (the KV-head split, the MLA
# latent kept whole), and optionally the head rule as the engine writes it (default ``max(1, H_kv // TP)``). The
# default is vLLM's; an engine names its own (EngineRules.kv_split_source).
KV_SPLIT_VLLM = ("vLLM get_num_kv_heads", "vLLM MLAAttentionSpec")


def kv_replication(
    spec: ModelSpec, tensor_parallel_size: int, sources: tuple[str, ...] = KV_SPLIT_VLLM
) -> KVReplication | None:
    """How many GPUs of a TP group cache each token's K/V (or MLA latent), when more than one; else None.

    A rank keeps ``max(1, H_kv // TP)`` KV heads (vLLM ``ModelConfig.get_num_kv_heads``; SGLang's
    ``ModelConfig.get_num_kv_heads`` is the same rule at its attention TP), so at TP > H_kv each head is stored on
    ``TP // H_kv`` ranks; an MLA layer keeps its latent whole on every rank (vLLM ``MLAAttentionSpec``). Per-GPU
    bytes times TP are then ``factor`` times one copy of the model's cache. ``sources`` names the engine code the
    note cites for the two rules (the head split, the latent): :data:`KV_SPLIT_VLLM` by default.
    """
    tp = tensor_parallel_size
    if tp <= 1:
        return None
    return spec.memo(("kv_replication", tp, sources), lambda: _kv_replication(spec, tp, sources))


def _kv_replication(spec: ModelSpec, tp: int, sources: tuple[str, str]) -> KVReplication | None:
    best: tuple[int, int, str] | None = None  # (factor, H_kv, kind)
    for layer in spec.layers:
        if layer.kind in KV_HEAD_KINDS and layer.num_kv_heads < tp:
            cand = (tp // layer.num_kv_heads, layer.num_kv_heads, "heads")
        elif layer.kind == "mla":
            cand = (tp, 1, "mla")
        else:
            continue
        if best is None or cand[0] > best[0]:
            best = cand
    if best is None:
        return None
    factor, heads, kind = best
    if kind == "mla":
        note = (
            f"KV replicated: an MLA latent is cached whole on each of the {tp} GPUs ({sources[1]}), so "
            f"the per-GPU bytes × {tp} GPUs are {factor}× the model's cache"
        )
    else:
        note = (
            f"KV replicated: TP={tp} > H_kv={heads}, so each KV head is cached on {factor} of the {tp} GPUs "
            f"({sources[0]}: {sources[2] if len(sources) > 2 else 'max(1, H_kv // TP)'} heads per GPU); the "
            f"per-GPU bytes × {tp} GPUs are "
            f"{factor}× the model's cache"
        )
    return KVReplication(factor, heads, kind, note)


@dataclass(frozen=True, eq=False)
class Estimate:
    """KV-cache bytes of one model for ``batch_size`` requests of ``seq_len`` tokens (per TP rank).

    Attributes:
        model: spec name.
        seq_len: tokens per request (prompt + output).
        batch_size: concurrent requests.
        kv_dtype: KV dtype name.
        block_size: paging block (tokens) or None for exact token counts.
        tensor_parallel_size: TP degree the bytes are per rank of (1: the whole model).
        groups: per layer kind.
        bytes_per_request: bytes of one request.
        total_bytes: ``bytes_per_request × batch_size``.
        kv_replication: copies of the cache across the TP group (:func:`kv_replication`), or None.
        max_model_len: the model's declared maximum context (tokens).
        positional_limit: the model has attention layers, so ``max_model_len`` limits it (False for an
            attention-free model: :attr:`kvplan.specs.ModelSpec.attention_free`).
    """

    model: str
    seq_len: int
    batch_size: int
    kv_dtype: str
    block_size: int | None
    tensor_parallel_size: int
    groups: tuple[LayerGroup, ...]
    bytes_per_request: int
    total_bytes: int
    max_model_len: int
    kv_replication: KVReplication | None = None
    positional_limit: bool = True

    @property
    def exceeds_max_model_len(self) -> bool:
        """True when seq_len is beyond the model's declared maximum context and the model has attention layers
        (an attention-free model, Mamba, has no positional limit: its ``max_model_len`` is a default)."""
        return self.positional_limit and self.seq_len > self.max_model_len


def layer_groups(
    spec: ModelSpec,
    seq_len: int,
    kv_dtype: KVDtype,
    block_size: int | None = None,
    tensor_parallel_size: int = 1,
    layers: range | None = None,
    v_dtype: KVDtype | None = None,
) -> tuple[LayerGroup, ...]:
    """Group the layers (all, or the index range ``layers`` for a pipeline stage) by kind and window
    (``v_dtype``: V rows in another dtype than K, :func:`layer_token_bytes`). A model's ``prefix_tokens``
    (CPM-Ant) are cached with every request: token kinds keep ``seq_len + prefix_tokens`` tokens."""
    idx = range(spec.num_layers) if layers is None else layers
    seq_len += spec.prefix_tokens
    alike: dict[int, list] = {}  # id(layer) -> [layer, count]: build_spec shares one LayerSpec among layers alike
    for i in idx:
        layer = spec.layers[i]
        entry = alike.get(id(layer))
        if entry is None:
            alike[id(layer)] = [layer, 1]
        else:
            entry[1] += 1
    sums: dict[str, list[int]] = {}  # kind -> [layers, bytes per token, state bytes, compressed bytes]
    for layer, n in alike.values():
        acc = sums.setdefault(layer.kind, [0, 0, 0, 0])
        acc[0] += n
        acc[1] += n * layer_token_bytes(layer, kv_dtype, tensor_parallel_size, v_dtype)
        acc[2] += n * layer_state_bytes(layer, spec.dtype, tensor_parallel_size)
        acc[2] += n * layer_cross_bytes(layer, kv_dtype, tensor_parallel_size, block_size, v_dtype)
        acc[3] += n * layer_compressed_bytes(layer, kv_dtype, seq_len, block_size)
    groups = []
    for kind in LAYER_KINDS:
        if kind not in sums:
            continue
        n, per_token, state, compressed = sums[kind]
        window = spec.window_of(kind)
        tokens = tokens_cached(seq_len, window, block_size) if kind in TOKEN_KINDS else 0
        total = per_token * tokens + state + compressed
        groups.append(LayerGroup(kind, n, window, tokens, per_token, state, total, compressed))
    return tuple(groups)


def estimate(
    spec: ModelSpec,
    seq_len: int,
    batch_size: int = 1,
    kv_dtype: str | KVDtype | None = None,
    block_size: int | None = None,
    tensor_parallel_size: int = 1,
) -> Estimate:
    """Exact KV-cache bytes for ``batch_size`` requests of ``seq_len`` tokens.

    Args:
        spec: the model.
        seq_len: tokens per request (>= 1).
        batch_size: requests (>= 1).
        kv_dtype: KV dtype name or object; None/``auto`` = the model's dtype; ``K/V`` (``q8_0/fp16``): K rows
            in one, V rows in the other (:func:`resolve_kv_dtypes`).
        block_size: round each layer group's tokens up to whole blocks of this many tokens.
        tensor_parallel_size: give bytes per TP rank (KV heads split, replicated when TP > H_kv).

    Returns:
        An :class:`Estimate` (bytes are ints).

    Raises:
        UsageError: seq_len, batch_size, block_size or TP < 1, or an unknown dtype.
    """
    for flag, value in (("--seq", seq_len), ("--batch", batch_size), ("--tp", tensor_parallel_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise UsageError(f"{flag}: {value!r} must be an integer >= 1")
    if block_size is not None and (not isinstance(block_size, int) or block_size < 1):
        raise UsageError(f"--block-size: {block_size!r} must be an integer >= 1")
    if batch_size > MAX_BATCH:
        raise UsageError(f"--batch: {batch_size:,} is beyond kvplan's bound of {MAX_BATCH:,} concurrent requests")
    if seq_len > MAX_TOKENS:
        raise UsageError(f"--seq: {seq_len:,} is beyond kvplan's bound of {MAX_TOKENS:,} tokens (2^40)")
    check_tp(spec, tensor_parallel_size)
    dtype, v_dtype = resolve_kv_dtypes(spec, kv_dtype)
    groups = layer_groups(spec, seq_len, dtype, block_size, tensor_parallel_size, v_dtype=v_dtype)
    per_request = sum(g.bytes for g in groups)
    return Estimate(
        model=spec.name,
        seq_len=seq_len,
        batch_size=batch_size,
        kv_dtype=kv_dtype_label(dtype, v_dtype),
        block_size=block_size,
        tensor_parallel_size=tensor_parallel_size,
        groups=groups,
        bytes_per_request=per_request,
        total_bytes=per_request * batch_size,
        max_model_len=spec.max_model_len,
        kv_replication=kv_replication(spec, tensor_parallel_size),
        positional_limit=not spec.attention_free,
    )


@dataclass(frozen=True, eq=False)
class TopologyRow:
    """One line of the MHA / GQA / MQA comparison (Ainslie et al. 2023, Shazeer 2019)."""

    label: str
    num_kv_heads: int
    queries_per_kv_head: int
    bytes: int
    ratio_to_mha_num: int
    ratio_to_mha_den: int

    @property
    def ratio_to_mha(self) -> float:
        """bytes / MHA bytes (display only)."""
        return self.ratio_to_mha_num / self.ratio_to_mha_den


def per_head_variant(spec: ModelSpec, num_kv_heads: int) -> ModelSpec:
    """The model with ``num_kv_heads`` per-head K/V caches; MLA layers become plain attention layers
    caching ``H_kv × (head_dim + v_head_dim)`` per token (the uncompressed cache MLA replaces)."""
    from dataclasses import replace

    if spec.mla is not None:
        full = LayerSpec("full", spec.num_kv_heads, spec.head_dim, spec.v_dim)
        spec = replace(spec, layers=tuple(full if x.kind == "mla" else x for x in spec.layers), mla=None)
    if COMPRESSED_KIND in spec.layer_kinds:  # DeepSeek-V4: per-head K and V of head_dim for every token
        full = LayerSpec("full", spec.num_kv_heads, spec.head_dim, spec.v_dim)
        spec = replace(spec, layers=tuple(full if x.kind == COMPRESSED_KIND else x for x in spec.layers))
    return spec.with_kv_heads(num_kv_heads)


def compare_topologies(
    spec: ModelSpec, seq_len: int, batch_size: int = 1, kv_dtype: str | None = None
) -> list[TopologyRow]:
    """The same geometry with H_kv = H_q (MHA), the model as it is, and H_kv = 1 (MQA).

    Windows and layer kinds are kept; only the per-head cache changes. For an MLA model the MHA and MQA
    rows cache per-head K and V of ``head_dim`` and ``v_head_dim`` (DeepSeek-V3: 128 heads × (192 + 128)),
    and the model row its latent. A model that is itself MHA or MQA gives two rows, the matching one
    labelled with the model's name. Ratios are to the MHA row.

    Raises:
        UsageError: as :func:`estimate`.
    """
    variants = [("MHA", per_head_variant(spec, spec.num_q_heads))]
    variants.append((f"{spec.name} ({spec.topology})", spec))
    variants.append(("MQA", per_head_variant(spec, 1)))
    mha_bytes = estimate(variants[0][1], seq_len, batch_size, kv_dtype).total_bytes
    rows: list[TopologyRow] = []
    for label, variant in variants:
        same = (
            variant.kv_head_counts == spec.kv_head_counts
            and variant.mla is None
            and spec.mla is None
            and COMPRESSED_KIND not in spec.layer_kinds
        )
        if same and variant is not spec:
            continue  # the model itself is MHA or MQA: its own row stands for it
        b = estimate(variant, seq_len, batch_size, kv_dtype).total_bytes
        heads = 1 if variant.mla is not None else variant.num_kv_heads  # one latent serves every query head
        rows.append(TopologyRow(label, heads, spec.num_q_heads // heads, b, b, mha_bytes))
    return rows


def describe_layers(spec: ModelSpec) -> str:
    """Short text of the layer layout: ``GQA: 52 sliding(1024) + 10 full``; with the per-kind geometry
    when attention layers differ in it: ``GQA: 5 full[2×512] + 25 sliding(1024)[8×256]``; attention layers
    that also keep a state (``parallel_state``: Falcon-H1, Zamba2) say which: ``GQA: 44 full+mamba2``."""
    geometries: dict[str, list[str]] = {}
    parallel: dict[str, str] = {}  # attention kind -> the state kind its layers keep beside the KV
    for layer in spec.layers:
        g = layer.geometry()
        if g and g not in geometries.setdefault(layer.kind, []):
            geometries[layer.kind].append(g)
        if layer.state is not None and layer.kind in KV_HEAD_KINDS:
            parallel[layer.kind] = layer.state.kind
    mixed = len({g for gs in geometries.values() for g in gs}) > 1
    parts = []
    for kind, n in spec.kind_counts().items():
        w = spec.window_of(kind)
        text = f"{n} {kind}" + (f"+{parallel[kind]}" if kind in parallel else "") + (f"({w})" if w else "")
        if mixed and geometries.get(kind):
            text += "[" + ",".join(geometries[kind]) + "]"
        parts.append(text)
    return f"{spec.topology}: " + " + ".join(parts)


def model_summary(spec: ModelSpec, kv_dtype: str = "bf16", seqs: tuple[int, ...] = (4096, 131072)) -> dict:
    """One row of ``kvplan models``: geometry, parameters and KV bytes (``kv_bytes_<S>``, ``bytes_per_token_<S>``).

    ``bytes_per_token_<S>`` is ``kv_bytes_<S> / S`` (a float only because windows and states make the
    average fractional); ``kv_bytes_<S>`` is exact. ``param_count`` / ``active_param_count`` are None when the
    spec gives no param_count (``kvplan fit`` then needs --weights-gib).
    """
    row = {
        "name": spec.name,
        "num_layers": spec.num_layers,
        "num_q_heads": spec.num_q_heads,
        "num_kv_heads": spec.num_kv_heads,
        "head_dim": spec.head_dim,
        "attention": describe_layers(spec),
        "kinds": spec.kind_counts(),
        "max_model_len": spec.max_model_len,
        "dtype": spec.dtype,
        "kv_dtype": kv_dtype,
        "param_count": spec.param_count,
        "active_param_count": spec.active_param_count if spec.moe is not None else None,
    }
    for s in seqs:
        b = estimate(spec, s, kv_dtype=kv_dtype).bytes_per_request
        row[f"kv_bytes_{s}"] = b
        row[f"bytes_per_token_{s}"] = b // s if b % s == 0 else b / s
    row["source"] = spec.source
    return row
