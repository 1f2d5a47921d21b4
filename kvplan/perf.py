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

from kvplan.calc import cdiv, largest_true, layer_state_bytes, layer_token_bytes, resolve_kv_dtypes
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


@dataclass(frozen=True)
class Efficiency:
    """What a speed figure assumes of the hardware: fractions of its peaks and the fixed time a step pays.

    The **limit** (:data:`LIMIT`) is MBU = MFU = link = 1 and no fixed time: a physical bound no measurement
    may beat. The **estimate** (:func:`estimate_efficiency`) takes efficiencies calibrated on published
    measurements per engine and GPU class (``scripts/calibrate_speed.py``; docs/throughput-validation.md).

    Attributes:
        name: ``limit``, ``estimate``, or ``given`` (the limit's model at --mbu / --mfu).
        basis: what an estimate was calibrated for (``vllm on nvidia-hopper``; ``+ --mbu/--mfu`` when they
            replace its fractions).
        mbu, mfu, link: fractions of peak DRAM bandwidth, tensor FLOP/s and interconnect bandwidth.
        layer_us: fixed microseconds per decoder layer per step (its kernel launches and small kernels).
        moe_layer_us: more per MoE layer (routing, top-k, the grouped expert GEMMs' fixed cost: small-batch MoE
            runs far from the bandwidth line).
        collective_us: per tensor-parallel all-reduce (two per layer): its latency.
        step_us: per step and PP stage (scheduling, sampling).
        median_abs_error: the estimate's median |relative error| on the published measurements it was
            calibrated on (in-sample; None for the limit).
        loo_median_abs_error: the same, each measurement predicted by a calibration without it (leave-one-out:
            what a configuration outside the set can expect; None for the limit or when not computed).
        measurements: how many measurements calibrated it (0 for the limit).
    """

    name: str = "limit"
    basis: str = ""
    mbu: float = 1.0
    mfu: float = 1.0
    link: float = 1.0
    layer_us: float = 0.0
    moe_layer_us: float = 0.0
    collective_us: float = 0.0
    step_us: float = 0.0
    median_abs_error: float | None = None
    measurements: int = 0
    loo_median_abs_error: float | None = None


LIMIT = Efficiency()
"""MBU = MFU = 1, no fixed costs: the physical limit."""


def gpu_class(gpu) -> str:
    """The GPU class the estimate is calibrated per: ``nvidia-hopper`` (H100, H200, H20, GH200, H800),
    ``nvidia-blackwell``, ``nvidia-ampere`` (A100, A10, A10G, RTX 30xx), ``nvidia-ada`` (L4, L40, L40S, RTX 40xx,
    RTX 6000 Ada), ``nvidia-other``, ``amd``; from the catalog id."""
    gid = gpu.id.lower()
    if gpu.vendor == "amd" or gid.startswith("mi"):
        return "amd"
    if gid.startswith(("h100", "h200", "h20", "gh200", "h800")):
        return "nvidia-hopper"
    if gid.startswith(("b200", "b300", "gb200", "gb300", "rtx5090", "rtx-pro-6000")):
        return "nvidia-blackwell"
    if gid.startswith(("a100", "a10", "rtx3090", "a40")):
        return "nvidia-ampere"
    if gid.startswith(("l4", "l40", "rtx4090", "rtx6000-ada")):
        return "nvidia-ada"
    return "nvidia-other"


def estimate_error_text(eff: Efficiency | None = None) -> str:
    """The speed estimate's measured error as ``kvplan fit`` and ``kvplan fleet`` state it (the one place it is
    worded): the median |error| with each published measurement predicted by a calibration without it
    (leave-one-out: the honest figure for a configuration the calibration has not seen), named so, then the
    in-sample figure; ``median |error| 17.7% leave-one-out on 66 published measurements (13.6% in-sample)``.
    ``eff``: an estimate's :class:`Efficiency` (None: the calibration's); "" for the limit.

    Source: ``scripts/calibrate_speed.py --loo`` (:data:`kvplan.data.speed_estimate.CALIBRATION`),
    docs/throughput-validation.md."""
    if eff is None:
        from kvplan.data.speed_estimate import CALIBRATION

        eff = Efficiency(name="estimate", median_abs_error=CALIBRATION["median_abs_error"],
                         measurements=CALIBRATION["measurements"],
                         loo_median_abs_error=CALIBRATION.get("loo_median_abs_error"))  # fmt: skip
    if eff.median_abs_error is None:
        return ""
    n = f"on {eff.measurements} published measurements"
    if eff.loo_median_abs_error is None:
        return f"median |error| {eff.median_abs_error:.1%} in-sample {n}"
    return f"median |error| {eff.loo_median_abs_error:.1%} leave-one-out {n} ({eff.median_abs_error:.1%} in-sample)"


def estimate_efficiency(engine: str, gpu, mbu: float | None = None, mfu: float | None = None) -> Efficiency:
    """The calibrated efficiencies of ``engine`` on ``gpu``'s class (:func:`gpu_class`), from
    :data:`kvplan.data.speed_estimate.CALIBRATION` (written by ``scripts/calibrate_speed.py`` from
    tests/fixtures/throughput_measurements.yaml); --mbu / --mfu override its fractions.

    The calibration holds per-engine values (fractions of peak and fixed costs) and per-GPU-class factors (on
    the fractions, and on the fixed costs); an engine or class without measurements takes the pooled values
    (the ``*`` entries).

    Raises:
        UsageError: --mbu / --mfu outside [0.01, 1].
    """
    from dataclasses import replace

    from kvplan.data.speed_estimate import CALIBRATION

    engines = CALIBRATION["engines"]
    e = dict(engines.get(engine) or engines["*"])
    classes = CALIBRATION["gpu_classes"]
    cls = gpu_class(gpu)
    c = classes.get(cls) or classes["*"]
    f, g = c["efficiency"], c["fixed"]
    eff = Efficiency(
        name="estimate",
        basis=f"{engine} on {cls}" + ("" if engine in engines and cls in classes else " (pooled)"),
        mbu=min(1.0, e["mbu"] * f),
        mfu=min(1.0, e["mfu"] * f),
        link=e["link"],
        layer_us=e["layer_us"] * g,
        moe_layer_us=e["moe_layer_us"] * g,
        collective_us=e["collective_us"] * g,
        step_us=e["step_us"] * g,
        median_abs_error=CALIBRATION["median_abs_error"],
        measurements=CALIBRATION["measurements"],
        loo_median_abs_error=CALIBRATION.get("loo_median_abs_error"),
    )
    if mbu is not None or mfu is not None:
        eff = replace(
            eff,
            mbu=eff.mbu if mbu is None else check_fraction("--mbu", mbu),
            mfu=eff.mfu if mfu is None else check_fraction("--mfu", mfu),
            basis=eff.basis + " with --mbu/--mfu",
        )
    return eff


@dataclass(frozen=True, eq=False)
class StageCost:
    """What one step costs one GPU of one pipeline stage. Bytes and FLOPs are ints, times in seconds.

    Attributes:
        layers: decoder layers of the stage.
        weights_read_bytes: weights the step reads (MoE: the experts its tokens touch).
        kv_read_bytes: KV (and MLA latent / indexer) bytes read for the requests of this GPU's attention group.
        state_bytes: recurrent state read and written for those requests (2 × state).
        kv_write_bytes: KV written (prefill only; 0 for decode).
        linear_flops, attention_flops: FLOPs of the matmuls with weights, and of attention.
        allreduce_bytes: bytes through the GPU's link for the attention-TP all-reduces.
        alltoall_bytes: bytes through its link for expert-parallel dispatch and combine (0 without EP).
        memory_s, compute_s, allreduce_s: bytes / (bandwidth × MBU), FLOPs / (peak × MFU), link bytes /
            (link bandwidth × its efficiency).
        fixed_s: the estimate's fixed time (launches, collective latency; 0 for the limit).
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
    alltoall_bytes: int = 0
    fixed_s: float = 0.0

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
        """max(memory, compute) + link + fixed."""
        return max(self.memory_s, self.compute_s) + self.allreduce_s + self.fixed_s

    @property
    def bound_by(self) -> str:
        """``memory`` or ``compute``: the larger of the two times."""
        return "compute" if self.compute_s > self.memory_s else "memory"


@dataclass(frozen=True, eq=False)
class Hardware:
    """Peaks used for a figure: bandwidth in B/s, FLOP/s, link B/s (None: unknown), and the efficiencies."""

    bandwidth: float
    peak_flops: float | None
    link: float | None
    eff: Efficiency
    compute_dtype: str

    @property
    def mbu(self) -> float:
        """The fraction of peak bandwidth."""
        return self.eff.mbu

    @property
    def mfu(self) -> float:
        """The fraction of peak FLOP/s."""
        return self.eff.mfu


def hardware(
    gpu, weights_dtype: str, mbu: float | None = None, mfu: float | None = None, eff: Efficiency | None = None
) -> Hardware:
    """The peaks of ``gpu`` for weights in ``weights_dtype`` (fit's name), with ``eff`` (default
    :data:`LIMIT`); ``mbu`` / ``mfu`` replace its fractions when given.

    Raises:
        UsageError: MBU or MFU outside [0.01, 1]; a GPU without a bandwidth (a size: give a catalog GPU).
    """
    from dataclasses import replace

    eff = LIMIT if eff is None else eff
    if mbu is not None or mfu is not None:
        eff = replace(
            eff,
            name="given" if eff is LIMIT else eff.name,
            mbu=eff.mbu if mbu is None else check_fraction("--mbu", mbu),
            mfu=eff.mfu if mfu is None else check_fraction("--mfu", mfu),
        )
    if gpu.bandwidth_tbs is None:
        raise UsageError(
            f"--gpu {gpu.name}: no memory bandwidth known, so no speed figures; give a catalog GPU (kvplan gpus)"
        )
    fp8 = weights_dtype == "fp8" and gpu.fp8
    peak = None if gpu.bf16_dense_tflops is None else gpu.bf16_dense_tflops * 1e12 * (2 if fp8 else 1)
    link = INTERCONNECT_GBS.get(gpu.id)
    return Hardware(gpu.bandwidth_tbs * 1e12, peak, None if link is None else link * 1e9, eff, "fp8" if fp8 else "bf16")


@dataclass(frozen=True, eq=False)
class _Weights:
    """Weights per GPU, and the bytes of one routed expert's slice on one GPU (MoE), a float."""

    per_gpu: int
    expert_bytes_per_gpu: float


def _weights(spec: ModelSpec, fit) -> _Weights:
    """Weights held per GPU (fit's) and one routed expert's bytes on one GPU (sliced over the MoE TP) in one
    layer, in the weights' format."""
    par = fit.parallel
    if spec.moe is None:
        return _Weights(fit.weights_bytes, 0.0)
    from kvplan.dtypes import get_weight_dtype

    try:
        per_expert = float(get_weight_dtype(fit.weights_dtype).bytes_for(spec.moe.expert_param_count))
    except UsageError:  # given / checkpoint / unknown bytes: the average bytes per parameter
        if not spec.param_count:
            return _Weights(fit.weights_bytes, 0.0)
        per_expert = spec.moe.expert_param_count * fit.weights_bytes * par.gpus / spec.param_count
    return _Weights(fit.weights_bytes, per_expert / (par.expert_slicing * par.pp))


def _embedding_unread(spec: ModelSpec, fit) -> int:
    """Bytes of the input embedding table per GPU that a step does not read: an embedding lookup reads one
    row per token, not the table (``vocab_size × hidden_size`` parameters, split over the attention TP as
    vLLM's ``VocabParallelEmbedding``, spread over the stages as the weights are). In the model dtype when the
    checkpoint keeps its unquantized parameters there (``param_count_unquantized``), else in the weights' format.
    0 without ``vocab_size`` or ``hidden_size``. A tied LM head reads the table anyway: leaving it out then only
    makes the figures faster, so the limit stays a bound."""
    vocab, hidden = spec.vocab_size, spec.hidden_size
    if not vocab or not hidden or not spec.param_count:
        return 0
    from kvplan.dtypes import get_weight_dtype

    params = vocab * hidden
    par = fit.parallel
    try:
        wd = get_weight_dtype(fit.weights_dtype)
        model = get_weight_dtype(spec.dtype)
        kept = spec.param_count_unquantized >= params and wd.bits != model.bits
        total = (model if kept else wd).bytes_for(params)
    except UsageError:  # given / checkpoint bytes: the average bytes per parameter
        total = params * fit.weights_bytes * par.gpus / spec.param_count
    return int(total // (par.attn_tp * par.pp))


def _allreduce_bytes(spec: ModelSpec, layers: int, tp: int, tokens: int) -> int:
    """Bytes one GPU sends for the step's all-reduces: 2 per layer, each ``2(TP−1)/TP × tokens × hidden``
    activations (ring)."""
    if tp == 1:
        return 0
    return cdiv(2 * layers * 2 * (tp - 1) * tokens * _hidden(spec) * _act(spec), tp)


_LAYER_TABLES: dict[tuple, tuple] = {}


def _layer_table(spec: ModelSpec, kv_dtype: tuple, tp: int, layers: range, prefill: bool) -> tuple[tuple, ...]:
    """The distinct layers of ``layers`` with what a step needs of each: (layer, geometry it attends with,
    KV bytes per token, state bytes, attention width d_k + d_v, how many layers are alike). ``kv_dtype``: the
    (K, V) dtypes. Kept per (spec, dtypes, TP, layers, prefill): a fleet asks for thousands of steps of one
    layout."""
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
        per_token = layer_token_bytes(geo, kv_dtype[0], tp, kv_dtype[1])
        state_one = layer_state_bytes(layer, spec.dtype, tp)
        dims = 0 if geo.kind in STATE_KINDS or geo.kind == "none" else _attention_dims(geo, spec, decode=not prefill)
        table.append((layer, geo, per_token, state_one, dims, n))
    if len(_LAYER_TABLES) > 256:
        _LAYER_TABLES.clear()
    _LAYER_TABLES[key] = (spec, tuple(table))
    return _LAYER_TABLES[key][1]


def _hidden(spec: ModelSpec) -> int:
    return spec.hidden_size or spec.num_q_heads * spec.head_dim


def _act(spec: ModelSpec) -> int:
    return _ACT_BYTES.get(spec.dtype, 2)


def request_terms(spec: ModelSpec, fit, layers: range, tokens: int, prefill: bool = False) -> tuple[int, int, int, int]:
    """(KV read, state read + written, KV written, attention FLOPs) of one request with ``tokens`` cached
    (decode) or of a ``tokens``-token prompt (``prefill``), on one GPU of the attention group holding
    ``layers`` (the cache at the attention TP, as fit sized it)."""
    return request_terms_many(spec, fit, layers, [tokens], prefill)[0]


def request_terms_many(spec: ModelSpec, fit, layers: range, tokens: Sequence[int],
                       prefill: bool = False) -> list[tuple[int, int, int, int]]:  # fmt: skip
    """:func:`request_terms` of each of ``tokens`` (the layout's lookups done once)."""
    tp = fit.parallel.attn_tp
    kv_dtype = resolve_kv_dtypes(spec, fit.kv_dtype)  # (K, V): llama.cpp's -ctk and -ctv may differ
    heads = spec.num_q_heads // tp  # query heads per GPU (check_tp: H_q % TP == 0)
    table = _layer_table(spec, kv_dtype, tp, layers, prefill)
    out = []
    for t in tokens:
        kv = state = kv_write = attn = 0
        # identical layers cost alike: each distinct layer once, times how many there are (exact ints)
        for layer, geo, per_token, state_one, dims, alike in table:
            state += alike * 2 * state_one
            if prefill:
                kind = geo.kind
                pairs = causal_pairs(t, spec.window_of(kind), chunked=kind == "chunked")
                attn += alike * 2 * heads * dims * pairs
                if layer.kind != "shared":
                    kv_write += alike * t * per_token
            else:
                read = tokens_read(layer, spec, t)
                kv += alike * read * per_token
                attn += alike * 2 * heads * dims * read
        out.append((kv, state, kv_write, attn))
    return out


class _Stage:
    """The parts of one stage's step cost that do not depend on the requests (see :func:`stage_cost`)."""

    def __init__(self, spec: ModelSpec, fit, hw: Hardware, layers: range):
        par = fit.parallel
        self.spec, self.fit, self.hw, self.layers, self.par = spec, fit, hw, layers, par
        moe = spec.moe
        self.w = _weights(spec, fit)
        self.embedding_unread = _embedding_unread(spec, fit)
        self.moe_layers = 0.0 if moe is None else moe.num_moe_layers * len(layers) / spec.num_layers
        active = spec.active_param_count or 0
        routed = 0 if moe is None else moe.experts_per_token * moe.expert_param_count * moe.num_moe_layers
        self.dense_active, self.routed_active = active - routed, routed
        eff = hw.eff
        fixed_us = len(layers) * eff.layer_us + self.moe_layers * eff.moe_layer_us + eff.step_us
        if par.attn_tp > 1:
            fixed_us += 2 * len(layers) * eff.collective_us
        self.fixed_s = fixed_us * 1e-6
        self._by_tokens: dict[int, tuple] = {}  # seconds(): tokens -> (weights read, linear FLOPs, link s)

    def _parts(self, tokens: int, kv: int, state: int, kv_write: int, attn: int, prefill: bool) -> tuple:
        """(weights read, linear FLOPs, all-reduce bytes, all-to-all bytes, memory s, compute s, link s)."""
        spec, hw, par = self.spec, self.hw, self.par
        pp = par.pp
        total = tokens if prefill else tokens * par.attn_dp  # tokens through the experts: every group's (decode)
        moe = spec.moe
        weights_read = self.w.per_gpu - self.embedding_unread
        if moe is not None and self.w.expert_bytes_per_gpu:
            local = cdiv(moe.num_experts, par.ep)
            touched = experts_touched(moe.num_experts, moe.experts_per_token, total)
            untouched = local * (1 - touched / moe.num_experts) if par.ep > 1 else moe.num_experts - touched
            weights_read -= round(untouched * self.moe_layers * self.w.expert_bytes_per_gpu)
        linear = cdiv(2 * self.dense_active * tokens, par.attn_tp * pp)
        linear += cdiv(2 * self.routed_active * total, par.gpus_per_stage * pp)
        ar = _allreduce_bytes(spec, len(self.layers), par.attn_tp, tokens)
        a2a = 0
        if moe is not None and par.ep > 1:
            k = moe.experts_per_token
            a2a = cdiv(round(2 * self.moe_layers * tokens * k * _hidden(spec) * _act(spec) * (par.ep - 1)),
                       par.attn_tp * par.ep)  # fmt: skip
        eff = hw.eff
        memory_s = (weights_read + kv + state + kv_write) / (hw.bandwidth * eff.mbu)
        compute_s = 0.0 if hw.peak_flops is None else (linear + attn) / (hw.peak_flops * eff.mfu)
        link_s = 0.0 if hw.link is None or not (ar + a2a) else (ar + a2a) / (hw.link * eff.link)
        return weights_read, linear, ar, a2a, memory_s, compute_s, link_s

    def cost(self, tokens: int, kv: int, state: int, kv_write: int, attn: int, prefill: bool = False) -> StageCost:
        """The stage's cost when this GPU's attention group puts ``tokens`` through the matmuls (decode: its
        requests; prefill: the prompt), with their summed request terms."""
        weights_read, linear, ar, a2a, memory_s, compute_s, link_s = self._parts(tokens, kv, state, kv_write, attn,
                                                                                  prefill)  # fmt: skip
        return StageCost(len(self.layers), weights_read, kv, state, kv_write, linear, attn, ar, memory_s, compute_s,
                         link_s, a2a, self.fixed_s)  # fmt: skip

    def seconds(self, tokens: int, kv: int, state: int, attn: int) -> float:
        """:attr:`StageCost.seconds` of :meth:`cost` for a decode step (the figure alone): :meth:`_parts`'
        arithmetic, its terms that depend on ``tokens`` alone (the weights read, the linear FLOPs, the link time)
        kept per token count, so that the packing's many questions about one layout cost a few float operations
        each (the same expressions, so the same floats)."""
        known = self._by_tokens.get(tokens)
        if known is None:
            weights_read, linear, *_, link_s = self._parts(tokens, 0, 0, 0, 0, False)
            known = self._by_tokens[tokens] = (weights_read, linear, link_s)
        weights_read, linear, link_s = known
        hw = self.hw
        eff = hw.eff
        memory_s = (weights_read + kv + state + 0) / (hw.bandwidth * eff.mbu)
        compute_s = 0.0 if hw.peak_flops is None else (linear + attn) / (hw.peak_flops * eff.mfu)
        return max(memory_s, compute_s) + link_s + self.fixed_s


def stage_cost(
    spec: ModelSpec,
    fit,
    hw: Hardware,
    layers: range,
    requests: Sequence[tuple[int, int]],
    prefill: bool = False,
) -> StageCost:
    """The cost of one decode step (``requests``: (count, tokens cached) pairs of one attention group) or of
    one prefill (``prefill``: one (1, P) request) on one GPU of the stage holding ``layers``.

    With attention data parallelism (``fit.parallel.attn_dp`` > 1) every group is taken to be as loaded as
    this one: the experts see ``attn_dp ×`` its tokens. The routed experts on a GPU are ``ceil(E / EP)`` of
    them, each read when a token of the step is routed to it (:func:`experts_touched`); the routed-expert
    FLOPs are spread over the stage's GPUs; expert parallelism moves each token's k expert inputs and outputs
    over the link (``2 × k × hidden`` activations per token per MoE layer, the share ``(EP − 1)/EP`` of them
    leaving the GPU).

    Raises:
        UsageError: an unknown KV dtype in ``fit``.
    """
    stage = _Stage(spec, fit, hw, layers)
    n = sum(c for c, _ in requests)
    tokens = sum(c * t for c, t in requests) if prefill else n
    kv = state = kv_write = attn = 0
    for count, t in requests:
        k, s, w, a = request_terms(spec, fit, layers, t, prefill)
        kv, state, kv_write, attn = kv + count * k, state + count * s, kv_write + count * w, attn + count * a
    return stage.cost(tokens, kv, state, kv_write, attn, prefill)


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


def prefill_seconds(spec: ModelSpec, fit, hw: Hardware, prompts: Sequence[int]) -> dict[int, float]:
    """``{P: step_bound(spec, fit, hw, [(1, P)], prefill=True).seconds}`` for each prompt length: the same
    arithmetic, each stage's fixed parts and layer lookups done once for all the prompts (a workload of
    1,000 classes has as many prompt lengths).

    Raises:
        UsageError: an unknown KV dtype in ``fit``.
    """
    distinct = sorted(set(prompts))
    per_stage = []
    for r in _stages(spec, fit.pipeline_parallel_size):
        stage = _Stage(spec, fit, hw, r)
        terms = request_terms_many(spec, fit, r, distinct, True)
        per_stage.append([stage.cost(p, k, s, w, a, True).seconds
                          for p, (k, s, w, a) in zip(distinct, terms, strict=True)])  # fmt: skip
    return {p: sum(times[j] for times in per_stage) for j, p in enumerate(distinct)}


class StepModel:
    """The decode step of one layout as a function of how many requests of each class an attention group
    holds: the request terms (:func:`request_terms`) computed once per class and stage, so that packing can
    ask "does this mix meet the target" many times. :meth:`step` is exactly :func:`step_bound`'s arithmetic.

    Args:
        contexts: tokens cached per request, one per class (the decode context).
        interference: per class, seconds one of its requests adds to every step for the prefill of the
            requests that replace it (:func:`prefill_interference_s`; 0: prefill runs elsewhere).
    """

    def __init__(self, spec: ModelSpec, fit, hw: Hardware, contexts: Sequence[int],
                 interference: Sequence[float] | None = None, terms: list | None = None):  # fmt: skip
        self.stages = [_Stage(spec, fit, hw, r) for r in _stages(spec, fit.pipeline_parallel_size)]
        # the request terms do not depend on the hardware: another model of the same layout and contexts may
        # share them (``terms``: its :attr:`terms`)
        self.terms = terms if terms is not None else [request_terms_many(spec, fit, st.layers, contexts)
                                                      for st in self.stages]  # fmt: skip
        self.interference = list(interference) if interference is not None else [0.0] * len(contexts)

    def sums(self, counts: dict[int, int]) -> tuple[int, list[tuple[int, int, int]]]:
        """(requests, per stage (KV read, state read + written, attention FLOPs)) of a group holding ``counts``:
        exact ints, the same for every model sharing :attr:`terms`."""
        out = []
        for terms in self.terms:
            kv = state = attn = 0
            for i, c in counts.items():
                k, s, _, a = terms[i]
                kv, state, attn = kv + c * k, state + c * s, attn + c * a
            out.append((kv, state, attn))
        return sum(counts.values()), out

    def step(self, counts: dict[int, int], sums: tuple | None = None) -> StepBound:
        """The decode step alone of a group holding ``counts[i]`` requests of class i (``sums``: its
        :meth:`sums`, when already known)."""
        n, per_stage = self.sums(counts) if sums is None else sums
        if len(self.stages) == 1:  # one stage (no PP): the same figures, without the max and the sum
            kv, state, attn = per_stage[0]
            only = self.stages[0].cost(n, kv, state, 0, attn)
            seconds = only.seconds
            return StepBound((only,), only, seconds, seconds)
        out = [st.cost(n, kv, state, 0, attn) for st, (kv, state, attn) in zip(self.stages, per_stage, strict=True)]
        worst = max(out, key=lambda s: s.seconds)
        return StepBound(tuple(out), worst, sum(s.seconds for s in out), worst.seconds)

    def times(self, counts: dict[int, int], sums: tuple | None = None) -> tuple[float, float]:
        """(:attr:`StepBound.seconds`, :attr:`StepBound.slowest_s`) of :meth:`step`, without its breakdown."""
        n, per_stage = self.sums(counts) if sums is None else sums
        if len(self.stages) == 1:
            kv, state, attn = per_stage[0]
            seconds = self.stages[0].seconds(n, kv, state, attn)
            return seconds, seconds
        out = [st.seconds(n, kv, state, attn) for st, (kv, state, attn) in zip(self.stages, per_stage, strict=True)]
        return sum(out), max(out)

    def mix(self, counts: dict[int, int]) -> tuple:
        """What :meth:`seconds_with` adds one class's requests to: (requests, per stage (KV read, state, attention
        FLOPs), the prefill interference summed in ``counts``' order)."""
        n, per_stage = self.sums(counts)
        return n, per_stage, self.extra_s(counts)

    def seconds_with(self, mix: tuple, i: int, k: int) -> float:
        """:meth:`seconds` of ``{**counts, i: k}`` for ``mix = self.mix(counts)`` and a class ``i`` not in
        ``counts``: the same ints and the same float operations in the same order, without summing ``counts``
        again (the packing asks this for many ``k``)."""
        n, per_stage, extra = mix
        n += k
        stages = []
        for (kv, state, attn), terms in zip(per_stage, self.terms, strict=True):
            tk, ts, _, ta = terms[i]
            stages.append((kv + k * tk, state + k * ts, attn + k * ta))
        if len(self.stages) == 1:
            kv, state, attn = stages[0]
            step = self.stages[0].seconds(n, kv, state, attn)
        else:
            step = sum(st.seconds(n, kv, state, attn)
                       for st, (kv, state, attn) in zip(self.stages, stages, strict=True))  # fmt: skip
        return step + (extra + k * self.interference[i])

    def extra_s(self, counts: dict[int, int]) -> float:
        """The prefill interference (s) a group holding ``counts`` adds to each step."""
        return sum(c * self.interference[i] for i, c in counts.items())

    def seconds(self, counts: dict[int, int], sums: tuple | None = None) -> float:
        """TPOT (s) of a group holding ``counts``: the step (all stages) plus the prefill interference."""
        extra = self.extra_s(counts)
        return self.times(counts, sums)[0] + extra


def prefill_interference_s(spec: ModelSpec, fit, hw: Hardware, prompt: int, output: int) -> float:
    """Seconds one running request adds to every decode step for the prefill of the request that will take
    its place: its prompt's prefill FLOPs time (at ``hw``'s MFU, the stages summed) spread over the
    ``output`` steps it decodes. In-flight batching mixes prefill chunks into decode steps, where the
    weights are read once for both, so a prompt costs the step its FLOPs, not another pass over the
    weights. Part of the estimate, never of the limit (which is the decode step alone)."""
    pre = step_bound(spec, fit, hw, [(1, prompt)], prefill=True)
    return sum(s.compute_s for s in pre.stages) / max(1, output)


@dataclass(frozen=True, eq=False)
class PerfResult:
    """Speed figures of one replica layout at one operating point. Bytes and FLOPs are ints, per GPU.

    ``figure`` says what they are: ``limit`` (MBU = MFU = 1, no fixed costs: no real system is faster),
    ``estimate`` (calibrated efficiencies, :func:`estimate_efficiency`; its ``median_abs_error`` on the
    published measurements), or ``given`` (--mbu / --mfu on the limit's model).

    Attributes:
        figure, efficiency: what the figures assume (:class:`Efficiency`).
        concurrency: requests decoding together (N).
        context_tokens: tokens cached per request during the decode step (T).
        prompt_tokens: prompt length of the TTFT figure (P).
        mbu, mfu: the fractions of peak bandwidth and FLOP/s assumed.
        bandwidth_tbs, peak_tflops, interconnect_gbs: the GPU's peaks used (TB/s, TFLOP/s, GB/s; None: unknown).
        compute_dtype: ``fp8`` (FP8 weights on FP8 tensor cores: 2 × the BF16 peak) or ``bf16``.
        weights_bytes: weights held per GPU; weights_read_bytes: read per decode step (MoE: touched experts).
        experts_touched: expected distinct routed experts per MoE layer per step, or None (dense).
        kv_read_bytes, state_rw_bytes: KV read and state read + written per step, per GPU.
        decode_step_bytes, decode_step_flops: per GPU of the slowest stage.
        allreduce_bytes: per GPU per step through its link (TP all-reduces and EP all-to-all).
        memory_ms, compute_ms, allreduce_ms, fixed_ms: the slowest stage's parts (ms).
        tpot_ms: time per output token (all stages); decode_tokens_per_s: N / the slowest stage.
        decode_tokens_per_s_per_gpu: the replica's tokens/s over its GPUs.
        bound_by: ``memory`` or ``compute`` (the slowest stage's decode step).
        prefill_flops, prefill_bytes: per GPU of the slowest stage for a P-token prompt; ttft_ms,
            ttft_bound_by: the TTFT figure and what limits it.
        notes: what the figures leave out for this model or GPU (one line each).
    """

    model: str
    gpu: str
    figure: str
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
    fixed_ms: float
    tpot_ms: float
    decode_tokens_per_s: float
    decode_tokens_per_s_per_gpu: float
    bound_by: str
    prefill_flops: int
    prefill_bytes: int
    ttft_ms: float
    ttft_bound_by: str
    efficiency: Efficiency = LIMIT
    notes: tuple[str, ...] = ()


def _notes(spec: ModelSpec, gpu, fit, hw: Hardware) -> tuple[str, ...]:
    out = []
    if hw.peak_flops is None:
        out.append(f"{gpu.id}: no BF16 tensor-core peak in the catalog; the compute term is left out")
    if fit.gpus_per_replica > 1 and hw.link is None:
        out.append(f"{gpu.id}: no interconnect bandwidth known; the TP all-reduce time is left out")
    if spec.active_param_count is None:
        out.append(f"{spec.name}: no param_count; the linear FLOPs are left out")
    if spec.moe is None and spec.param_count is not None and "moe" in spec.notes.lower():
        out.append(f"{spec.name}: no moe facts in the spec; every parameter is counted as read and active")
    if spec.moe is not None:
        out.append("MoE: expected distinct experts under uniform routing; skewed routing reads fewer")
    if fit.data_parallel_size > 1:
        out.append(f"attention DP {fit.data_parallel_size}: every group taken as loaded as this one")
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
    eff: Efficiency | None = None,
) -> PerfResult:
    """Decode and prefill figures for ``fit``'s layout (its TP, PP, DP, EP, KV dtype, weights per GPU) on
    ``gpu``: the limit by default (:data:`LIMIT`), or with ``eff`` (:func:`estimate_efficiency`); ``mbu`` /
    ``mfu`` replace its fractions.

    Args:
        spec: the model (``spec.moe`` for MoE models).
        gpu: the GPU (catalog bandwidth and BF16 TFLOP/s).
        fit: a :class:`kvplan.fit.FitResult` (used as a black box: its layout, kv_dtype, weights_bytes,
            weights_dtype).
        concurrency: requests decoding together in one attention group (N >= 1).
        context: tokens cached per request (T >= 0).
        prompt_len: tokens of the prompt for the TTFT figure (default: ``context``, at least 1).
        requests: (count, context) pairs instead of N requests at T (a workload mix); N and T are then
            only reported.

    Raises:
        UsageError: counts out of range, MBU/MFU outside [0.01, 1], a GPU without a bandwidth.
    """
    _check_count("--concurrency", concurrency, 1, MAX_BATCH)
    _check_count("--context", context, 0, MAX_TOKENS)
    prompt = max(1, context) if prompt_len is None else _check_count("--prompt-len", prompt_len, 1, MAX_TOKENS)
    hw = hardware(gpu, fit.weights_dtype, mbu, mfu, eff)
    reqs = list(requests) if requests is not None else [(concurrency, context)]
    dec = step_bound(spec, fit, hw, reqs)
    pre = step_bound(spec, fit, hw, [(1, prompt)], prefill=True)
    w = dec.worst
    moe = spec.moe
    tokens = sum(c for c, _ in reqs)
    figure = hw.eff.name
    gpus = fit.gpus_per_replica
    group_tokens = tokens * fit.data_parallel_size  # every attention group alike
    return PerfResult(
        model=spec.name,
        gpu=gpu.id,
        figure=figure,
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
        experts_touched=None if moe is None else experts_touched(moe.num_experts, moe.experts_per_token, group_tokens),
        kv_read_bytes=w.kv_read_bytes,
        state_rw_bytes=w.state_bytes,
        decode_step_bytes=w.bytes,
        decode_step_flops=w.flops,
        allreduce_bytes=w.allreduce_bytes + w.alltoall_bytes,
        memory_ms=w.memory_s * 1e3,
        compute_ms=w.compute_s * 1e3,
        allreduce_ms=w.allreduce_s * 1e3,
        fixed_ms=w.fixed_s * 1e3,
        tpot_ms=dec.seconds * 1e3,
        decode_tokens_per_s=group_tokens / dec.slowest_s,
        decode_tokens_per_s_per_gpu=group_tokens / dec.slowest_s / gpus,
        bound_by=w.bound_by,
        prefill_flops=pre.worst.flops,
        prefill_bytes=pre.worst.bytes,
        ttft_ms=pre.seconds * 1e3,
        ttft_bound_by=pre.worst.bound_by,
        efficiency=hw.eff,
        notes=_notes(spec, gpu, fit, hw),
    )


def estimate(spec: ModelSpec, gpu, fit, concurrency: int, context: int, prompt_len: int | None = None,
             mbu: float | None = None, mfu: float | None = None, requests=None) -> PerfResult:  # fmt: skip
    """:func:`bound` with the calibrated efficiencies of ``fit``'s engine on ``gpu``
    (:func:`estimate_efficiency`): the figure to size with.

    Raises:
        UsageError: as :func:`bound`.
    """
    eff = estimate_efficiency(fit.engine, gpu, mbu, mfu)
    return bound(spec, gpu, fit, concurrency, context, prompt_len, requests=requests, eff=eff)


def tpot_seconds(spec: ModelSpec, gpu, fit, requests: Sequence[tuple[int, int]], mbu=None, mfu=None, eff=None) -> float:
    """TPOT (s) of a decode step over ``requests`` ((count, context) pairs); see :func:`bound`."""
    return step_bound(spec, fit, hardware(gpu, fit.weights_dtype, mbu, mfu, eff), requests).seconds


def max_concurrency_for_tpot(
    spec: ModelSpec, gpu, fit, tpot_s: float, shares: Sequence[tuple[float, int]], limit: int, mbu=None, mfu=None,
    eff=None,
) -> int:  # fmt: skip
    """The most requests (up to ``limit``) whose decode step meets ``tpot_s``; 0 when not even one does.

    ``shares`` are (fraction of requests, context) per class; N requests are split by largest remainder.
    TPOT never falls as N grows (more bytes and FLOPs), so a binary search finds the largest N.
    """
    hw = hardware(gpu, fit.weights_dtype, mbu, mfu, eff)

    def ok(n: int) -> bool:
        return step_bound(spec, fit, hw, split(n, shares)).seconds <= tpot_s

    if limit < 1 or not ok(1):
        return 0
    return largest_true(ok, 1, limit)


def split(n: int, shares: Sequence[tuple[float, int]]) -> list[tuple[int, int]]:
    """``n`` requests split over (fraction, context) classes by largest remainder (at least one request)."""
    raw = [(f * n, t) for f, t in shares]
    counts = [int(x) for x, _ in raw]
    rest = n - sum(counts)
    order = sorted(range(len(raw)), key=lambda i: -(raw[i][0] - counts[i]))
    for i in order[:rest]:
        counts[i] += 1
    return [(c, t) for c, (_, t) in zip(counts, raw, strict=True) if c]


@dataclass(frozen=True, eq=False)
class Speed:
    """``kvplan fit``'s two speed figures at one operating point: the physical ``limit`` and the ``estimate``
    to size with (:class:`PerfResult` each)."""

    limit: PerfResult
    estimate: PerfResult


def fit_speed(
    spec: ModelSpec,
    gpu,
    fit,
    opts,
    concurrency: int | None = None,
    context: int | None = None,
    prompt_len: int | None = None,
    mbu: float | None = None,
    mfu: float | None = None,
) -> tuple[Speed | None, list[str]]:
    """``kvplan fit``'s speed figures: N = the requests that fit (one attention group's) and T = max_model_len
    unless given; --mbu / --mfu adjust the estimate (never the limit).

    Returns:
        (the figures, or None when none can be computed and no speed flag was given; warnings, one line each:
        N beyond what fits at T or beyond max_num_seqs).

    Raises:
        UsageError: a speed flag is given but no figure can be computed (a GPU given by size), or
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
        speed = Speed(bound(spec, gpu, fit, n, t, prompt_len), estimate(spec, gpu, fit, n, t, prompt_len, mbu, mfu))
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
                "KV budget (figures computed anyway)"
            )
        seqs = getattr(fit, "max_num_seqs", None)
        if seqs is not None and concurrency > seqs:
            warnings.append(
                f"--concurrency {concurrency:,}: beyond the engine's max_num_seqs {seqs:,} (figures computed anyway)"
            )
    return speed, warnings


def fit_bound(spec: ModelSpec, gpu, fit, opts, concurrency=None, context=None, prompt_len=None, mbu=None, mfu=None):
    """The limit of :func:`fit_speed` (older callers): (a :class:`PerfResult` or None, warnings)."""
    speed, warnings = fit_speed(spec, gpu, fit, opts, concurrency, context, prompt_len, mbu, mfu)
    return (None if speed is None else speed.limit), warnings
