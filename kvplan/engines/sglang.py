"""SGLang's KV pool split for hybrid sliding-window models: what ``kvplan fit --engine sglang`` applies.

Source: SGLang 0.5.23 (``pip download --no-deps sglang==0.5.23``, read, not installed; its modules do not import
on a CPU machine without its CUDA packages: flashinfer-python[cu13], sglang-kernel, torch 2.14.1):

- ``srt/configs/model_config.py is_hybrid_swa_model``: the architectures whose sliding layers get their own
  pool (GptOssForCausalLM, Llama4ForConditionalGeneration, Gemma4*, MiMoV2*, Step3p5*, ...). Every other
  model keeps one pool in which sliding layers hold all tokens, as full ones.
- ``srt/model_executor/pool_configurator.py HybridSWAPoolConfigurator`` (the default:
  ``--enable-unified-memory`` off, no ``--max-running-requests`` cap with the radix cache disabled): bytes
  per token of the full pool ``F`` (every full layer) and of the SWA pool ``W`` (every sliding layer);
  ``cell = F + r × W`` with ``r = --swa-full-tokens-ratio`` (default 0.8, ``arg_groups/fields/schedule.py``);
  ``full_tokens = int(available // cell)`` aligned down to the page, ``swa_tokens = int(full_tokens × r)``
  aligned down ("Use sliding window memory pool. full_layer_tokens=..., swa_layer_tokens=...").
- ``compute_swa_request_cap``: a running request holds at most ``window + SGLANG_SWA_EVICTION_INTERVAL
  (128) × draft tokens (1) + page_size`` SWA slots, plus ``page_size`` for its decode step.

kvplan applies the split to the architectures of that list it can plan, by the spec's ``architecture``
(config.json's ``architectures[0]``): gpt-oss and Llama 4 (chunked layers are SGLang's SWA layers, window
``attention_chunk_size``). Not modelled: Gemma 4 / MiMo-V2 / Step-3.5 (their full and sliding geometries differ per
layer; not checked against SGLang's ``ModelConfig``), the request-cap configurator, unified memory,
speculative decoding, and SGLang's Mamba pools (hybrid state models: a unified pool split dynamically,
``mem_cache/kv_cache_configurator.py _init_unified_mamba_pools``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kvplan.engines import parse_version
from kvplan.engines.base import (
    PY,
    CachePlan,
    EngineRules,
    Settings,
    fp8_dense_checks,
    parallel_flags,
    shipped_block_quantized,
    token_plan,
    window_as_blocks,
)
from kvplan.errors import LoadRefused, UsageError
from kvplan.options import Engine, FitOptions, Parallel, check_int
from kvplan.specs import ModelSpec
from kvplan.units import GIB

RULES_VERSION = "0.5.23"  # the one rule set: the SGLang release read (see the module docstring)
DESCRIPTION = "SGLang 0.5.23 (model_runner mem_fraction_static, pool_configurator.py)"

DEFAULT_SWA_FULL_TOKENS_RATIO = 0.8  # srt/arg_groups/fields/schedule.py swa_full_tokens_ratio fallback
SWA_EVICTION_INTERVAL = 128  # srt/environ.py SGLANG_SWA_EVICTION_INTERVAL
PAGE_SIZE = 1  # --page-size default on CUDA (kvplan's SGLang block size)
# srt/configs/model_config.py is_hybrid_swa_model: the architectures with an SWA pool (those kvplan can plan)
HYBRID_SWA_ARCHITECTURES = frozenset(
    {
        "GptOssForCausalLM",
        "Llama4ForConditionalGeneration",
        "GraniteSWAForCausalLM",
        "GraniteMoeSWAForCausalLM",
    }
)


def is_hybrid_swa(spec: ModelSpec) -> bool:
    """True when SGLang gives the model's sliding (or chunked) layers their own pool: an architecture in
    SGLang's list (the spec's ``architecture``, config.json's ``architectures[0]``) with both full and
    windowed layers. A spec without an architecture keeps one pool (SGLang's default)."""
    kinds = set(spec.layer_kinds)
    if not (kinds & {"sliding", "chunked"}) or "full" not in kinds:
        return False
    return spec.architecture in HYBRID_SWA_ARCHITECTURES


def window(spec: ModelSpec) -> int:
    """The SWA window SGLang uses: the sliding window, else the attention chunk (Llama 4)."""
    return spec.sliding_window or spec.attention_chunk_size or 0


def pool_split(budget, full_per_token: int, swa_per_token: int, ratio: float = DEFAULT_SWA_FULL_TOKENS_RATIO,
               page_size: int = PAGE_SIZE, xp=PY) -> tuple:  # fmt: skip
    """(full_layer_tokens, swa_layer_tokens) for ``budget`` bytes (``HybridSWAPoolConfigurator``)."""
    cell = full_per_token + ratio * swa_per_token
    full = xp.to_int(budget // cell) if cell > 0 else xp.full(budget, 0)
    full = full // page_size * page_size
    swa = xp.to_int(full * ratio) // page_size * page_size
    return full, swa


def swa_tokens_per_request(seq_len, win: int, page_size: int = PAGE_SIZE, xp=PY):
    """SWA slots one running request of ``seq_len`` tokens holds at most (``compute_swa_request_cap``'s
    per request, without speculative decoding): ``min(S, window + 128 + page) + page``, never above S."""
    return xp.minimum(seq_len, win + SWA_EVICTION_INTERVAL + 2 * page_size)


def requests(full_tokens: int, swa_tokens: int, seq_len: int, win: int) -> int:
    """Whole requests of ``seq_len`` tokens both pools hold."""
    if seq_len <= 0:
        return 0
    return min(full_tokens // seq_len, swa_tokens // swa_tokens_per_request(seq_len, win))


def longest_request(full_tokens: int, swa_tokens: int, win: int) -> int:
    """The longest single request: it needs S full slots and :func:`swa_tokens_per_request` SWA slots."""
    if swa_tokens >= swa_tokens_per_request(full_tokens, win):
        return full_tokens
    return min(full_tokens, swa_tokens)


def log_line(full_tokens: int, swa_tokens: int) -> str:
    """SGLang's start-up line for the split (``_solve_pool_sizes``)."""
    return f"Use sliding window memory pool. full_layer_tokens={full_tokens}, swa_layer_tokens={swa_tokens}"


@dataclass(frozen=True)
class SglangRules:
    """One SGLang version's conventions (kvplan has one set: :data:`RULES_VERSION`)."""

    version: str
    description: str


RULE_SETS = (SglangRules(RULES_VERSION, DESCRIPTION),)


def resolve_rules(version: str | None) -> SglangRules:
    """The rule set for an SGLang version: kvplan has one (:data:`RULES_VERSION`); a version is accepted when it
    parses (one older than the set gets it with a warning, :func:`older_than_oldest`).

    Raises:
        UsageError: not a version number.
    """
    if version is None or str(version).strip().lower() in ("", "latest", "current"):
        return RULE_SETS[0]
    if parse_version(version) is None:
        raise UsageError(
            f"--engine-version: {version!r} is not a version number (e.g. 0.5.23); SGLang rule sets: {RULES_VERSION}"
        )
    return RULE_SETS[0]


def older_than_oldest(version: str | None) -> bool:
    """True when ``version`` parses and is older than :data:`RULES_VERSION`."""
    asked = None if version is None else parse_version(version)
    return asked is not None and asked < parse_version(RULES_VERSION)


@dataclass(frozen=True, eq=False)
class HybridSwaPlan(CachePlan):
    """SGLang's two pools for hybrid-SWA architectures: full-layer token slots and SWA token slots
    (:func:`pool_split`); a request of S tokens takes S full slots and :func:`swa_tokens_per_request` SWA
    slots; a shared prefix takes its whole pages of full slots once.

    Attributes:
        full_per_token, swa_per_token: bytes one token costs in the full and in the sliding layers (worst stage).
        window: the SWA window (:func:`window`).
    """

    full_per_token: int = 0
    swa_per_token: int = 0
    window: int = 0
    block_size: int = PAGE_SIZE
    kv_bytes_per_token: int = 0
    stage_num_layers: int = 0
    pool_names: tuple = ("full tokens", "swa tokens")
    unit_bytes: tuple = ()
    extras: dict = field(default_factory=dict)

    @property
    def kv_bytes_per_block(self) -> int:  # type: ignore[override]
        return self.block_size * self.kv_bytes_per_token

    def pools(self, budget, xp=PY) -> tuple:
        return pool_split(budget, self.full_per_token, self.swa_per_token, page_size=self.block_size, xp=xp)

    def demand(self, tokens, xp=PY) -> tuple:
        return tokens, swa_tokens_per_request(tokens, self.window, xp=xp)

    def prefix(self, tokens: int, xp=PY) -> tuple:
        return (tokens // self.block_size) * self.block_size, 0

    def measures(self, budget, seq, shared_prefix: int = 0, xp=PY) -> dict:
        full, swa = self.pools(budget, xp)
        swa_req = swa_tokens_per_request(seq, self.window, xp=xp)
        num_blocks = full // self.block_size
        return dict(
            num_blocks=num_blocks,
            kv_bytes_per_request=seq * self.full_per_token + self.swa_per_token * swa_req,
            kv_capacity_tokens=num_blocks * self.block_size,
            max_concurrency=xp.minimum(full / seq, swa / swa_req),
            block_size=self.block_size,
        )

    def fit_fields(self) -> dict:
        return dict(self.extras)

    def search_limit(self, caps: tuple, xp=PY):
        return caps[0] + 1  # S full slots

    def log_line(self, measures: dict, seq: int, pools: tuple) -> str:
        return log_line(*pools)


# --- parallelism and load-time checks ---------------------------------------------------------------


def parallel(spec: ModelSpec, opts: FitOptions) -> Parallel:
    """SGLang 0.5.23's layout of one replica: ``--tp T`` GPUs per stage. ``--attn-dp-size D`` (the deprecated
    ``--dp-size D --enable-dp-attention``, ``arg_groups/parallel_hook.py handle_deprecated_dp_attention``)
    splits them into D attention groups of ``T / D`` GPUs (``runtime_context.py derive_attn_tp_size``), each
    with its own scheduler and KV pool; ``--ep-size E`` splits the routed experts over E GPUs, each expert
    TP-sliced over ``T / E`` (``derive_parallel_widths``: ``moe_tp_size = tp_size // moe_ep_size``).

    Raises:
        UsageError: SGLang's own refusals: ``tp_size % attn_dp_size`` (``parallel_hook.py``: "assert
            cfg.tp_size % cfg.attn_dp_size == 0"), ``tp_size`` not divisible by ``ep_size``
            (``model_runner_components/moe_ep_setup.py``), routed experts not divisible by it
            (``layers/moe/fused_moe_triton/layer.py``: "assert self._num_global_routed % storage_ep_size == 0");
            expert parallelism for a model without moe facts.
    """
    check_int("--data-parallel-size", opts.data_parallel_size)
    check_int("--ep-size", opts.expert_parallel_size)
    tp, dp, pp = opts.tensor_parallel_size, opts.data_parallel_size, opts.pipeline_parallel_size
    if tp % dp:
        raise UsageError(
            f"--attn-dp-size {dp}: SGLang runs attention DP inside the TP group, so --tp ({tp}) must be a multiple of "
            "it (arg_groups/parallel_hook.py: tp_size % attn_dp_size == 0)"
        )
    ep = opts.expert_parallel_size or (tp if opts.enable_expert_parallel else 1)
    if ep > 1 and spec.moe is None:
        raise UsageError(
            f"--ep-size {ep}: {spec.name} has no moe facts (a dense model, or a spec without a moe block), so "
            "there are no routed experts to split"
        )
    if tp % ep:
        raise UsageError(f"--ep-size: tp_size {tp} must be divisible by ep_size {ep} (SGLang moe_ep_setup.py)")
    if ep > 1 and spec.moe.num_experts % ep:
        raise UsageError(
            f"--ep-size {ep}: SGLang needs the {spec.moe.num_experts} routed experts of {spec.name} divisible by "
            "the EP size (layers/moe/fused_moe_triton/layer.py: _num_global_routed % ep_size == 0)"
        )
    flags = parallel_flags(("--tp", tp), ("--pp", pp), ("--attn-dp-size", dp), ("--ep-size", ep))
    return Parallel(tp // dp, dp, pp, ep, tp // ep, flags)


def fp8_moe_check(spec: ModelSpec, tp: int, ep: int) -> None:
    """SGLang 0.5.23's check of a block-quantized MoE checkpoint (``model_runner_components/moe_ep_setup.py
    check_quantized_moe_compatibility``, called at start-up from ``model_runner.py``): with ``moe_tp = tp //
    ep``, ``moe_intermediate_size`` must divide by moe_tp and its slice by ``block_n``.

    Raises:
        UsageError: SGLang's message.
    """
    block, width = spec.weight_block_size, spec.moe_intermediate_size
    if block is None or width is None:
        return
    moe_tp = tp // ep
    if width % moe_tp:
        engine = (
            f"moe_intermediate_size {width} must be divisible by moe_tp_size ({moe_tp}) which is tp_size ({tp}) "
            f"divided by moe_ep_size ({ep})."
        )
    elif (width // moe_tp) % block[0]:
        engine = (
            f"For quantized MoE models, please make sure (moe_intermediate_size={width} / moe_tp_size={moe_tp}) % "
            f"weight_block_size_n={block[0]} == 0 where moe_tp_size is equal to tp_size ({tp}) divided by ep_size "
            f"({ep}). You can fix this by setting arguments `--tp` and `--ep` correctly."
        )
    else:
        return
    raise LoadRefused(f"--tp: SGLang refuses to load {spec.name} at TP {tp}, EP {ep}: \"{engine}\"")


class SglangEngine(EngineRules):
    """SGLang 0.5.23: ``mem_fraction_static`` of the memory available at start holds weights and KV (the rest
    is left for activations), per-token cells (page size 1), and hybrid-SWA pools for the architectures of
    :data:`HYBRID_SWA_ARCHITECTURES`; every other model keeps one pool in which sliding layers hold every
    token."""

    engine = Engine.sglang
    display_name = "SGLang"
    unplanned_kinds = {
        "compressed": "SGLang 0.5.23 serves DeepSeek-V4 (srt/models/deepseek_v4.py) with pools kvplan does not model",
        "rglru": "SGLang 0.5.23 has no RecurrentGemma model (srt/models/ has none)",
    }
    block_size = PAGE_SIZE
    utilization = 0.88
    max_num_batched_tokens = 8192

    def resolve_rules(self, version: str | None) -> SglangRules:
        return resolve_rules(version)

    def older_than_oldest(self, version: str | None) -> bool:
        return older_than_oldest(version)

    def overhead_bytes(self, spec: ModelSpec, settings: Settings, tp: int, pp: int) -> int:
        """Memory gone before SGLang measures what it may use: the CUDA context and, with several GPUs,
        torch.distributed's start-up ("Init torch distributed ends. mem usage=0.13 GB"): 0.3 GiB on one GPU,
        0.5 GiB with TP × PP > 1 (modelled, calibrated on the corpus logs)."""
        return 3 * GIB // 10 if tp * pp == 1 else GIB // 2

    def parallel(self, spec: ModelSpec, opts: FitOptions) -> Parallel:
        return parallel(spec, opts)

    def layouts(self, spec: ModelSpec, tps: list[int], pps: list[int]) -> list[dict]:
        """TP × PP; for a model with moe facts also ``--ep-size`` = TP and, with it, ``--attn-dp-size`` = TP
        (SGLang's DeepSeek / Qwen-MoE deployments: ``--tp 8 --ep-size 8 --enable-dp-attention --dp-size 8``)."""
        out = super().layouts(spec, tps, pps)
        if spec.moe is None:
            return out
        for p in pps:
            for t in tps:
                if t == 1 or p > spec.num_layers or spec.moe.num_experts % t:
                    continue
                out.append(dict(tensor_parallel_size=t, pipeline_parallel_size=p, expert_parallel_size=t))
                out.append(dict(tensor_parallel_size=t, pipeline_parallel_size=p, expert_parallel_size=t,
                                data_parallel_size=t))  # fmt: skip
        return out

    def load_check(self, spec: ModelSpec, opts: FitOptions, par: Parallel) -> list[str]:
        """Block-quantized checkpoints as they ship: :func:`fp8_moe_check` and the row-parallel linear check
        (:func:`kvplan.engines.base.fp8_dense_checks`, SGLang ``layers/quantization/fp8_utils.py
        validate_fp8_block_shape``) at the attention TP."""
        if not shipped_block_quantized(spec, opts):
            return []
        fp8_dense_checks(spec, par.attn_tp, "SGLang", "layers/quantization/fp8_utils.py validate_fp8_block_shape")
        fp8_moe_check(spec, par.gpus_per_stage, par.ep)
        return []

    def max_seqs_per_group(self, max_num_seqs: int | None, par: Parallel) -> int | None:
        """``--max-running-requests`` is for the whole replica: each attention DP group gets
        ``max(1, max_running_requests // attn_dp_size)`` (``model_executor/pool_configurator.py``)."""
        return None if max_num_seqs is None else max(1, max_num_seqs // par.attn_dp)

    def usable_and_budget(self, total: int, util: float, terms: dict[str, int], settings: Settings):
        """``usable = int((total − overhead) × mem_fraction_static)``; budget = usable − weights − activation
        (0: outside the fraction) [sglang model_runner]."""
        usable = int((total - terms["non_torch"]) * util)
        return usable, usable - terms["weights"] - terms.get("activation", 0)

    def plan(self, spec: ModelSpec, kv_dtype, opts: FitOptions, settings: Settings, max_len: int):
        hybrid = is_hybrid_swa(spec)
        base = token_plan(
            spec, kv_dtype, opts, settings.block_size, max_len, window_rule=window_as_blocks,
            windows_full=opts.swa_full or not hybrid, in_flight=settings.max_num_batched_tokens,
        )  # fmt: skip
        if not hybrid:
            return base
        cache = base.stages[base.worst]
        full = cache.growing_bytes_per_token
        swa = cache.bytes_per_token - full
        return HybridSwaPlan(
            full_per_token=full,
            swa_per_token=swa,
            window=window(spec),
            block_size=settings.block_size,
            kv_bytes_per_token=cache.bytes_per_token,
            stage_num_layers=cache.num_layers,
            unit_bytes=(full, swa),
        )


ENGINE = SglangEngine()


# --- what the start-up log prints (kvplan fit --from-log) ---------------------------------------------------


def kv_bytes_per_token(spec: ModelSpec, kv_dtype, tp: int) -> tuple[int, int, int]:
    """(K, V, MLA latent) bytes one token costs on one TP rank across the model's layers, as SGLang's pools
    hold them: ``MHATokenToKVPool`` K and V buffers of ``kv_heads_per_rank × head_dim`` per layer (its log:
    ``K size: X GB, V size: Y GB`` = tokens × these / 2^30), ``MLATokenToKVPool`` one latent of
    ``kv_lora_rank + qk_rope_head_dim`` per layer on every rank (``KV size``)."""
    from kvplan.calc import kv_heads_per_rank
    from kvplan.specs import KV_HEAD_KINDS

    k = v = latent = 0
    for layer in spec.layers:
        if layer.kind in KV_HEAD_KINDS:
            h = kv_heads_per_rank(layer.num_kv_heads, tp)
            k += kv_dtype.row_bytes(h * layer.head_dim, h)
            v += kv_dtype.row_bytes(h * layer.v_head_dim, h)
        elif layer.kind == "mla":
            latent += kv_dtype.row_bytes(layer.mla.latent_dim, 1)
    return k, v, latent


def max_running_requests(max_total_num_tokens: int, context_len: int) -> int:
    """The ``max_running_requests`` SGLang prints without ``--max-running-requests``: the request pool's
    ``min(max(int(tokens / context_len × 512), 2048), 4096)`` requests (``model_runner.py`` ``max_num_reqs``),
    plus the pool's one extra slot (``ReqToTokenPool(size=max_num_reqs + 1)``; the scheduler prints the pool's
    size: 2049 in the corpus logs sglang-04 and sglang-llms-in-clouds-qwq32b)."""
    return min(max(int(max_total_num_tokens / context_len * 512), 2048), 4096) + 1


DEFAULT_MAX_PREFILL_TOKENS = 16384  # srt/server_args.py ServerArgs.max_prefill_tokens
