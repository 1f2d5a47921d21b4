"""Speed bounds from exact bytes: what one decode step and one prefill cost per GPU, and how fast they can go.

Memory decides how many requests fit; bandwidth and FLOP/s decide how fast they run. For one GPU of a
replica (TP × PP GPUs) serving N requests that each have T tokens cached:

**decode step bytes** (read from GPU memory per step, per GPU; ints)::

    weights read   = weights per GPU − the routed experts no token of the step uses (MoE)
    KV read        = Σ_requests Σ_layers tokens_read(layer, T) × layer_token_bytes(layer)
    state traffic  = Σ_requests Σ_state layers 2 × layer_state_bytes(layer)      (read and write back)

  with ``tokens_read`` = T for full and MLA layers (MLA: its latent, + the DSA indexer key), min(T, window)
  for sliding and chunked layers (chunked: the worst position in a chunk), the source layer's count for a
  shared layer (it reads that cache again); byte sizes from :mod:`kvplan.calc` at the replica's TP.

**MoE**: under uniform routing, a token picks a k-subset of E experts, so a given expert is missed by
one token with probability C(E−1, k)/C(E, k) = 1 − k/E, and by N independent tokens with probability
(1 − k/E)^N; by linearity of expectation N tokens touch ``E·(1 − (1 − k/E)^N)`` distinct experts per
layer (the classic occupancy count, e.g. Feller, *An Introduction to Probability Theory*, vol. 1, ch. II),
k at N = 1 and → E as N grows. Shared experts are always read. Skewed routing touches fewer (uniform
routing maximizes the expectation), so for MoE models the bytes are an expectation, not a strict bound.

**decode FLOPs** (per GPU)::

    2 × active params × N / (TP × PP) + Σ_requests Σ_layers attention FLOPs
    attention (per head on this GPU):  2 × (d_k + d_v) × tokens_read         (QKᵀ and PV)
    MLA (absorbed, as vLLM decodes):   2 × (2·kv_lora_rank + qk_rope_head_dim) × T

**TPOT bound** = max(bytes / (bandwidth × MBU), FLOPs / (peak × MFU)) + all-reduce time; the tokens/s
bound of the replica is N / TPOT. With TP > 1 each layer all-reduces its attention and MLP outputs, a
ring moving ``2 (TP − 1)/TP × N × hidden × activation bytes`` per all-reduce through each GPU's link
(nccl-tests ``doc/PERFORMANCE.md``: bus bandwidth = algorithm bandwidth × 2(n − 1)/n), over the
interconnect bandwidth of :data:`INTERCONNECT_GBS`. The per-collective latency (microseconds) is left
out: the bound stays a bound. With PP > 1 the stages run one after another for a token (TPOT = the sum
of the stages) and overlap across micro-batches (tokens/s = N / the slowest stage).

**TTFT bound** for a P-token prompt alone: prefill FLOPs = 2 × active params × P + causal attention
(Σ over positions of the tokens each attends to, × 2 × (d_k + d_v) per head; MLA prefill runs per-head
K/V of head_dim and v_head_dim, as vLLM's MLA prefill), over peak × MFU, or the bytes the prefill moves
(the experts P tokens touch, the KV written) over bandwidth × MBU if larger, plus the all-reduces of P
tokens.

**Peaks**: ``bandwidth_tbs`` and ``bf16_dense_tflops`` of the GPU catalog; FP8 weights on a GPU with FP8
tensor cores compute at 2 × the BF16 peak (Hopper, Ada, Blackwell, MI300: FP8 dense = 2 × BF16 dense);
other weight formats compute in 16 bit (weight-only kernels). ``mbu = mfu = 1`` is the physical limit.

Not counted (each makes the true time longer, so the bound stays a bound): the new token's K/V write
(1/T of the read), activations, sampling, the recurrent state update's FLOPs, the DSA indexer's FLOPs,
kernel launch gaps, collective latency, pipeline bubbles. Counted although not all of it is read: the
input embedding table sits in the weights and in active params (a few % of a small model).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from kvplan.calc import cdiv, layer_state_bytes, layer_token_bytes, resolve_kv_dtype
from kvplan.errors import UsageError
from kvplan.specs import STATE_KINDS, LayerSpec, ModelSpec
from kvplan.units import MAX_BATCH, MAX_TOKENS

# MBU: achieved fraction of peak DRAM bandwidth in memory-bound decode. gpt-fast (pytorch-labs/gpt-fast
# README, batch 1, bf16): Llama-2-7B on A100-80GB 1,397 GB/s of 2,039 (68.5 %), Llama-2-70B at TP 2
# 1,426 GB/s (70.0 %), Llama-2-7B on one MI250X GCD 1,029 GB/s of 1,600 (64.3 %).
DEFAULT_MBU = 0.7
# MFU: achieved fraction of peak tensor FLOP/s in prefill. TensorRT-LLM's v0.5 performance table (batch 1,
# 2,048-token prompt, first-token latency): Llama-2-7B fp16 on A100 133 ms = 69 % of 312 TFLOP/s, fp8 on
# H100 36 ms = 40 % of 1,979 TFLOP/s (FLOPs as kvplan counts them; docs/throughput-validation.md).
DEFAULT_MFU = 0.5

# Per-GPU interconnect bandwidth for tensor-parallel all-reduce, GB/s (10^9 B/s) in each direction.
# NVLink: NVIDIA datasheets give bidirectional totals per GPU (A100 600, H100/H200 SXM 900, B200 1,800 GB/s;
# H100 NVL bridge 600, H200 NVL bridge 900; V100 SXM2 300): half of each per direction. PCIe x16: 32 GB/s
# per direction at Gen4 (16 GT/s × 16 lanes), 64 at Gen5, 16 at Gen3. AMD Infinity Fabric: MI300X / MI325X
# 7 links, 896 GB/s bidirectional peer bandwidth per GPU; MI355X 1,075 GB/s; MI250X 800 GB/s per package
# (two GCDs). A GPU not listed (or a size) gets no all-reduce term: a note says so.
_NVLINK4 = 450.0
INTERCONNECT_GBS: dict[str, float] = {
    "a100-sxm-40gb": 300.0,
    "a100-sxm-80gb": 300.0,
    "a100-pcie-40gb": 32.0,
    "a100-pcie-80gb": 32.0,
    "h100-sxm-80gb": _NVLINK4,
    "h100-pcie-80gb": 64.0,
    "h100-nvl-94gb": 300.0,
    "h200-sxm-141gb": _NVLINK4,
    "h200-nvl-141gb": _NVLINK4,
    "h20-96gb": _NVLINK4,
    "gh200-96gb": _NVLINK4,
    "gh200-144gb": _NVLINK4,
    "b200-180gb": 900.0,
    "b300-288gb": 900.0,
    "gb200-186gb": 900.0,
    "gb300-288gb": 900.0,
    "l4-24gb": 32.0,
    "l40s-48gb": 32.0,
    "l40-48gb": 32.0,
    "rtx4090-24gb": 32.0,
    "rtx6000-ada-48gb": 32.0,
    "a10g-24gb": 32.0,
    "a10-24gb": 32.0,
    "rtx3090-24gb": 32.0,
    "rtx5090-32gb": 64.0,
    "rtx-pro-6000-blackwell-96gb": 64.0,
    "t4-16gb": 16.0,
    "v100-16gb": 150.0,
    "v100-32gb": 150.0,
    "mi250x-128gb": 200.0,
    "mi300x-192gb": 448.0,
    "mi325x-256gb": 448.0,
    "mi355x-288gb": 537.6,
}

_ACT_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}


MIN_FRACTION = 0.01
"""Smallest --mbu / --mfu accepted (1 % of peak)."""


def check_fraction(flag: str, value: float | None) -> float | None:
    """Raise UsageError unless ``value`` (when given) is a number in [0.01, 1].

    Below 1 % of peak the estimate is meaningless and tiny values overflow the times to infinity.
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not MIN_FRACTION <= value <= 1:
        raise UsageError(f"{flag}: {value!r} must be a number in [{MIN_FRACTION}, 1] (1 = the physical limit)")
    return float(value)


def _check_count(flag: str, value: int, minimum: int, maximum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise UsageError(f"{flag}: {value!r} must be an integer >= {minimum}")
    if value > maximum:
        raise UsageError(f"{flag}: {value:,} is beyond what kvplan plans for (at most {maximum:,})")
    return value


def experts_touched(num_experts: int, experts_per_token: int, tokens: int) -> float:
    """Expected distinct experts ``tokens`` tokens touch in one layer under uniform top-k routing:
    ``E·(1 − (1 − k/E)^N)`` (see the module docstring); k when N = 1, E when k = E, 0 when N = 0."""
    if tokens <= 0:
        return 0.0
    if experts_per_token >= num_experts:
        return float(num_experts)
    return -num_experts * math.expm1(tokens * math.log1p(-experts_per_token / num_experts))


def tokens_read(layer: LayerSpec, spec: ModelSpec, context: int) -> int:
    """Cached tokens a decode step reads in ``layer`` for a request of ``context`` tokens."""
    kind = layer.attends_as if layer.kind == "shared" else layer.kind
    if kind in ("sliding", "chunked"):
        return min(context, spec.window_of(kind) or context)
    if kind in ("full", "mla"):
        return context
    return 0


def causal_pairs(prompt: int, window: int | None, chunked: bool = False) -> int:
    """Query-key pairs of causal attention over a ``prompt``-token prefill: Σ_i tokens position i attends to.

    full: P(P+1)/2; sliding window W: Σ min(i, W); chunked C: each chunk is causal on its own.
    """
    p = prompt
    if window is None or window >= p:
        return p * (p + 1) // 2
    w = window
    if chunked:
        q, r = divmod(p, w)
        return q * (w * (w + 1) // 2) + r * (r + 1) // 2
    return w * (w + 1) // 2 + (p - w) * w


def _attention_dims(layer: LayerSpec, spec: ModelSpec, decode: bool) -> int:
    """Per query head, the multiply-add width of one key: d_k + d_v (MLA decode: 2·r + rope)."""
    if layer.kind == "mla":
        m = layer.mla
        if decode:
            return 2 * m.kv_lora_rank + m.qk_rope_head_dim
        return spec.head_dim + spec.v_dim  # MLA prefill: per-head K (nope + rope) and V
    return layer.head_dim + layer.v_head_dim


@dataclass(frozen=True, eq=False)
class StageCost:
    """What one step costs one GPU of one pipeline stage. Bytes and FLOPs are ints, times in seconds.

    Attributes:
        layers: decoder layers of the stage.
        weights_read_bytes: weights the step reads (MoE: the experts its tokens touch).
        kv_read_bytes: KV (and MLA latent / indexer) bytes read for all requests.
        state_bytes: recurrent state read and written for all requests (2 × state).
        kv_write_bytes: KV written (prefill only; 0 for decode).
        linear_flops, attention_flops: FLOPs of the matmuls with weights, and of attention.
        allreduce_bytes: bytes through the GPU's link for the TP all-reduces.
        memory_s, compute_s, allreduce_s: bytes / (bandwidth × MBU), FLOPs / (peak × MFU), link time.
    """

    layers: int
    weights_read_bytes: int
    kv_read_bytes: int
    state_bytes: int
    kv_write_bytes: int
    linear_flops: int
    attention_flops: int
    allreduce_bytes: int
    memory_s: float
    compute_s: float
    allreduce_s: float

    @property
    def bytes(self) -> int:
        """Bytes moved to and from GPU memory."""
        return self.weights_read_bytes + self.kv_read_bytes + self.state_bytes + self.kv_write_bytes

    @property
    def flops(self) -> int:
        """FLOPs on this GPU."""
        return self.linear_flops + self.attention_flops

    @property
    def seconds(self) -> float:
        """max(memory, compute) + all-reduce."""
        return max(self.memory_s, self.compute_s) + self.allreduce_s

    @property
    def bound_by(self) -> str:
        """``memory`` or ``compute``: the larger of the two times."""
        return "compute" if self.compute_s > self.memory_s else "memory"


@dataclass(frozen=True, eq=False)
class Hardware:
    """Peaks used for a bound: bandwidth in B/s, FLOP/s, link B/s (None: unknown), and the fractions."""

    bandwidth: float
    peak_flops: float | None
    link: float | None
    mbu: float
    mfu: float
    compute_dtype: str


def hardware(gpu, weights_dtype: str, mbu: float | None = None, mfu: float | None = None) -> Hardware:
    """The peaks of ``gpu`` for weights in ``weights_dtype`` (fit's name), with MBU/MFU (defaults when None).

    Raises:
        UsageError: MBU or MFU outside [0.01, 1]; a GPU without a bandwidth (a size: give a catalog GPU).
    """
    mbu = DEFAULT_MBU if mbu is None else check_fraction("--mbu", mbu)
    mfu = DEFAULT_MFU if mfu is None else check_fraction("--mfu", mfu)
    if gpu.bandwidth_tbs is None:
        raise UsageError(
            f"--gpu {gpu.name}: no memory bandwidth known, so no speed bound; give a catalog GPU (kvplan gpus)"
        )
    fp8 = weights_dtype == "fp8" and gpu.fp8
    peak = None if gpu.bf16_dense_tflops is None else gpu.bf16_dense_tflops * 1e12 * (2 if fp8 else 1)
    link = INTERCONNECT_GBS.get(gpu.id)
    return Hardware(
        gpu.bandwidth_tbs * 1e12, peak, None if link is None else link * 1e9, mbu, mfu, "fp8" if fp8 else "bf16"
    )


@dataclass(frozen=True, eq=False)
class _Weights:
    """Weights per GPU and the bytes of one routed expert's share on one GPU (MoE), as floats of bytes."""

    per_gpu: int
    expert_bytes_per_gpu: float


def _weights(spec: ModelSpec, fit) -> _Weights:
    """Weights held per GPU (fit's) and one routed expert's bytes per GPU, in the weights' format."""
    tp, pp = fit.tensor_parallel_size, fit.pipeline_parallel_size
    if spec.moe is None:
        return _Weights(fit.weights_bytes, 0.0)
    from kvplan.dtypes import get_weight_dtype

    try:
        per_expert = float(get_weight_dtype(fit.weights_dtype).bytes_for(spec.moe.expert_param_count))
    except UsageError:  # given / checkpoint / unknown bytes: the average bytes per parameter
        if not spec.param_count:
            return _Weights(fit.weights_bytes, 0.0)
        per_expert = spec.moe.expert_param_count * fit.weights_bytes * tp * pp / spec.param_count
    return _Weights(fit.weights_bytes, per_expert / (tp * pp))


def _allreduce_bytes(spec: ModelSpec, layers: int, tp: int, tokens: int) -> int:
    """Bytes one GPU sends for the step's all-reduces: 2 per layer, each ``2(TP−1)/TP × tokens × hidden``
    activations (ring)."""
    if tp == 1:
        return 0
    hidden = spec.hidden_size or spec.num_q_heads * spec.head_dim
    act = _ACT_BYTES.get(spec.dtype, 2)
    return cdiv(2 * layers * 2 * (tp - 1) * tokens * hidden * act, tp)


_LAYER_TABLES: dict[tuple, tuple] = {}


def _layer_table(spec: ModelSpec, kv_dtype, tp: int, layers: range, prefill: bool) -> tuple[tuple, ...]:
    """The distinct layers of ``layers`` with what a step needs of each: (layer, geometry it attends with,
    KV bytes per token, state bytes, attention width d_k + d_v, how many layers are alike). Kept per
    (spec, dtype, TP, layers, prefill): a fleet asks for thousands of steps of one layout."""
    key = (id(spec), kv_dtype, tp, layers.start, layers.stop, layers.step, prefill)
    hit = _LAYER_TABLES.get(key)
    if hit is not None and hit[0] is spec:
        return hit[1]
    alike: dict[LayerSpec, int] = {}
    for i in layers:
        layer = spec.layers[i]
        alike[layer] = alike.get(layer, 0) + 1
    table = []
    for layer, n in alike.items():
        if layer.kind == "shared":  # reads its source layer's cache again, with the same geometry
            geo = LayerSpec(
                layer.attends_as or "full",
                layer.num_kv_heads,
                layer.head_dim,
                layer.v_head_dim,
                layer.k_eq_v,
                layer.window,
            )
        else:
            geo = layer
        per_token = layer_token_bytes(geo, kv_dtype, tp)
        state_one = layer_state_bytes(layer, spec.dtype, tp)
        dims = 0 if geo.kind in STATE_KINDS or geo.kind == "none" else _attention_dims(geo, spec, decode=not prefill)
        table.append((layer, geo, per_token, state_one, dims, n))
    if len(_LAYER_TABLES) > 256:
        _LAYER_TABLES.clear()
    _LAYER_TABLES[key] = (spec, tuple(table))
    return _LAYER_TABLES[key][1]


def stage_cost(
    spec: ModelSpec,
    fit,
    hw: Hardware,
    layers: range,
    requests: Sequence[tuple[int, int]],
    prefill: bool = False,
) -> StageCost:
    """The cost of one decode step (``requests``: (count, tokens cached) pairs) or of one prefill
    (``prefill``: one (1, P) request) on one GPU of the stage holding ``layers``.

    Raises:
        UsageError: an unknown KV dtype in ``fit``.
    """
    tp, pp = fit.tensor_parallel_size, fit.pipeline_parallel_size
    kv_dtype = resolve_kv_dtype(spec, fit.kv_dtype)
    n = sum(c for c, _ in requests)
    tokens = sum(c * t for c, t in requests) if prefill else n  # tokens through the matmuls this step
    w = _weights(spec, fit)
    weights_read = w.per_gpu
    moe = spec.moe
    if moe is not None and w.expert_bytes_per_gpu:
        untouched = moe.num_experts - experts_touched(moe.num_experts, moe.experts_per_token, tokens)
        weights_read -= round(untouched * moe.num_moe_layers * w.expert_bytes_per_gpu)
    heads = spec.num_q_heads // tp  # query heads per GPU (check_tp: H_q % TP == 0)
    kv = state = kv_write = attn = 0
    # identical layers cost alike: each distinct layer once, times how many there are (exact ints)
    for layer, geo, per_token, state_one, dims, alike in _layer_table(spec, kv_dtype, tp, layers, prefill):
        for count, t in requests:
            state += alike * count * 2 * state_one
            if prefill:
                kind = geo.kind
                pairs = causal_pairs(t, spec.window_of(kind), chunked=kind == "chunked")
                attn += alike * count * 2 * heads * dims * pairs
                if layer.kind != "shared":
                    kv_write += alike * count * t * per_token
            else:
                read = tokens_read(layer, spec, t)
                kv += alike * count * read * per_token
                attn += alike * count * 2 * heads * dims * read
    active = spec.active_param_count or 0
    linear = cdiv(2 * active * tokens, tp * pp)
    ar = _allreduce_bytes(spec, len(layers), tp, tokens)
    memory_s = (weights_read + kv + state + kv_write) / (hw.bandwidth * hw.mbu)
    compute_s = 0.0 if hw.peak_flops is None else (linear + attn) / (hw.peak_flops * hw.mfu)
    link_s = 0.0 if hw.link is None or not ar else ar / hw.link
    return StageCost(len(layers), weights_read, kv, state, kv_write, linear, attn, ar, memory_s, compute_s, link_s)


def _stages(spec: ModelSpec, pp: int) -> list[range]:
    base, extra = divmod(spec.num_layers, pp)  # as kvplan.fit.stage_layers: extra layers to the first stages
    out, start = [], 0
    for s in range(pp):
        k = base + (1 if s < extra else 0)
        out.append(range(start, start + k))
        start += k
    return out


@dataclass(frozen=True, eq=False)
class StepBound:
    """A decode step or a prefill over every stage: the worst stage's GPU, and the totals.

    Attributes:
        stages: one :class:`StageCost` per PP stage.
        worst: the slowest stage's cost (its bytes and FLOPs are what one GPU does).
        seconds: the sum over stages (one token passes every stage).
        slowest_s: the slowest stage's time (what bounds tokens/s with pipelining).
    """

    stages: tuple[StageCost, ...]
    worst: StageCost
    seconds: float
    slowest_s: float


def step_bound(spec: ModelSpec, fit, hw: Hardware, requests: Sequence[tuple[int, int]], prefill: bool = False):
    """:func:`stage_cost` for each PP stage of ``fit``'s layout."""
    stages = tuple(stage_cost(spec, fit, hw, r, requests, prefill) for r in _stages(spec, fit.pipeline_parallel_size))
    worst = max(stages, key=lambda s: s.seconds)
    return StepBound(stages, worst, sum(s.seconds for s in stages), worst.seconds)


@dataclass(frozen=True, eq=False)
class PerfResult:
    """Speed bounds of one replica layout at one operating point. Bytes and FLOPs are ints, per GPU.

    Attributes:
        concurrency: requests decoding together (N).
        context_tokens: tokens cached per request during the decode step (T).
        prompt_tokens: prompt length of the TTFT bound (P).
        mbu, mfu: the fractions of peak bandwidth and FLOP/s assumed (1, 1 = the physical limit).
        bandwidth_tbs, peak_tflops, interconnect_gbs: the GPU's peaks used (TB/s, TFLOP/s, GB/s; None: unknown).
        compute_dtype: ``fp8`` (FP8 weights on FP8 tensor cores: 2 × the BF16 peak) or ``bf16``.
        weights_bytes: weights held per GPU; weights_read_bytes: read per decode step (MoE: touched experts).
        experts_touched: expected distinct routed experts per MoE layer per step, or None (dense).
        kv_read_bytes, state_rw_bytes: KV read and state read + written per step, per GPU.
        decode_step_bytes, decode_step_flops: per GPU of the slowest stage.
        allreduce_bytes: per GPU per step through its link (TP > 1).
        memory_ms, compute_ms, allreduce_ms: the slowest stage's parts (ms).
        tpot_ms_bound: time per output token (all stages); decode_tokens_per_s_bound: N / the slowest stage.
        decode_tokens_per_s_per_gpu_bound: the replica's tokens/s over TP × PP.
        bound_by: ``memory`` or ``compute`` (the slowest stage's decode step).
        prefill_flops, prefill_bytes: per GPU of the slowest stage for a P-token prompt; ttft_ms_bound,
            ttft_bound_by: the TTFT bound and what limits it.
        notes: what the bound leaves out for this model or GPU (one line each).
    """

    model: str
    gpu: str
    tensor_parallel_size: int
    pipeline_parallel_size: int
    concurrency: int
    context_tokens: int
    prompt_tokens: int
    mbu: float
    mfu: float
    bandwidth_tbs: float
    peak_tflops: float | None
    interconnect_gbs: float | None
    compute_dtype: str
    weights_bytes: int
    weights_read_bytes: int
    experts_touched: float | None
    kv_read_bytes: int
    state_rw_bytes: int
    decode_step_bytes: int
    decode_step_flops: int
    allreduce_bytes: int
    memory_ms: float
    compute_ms: float
    allreduce_ms: float
    tpot_ms_bound: float
    decode_tokens_per_s_bound: float
    decode_tokens_per_s_per_gpu_bound: float
    bound_by: str
    prefill_flops: int
    prefill_bytes: int
    ttft_ms_bound: float
    ttft_bound_by: str
    notes: tuple[str, ...] = ()


def _notes(spec: ModelSpec, gpu, fit, hw: Hardware) -> tuple[str, ...]:
    out = []
    if hw.peak_flops is None:
        out.append(f"{gpu.id}: no BF16 tensor-core peak in the catalog; the compute bound is left out")
    if fit.tensor_parallel_size > 1 and hw.link is None:
        out.append(f"{gpu.id}: no interconnect bandwidth known; the TP all-reduce time is left out")
    if spec.active_param_count is None:
        out.append(f"{spec.name}: no param_count; the linear FLOPs are left out")
    if spec.moe is None and spec.param_count is not None and "moe" in spec.notes.lower():
        out.append(f"{spec.name}: no moe facts in the spec; every parameter is counted as read and active")
    if spec.moe is not None:
        out.append("MoE: expected distinct experts under uniform routing; skewed routing reads fewer")
    if any(layer.mla is not None and layer.mla.index_head_dim for layer in spec.layers):
        out.append("DSA: every latent is counted as read (the top-k selection reads fewer past its k)")
    if any(k in STATE_KINDS for k in spec.layer_kinds):
        out.append("state layers: their state is read and written; the recurrence's FLOPs are left out")
    return tuple(out)


def bound(
    spec: ModelSpec,
    gpu,
    fit,
    concurrency: int,
    context: int,
    prompt_len: int | None = None,
    mbu: float | None = None,
    mfu: float | None = None,
    requests: Sequence[tuple[int, int]] | None = None,
) -> PerfResult:
    """Decode and prefill bounds for ``fit``'s layout (its TP, PP, KV dtype, weights per GPU) on ``gpu``.

    Args:
        spec: the model (``spec.moe`` for MoE models).
        gpu: the GPU (catalog bandwidth and BF16 TFLOP/s).
        fit: a :class:`kvplan.fit.FitResult` (used as a black box: tensor_parallel_size,
            pipeline_parallel_size, kv_dtype, weights_bytes, weights_dtype).
        concurrency: requests decoding together (N >= 1).
        context: tokens cached per request (T >= 0).
        prompt_len: tokens of the prompt for the TTFT bound (default: ``context``, at least 1).
        mbu, mfu: fractions of peak bandwidth and FLOP/s in [0.01, 1] (None: :data:`DEFAULT_MBU`,
            :data:`DEFAULT_MFU`).
        requests: (count, context) pairs instead of N requests at T (a workload mix); N and T are then
            only reported.

    Raises:
        UsageError: counts out of range, MBU/MFU outside [0.01, 1], a GPU without a bandwidth.
    """
    _check_count("--concurrency", concurrency, 1, MAX_BATCH)
    _check_count("--context", context, 0, MAX_TOKENS)
    prompt = max(1, context) if prompt_len is None else _check_count("--prompt-len", prompt_len, 1, MAX_TOKENS)
    hw = hardware(gpu, fit.weights_dtype, mbu, mfu)
    reqs = list(requests) if requests is not None else [(concurrency, context)]
    dec = step_bound(spec, fit, hw, reqs)
    pre = step_bound(spec, fit, hw, [(1, prompt)], prefill=True)
    w = dec.worst
    moe = spec.moe
    tokens = sum(c for c, _ in reqs)
    return PerfResult(
        model=spec.name,
        gpu=gpu.id,
        tensor_parallel_size=fit.tensor_parallel_size,
        pipeline_parallel_size=fit.pipeline_parallel_size,
        concurrency=tokens,
        context_tokens=context,
        prompt_tokens=prompt,
        mbu=hw.mbu,
        mfu=hw.mfu,
        bandwidth_tbs=gpu.bandwidth_tbs,
        peak_tflops=None if hw.peak_flops is None else hw.peak_flops / 1e12,
        interconnect_gbs=None if hw.link is None else hw.link / 1e9,
        compute_dtype=hw.compute_dtype,
        weights_bytes=fit.weights_bytes,
        weights_read_bytes=w.weights_read_bytes,
        experts_touched=None if moe is None else experts_touched(moe.num_experts, moe.experts_per_token, tokens),
        kv_read_bytes=w.kv_read_bytes,
        state_rw_bytes=w.state_bytes,
        decode_step_bytes=w.bytes,
        decode_step_flops=w.flops,
        allreduce_bytes=w.allreduce_bytes,
        memory_ms=w.memory_s * 1e3,
        compute_ms=w.compute_s * 1e3,
        allreduce_ms=w.allreduce_s * 1e3,
        tpot_ms_bound=dec.seconds * 1e3,
        decode_tokens_per_s_bound=tokens / dec.slowest_s,
        decode_tokens_per_s_per_gpu_bound=tokens
        / dec.slowest_s
        / (fit.tensor_parallel_size * fit.pipeline_parallel_size),
        bound_by=w.bound_by,
        prefill_flops=pre.worst.flops,
        prefill_bytes=pre.worst.bytes,
        ttft_ms_bound=pre.seconds * 1e3,
        ttft_bound_by=pre.worst.bound_by,
        notes=_notes(spec, gpu, fit, hw),
    )


def tpot_seconds(spec: ModelSpec, gpu, fit, requests: Sequence[tuple[int, int]], mbu=None, mfu=None) -> float:
    """TPOT bound (s) of a decode step over ``requests`` ((count, context) pairs); see :func:`bound`."""
    return step_bound(spec, fit, hardware(gpu, fit.weights_dtype, mbu, mfu), requests).seconds


def max_concurrency_for_tpot(
    spec: ModelSpec, gpu, fit, tpot_s: float, shares: Sequence[tuple[float, int]], limit: int, mbu=None, mfu=None
) -> int:
    """The most requests (up to ``limit``) whose decode step meets ``tpot_s``; 0 when not even one does.

    ``shares`` are (fraction of requests, context) per class; N requests are split by largest remainder.
    TPOT never falls as N grows (more bytes and FLOPs), so a binary search finds the largest N.
    """
    hw = hardware(gpu, fit.weights_dtype, mbu, mfu)

    def ok(n: int) -> bool:
        return step_bound(spec, fit, hw, split(n, shares)).seconds <= tpot_s

    if limit < 1 or not ok(1):
        return 0
    lo, hi = 1, limit
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def split(n: int, shares: Sequence[tuple[float, int]]) -> list[tuple[int, int]]:
    """``n`` requests split over (fraction, context) classes by largest remainder (at least one request)."""
    raw = [(f * n, t) for f, t in shares]
    counts = [int(x) for x, _ in raw]
    rest = n - sum(counts)
    order = sorted(range(len(raw)), key=lambda i: -(raw[i][0] - counts[i]))
    for i in order[:rest]:
        counts[i] += 1
    return [(c, t) for c, (_, t) in zip(counts, raw, strict=True) if c]


def fit_bound(
    spec: ModelSpec,
    gpu,
    fit,
    opts,
    concurrency: int | None = None,
    context: int | None = None,
    prompt_len: int | None = None,
    mbu: float | None = None,
    mfu: float | None = None,
) -> tuple[PerfResult | None, list[str]]:
    """``kvplan fit``'s bound: N = the requests that fit and T = max_model_len unless given.

    Returns:
        (the bound, or None when none can be computed and no speed flag was given; warnings, one line each:
        N beyond what fits at T or beyond max_num_seqs).

    Raises:
        UsageError: a speed flag is given but no bound can be computed (a GPU given by size), or
            out-of-range values.
    """
    from dataclasses import replace

    from kvplan.fit import plan_fit

    given = any(x is not None for x in (concurrency, context, prompt_len, mbu, mfu))
    warnings: list[str] = []
    # a given --concurrency is checked as given (0 or negative: refused); the default is at least 1
    n = max(1, fit.max_concurrent_requests) if concurrency is None else concurrency
    t = fit.max_model_len if context is None else context
    try:
        result = bound(spec, gpu, fit, n, t, prompt_len, mbu, mfu)
    except UsageError:
        if given:
            raise
        return None, []  # no speed flag: the plan is what was asked for (JSON keys null)
    if concurrency is not None:
        wall = (
            fit
            if t == fit.max_model_len
            else plan_fit(spec, gpu, replace(opts, max_model_len=t, shared_prefix_tokens=0))
        )
        if concurrency > wall.max_requests_by_memory:
            warnings.append(
                f"--concurrency {concurrency:,}: only {wall.max_requests_by_memory:,} requests of {t:,} tokens fit the "
                "KV budget (bound computed anyway)"
            )
        seqs = getattr(fit, "max_num_seqs", None)
        if seqs is not None and concurrency > seqs:
            warnings.append(
                f"--concurrency {concurrency:,}: beyond the engine's max_num_seqs {seqs:,} (bound computed anyway)"
            )
    return result, warnings
