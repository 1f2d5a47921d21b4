"""kvplan's speed figures beside published measurements: what tests/test_speed_validation.py checks and
scripts/calibrate_speed.py calibrates the estimate on.

Each measurement (tests/fixtures/throughput_measurements.yaml; :class:`Measurement`) names a model, GPU,
layout, batch and request shape, and one measured figure: output tokens/s of the replica, TPOT or TTFT. For
each, :func:`derive` computes kvplan's two figures for the same operating point:

- the **limit** (:data:`kvplan.perf.LIMIT`, MBU = MFU = 1, no fixed costs) of the decode step alone (TTFT:
  the prefill alone): no measurement may beat it, whatever else the run also did;
- the **estimate** (:func:`kvplan.perf.estimate_efficiency`): the decode step at the calibrated
  efficiencies, plus, for figures that include prefill (``scope`` ``run`` or ``loaded``), the prompts'
  prefill FLOPs spread over the output steps (:func:`kvplan.perf.prefill_interference_s`): tokens/s =
  N / (step + N × interference), TPOT = step + N × interference.

N is the batch, or for a run at maximum load the memory wall: the most requests of prompt + output tokens
the engine's KV pool holds (kvplan's rules for the engine), capped at the run's max_num_seqs.

:func:`cost_terms` gives the same figures from a measurement's bytes, FLOPs and fixed-cost counts, so the
calibration can try many efficiencies without re-planning; tests check that both agree with
:mod:`kvplan.perf`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from statistics import median
from typing import Any

METRICS = ("tps", "tpot_ms", "ttft_ms")
SCOPES = ("decode", "run", "loaded")
KVPLAN_ENGINES = ("vllm", "sglang", "trtllm", "llamacpp")


@dataclass(frozen=True)
class Measurement:
    """One published measurement (see tests/fixtures/throughput_measurements.yaml for the fields)."""

    id: str
    source: str
    engine: str
    version: str
    model: str
    gpu: str
    metric: str
    scope: str
    measured: float
    prompt: int
    output: int
    batch: int | None = None
    tp: int = 1
    dp: int = 1
    ep: int = 1
    weights: str | None = None
    weights_gib: float | None = None
    kv: str = "auto"
    gpu_memory_utilization: float | None = None
    max_num_seqs: int | None = None
    model_note: str = ""
    note: str = ""

    @property
    def context(self) -> int:
        """Tokens cached while decoding, on average over the generation: prompt + output // 2."""
        return self.prompt + self.output // 2


def load_measurements(path: str | Path) -> list[Measurement]:
    """The measurements of a fixture file.

    Raises:
        ValueError: an unknown key, metric or scope, or two measurements with one id.
    """
    import yaml

    rows = yaml.safe_load(Path(path).read_text())
    allowed = set(Measurement.__dataclass_fields__)
    out, seen = [], set()
    for i, r in enumerate(rows):
        extra = set(r) - allowed
        if extra:
            raise ValueError(f"{path}: measurement {i}: unknown keys {sorted(extra)}")
        m = Measurement(**{k: str(v) if k in ("version", "note", "model_note") else v for k, v in r.items()})
        if m.metric not in METRICS or m.scope not in SCOPES:
            raise ValueError(f"{path}: {m.id}: metric {m.metric!r} / scope {m.scope!r}")
        if m.id in seen:
            raise ValueError(f"{path}: {m.id}: two measurements with one id")
        seen.add(m.id)
        out.append(m)
    return out


def options(m: Measurement):
    """The :class:`kvplan.options.FitOptions` of a measurement: its engine where kvplan models it (vLLM
    otherwise), layout, dtypes, max_model_len = prompt + output."""
    from kvplan.options import FitOptions, get_engine

    engine = m.engine if m.engine in KVPLAN_ENGINES else "vllm"
    weights_bytes = None if m.weights_gib is None else round(m.weights_gib * (1 << 30))
    return FitOptions(
        engine=get_engine(engine),
        tensor_parallel_size=m.tp,
        data_parallel_size=m.dp,
        enable_expert_parallel=m.ep > 1,
        max_model_len=max(16, m.prompt + m.output),
        kv_dtype=m.kv,
        weights_dtype=None if weights_bytes is not None else m.weights,
        weights_bytes=weights_bytes,
        gpu_memory_utilization=m.gpu_memory_utilization,
    )


@dataclass(frozen=True, eq=False)
class Setup:
    """A measurement's plan: the spec, GPU, fit and the requests N decoding together."""

    m: Measurement
    spec: Any
    gpu: Any
    fit: Any
    n: int


def setup(m: Measurement) -> Setup:
    """Plan a measurement's replica (:func:`kvplan.fit.plan_fit`) and its N (the batch, or the memory wall
    capped at max_num_seqs)."""
    from kvplan.fit import plan_fit
    from kvplan.gpus import get_gpu
    from kvplan.loader import load_bundled

    spec, gpu = load_bundled(m.model), get_gpu(m.gpu)
    fit = plan_fit(spec, gpu, options(m))
    n = m.batch
    if n is None:
        n = fit.max_requests_by_memory
        if m.max_num_seqs is not None:
            n = min(n, m.max_num_seqs)
    return Setup(m, spec, gpu, fit, max(1, n))


@dataclass(frozen=True)
class Derived:
    """kvplan's figures for one measurement, in its metric's units.

    Attributes:
        n: requests decoding together.
        limit, estimate: the figures (tokens/s, or ms).
        of_limit: how close the measurement comes to the limit: measured / limit for tokens/s, limit /
            measured for times (at most 1 unless a measurement beats physics).
        error: estimate / measured − 1 for tokens/s; the same for times.
    """

    m: Measurement
    n: int
    limit: float
    estimate: float
    of_limit: float
    error: float


def _figure(m: Measurement, step_s: float, slowest_s: float, interference_s: float, n: int) -> float:
    """A figure in ``m``'s metric from a step (all stages), its slowest stage, and the per-request prefill
    interference (0 for the limit or a decode-scope figure)."""
    if m.metric == "tps":
        return n / (slowest_s + n * interference_s)
    return (step_s + n * interference_s) * 1e3


def derive(m: Measurement, eff=None, s: Setup | None = None) -> Derived:
    """kvplan's limit and estimate for ``m`` (``eff``: the estimate's efficiencies; default: the calibrated
    ones of :func:`kvplan.perf.estimate_efficiency` for the measurement's engine, gpt-fast included)."""
    from kvplan import perf

    s = s or setup(m)
    spec, gpu, fit, n = s.spec, s.gpu, s.fit, s.n
    lim_hw = perf.hardware(gpu, fit.weights_dtype)
    est_hw = perf.hardware(gpu, fit.weights_dtype, eff=eff or perf.estimate_efficiency(m.engine, gpu))
    if m.metric == "ttft_ms":
        lim = perf.step_bound(spec, fit, lim_hw, [(1, m.prompt)], prefill=True).seconds * 1e3
        est = perf.step_bound(spec, fit, est_hw, [(1, m.prompt)], prefill=True).seconds * 1e3
    else:
        reqs = [(n, m.context)]
        ld = perf.step_bound(spec, fit, lim_hw, reqs)
        ed = perf.step_bound(spec, fit, est_hw, reqs)
        inter = 0.0 if m.scope == "decode" else perf.prefill_interference_s(spec, fit, est_hw, m.prompt, m.output)
        lim = _figure(m, ld.seconds, ld.slowest_s, 0.0, n)
        est = _figure(m, ed.seconds, ed.slowest_s, inter, n)
    return _derived(m, n, lim, est)


def _derived(m: Measurement, n: int, lim: float, est: float) -> Derived:
    if m.metric == "tps":
        return Derived(m, n, lim, est, m.measured / lim, est / m.measured - 1)
    return Derived(m, n, lim, est, lim / m.measured, est / m.measured - 1)


@dataclass(frozen=True)
class CostTerms:
    """What a measurement's figures are made of, independent of the efficiencies: per PP stage its bytes,
    FLOPs, link bytes and the counts its fixed costs multiply (decoder layers, MoE layers, all-reduces), for
    the decode step (or the prefill for TTFT) and the prompt's prefill FLOPs (interference).

    Attributes:
        stages: ``(bytes, flops, link bytes, layers, moe layers, all-reduces)`` per stage.
        prefill_flops: per stage, the FLOPs of one prompt's prefill (for the interference term).
        bandwidth, peak, link: the GPU's peaks (B/s, FLOP/s or None, B/s or None).
    """

    m: Measurement
    n: int
    stages: tuple
    prefill_flops: tuple
    bandwidth: float
    peak: float | None
    link: float | None
    gpu_class: str
    engine: str


def cost_terms(m: Measurement, s: Setup | None = None) -> CostTerms:
    """The :class:`CostTerms` of ``m`` (from :func:`kvplan.perf.step_bound` at the limit)."""
    from kvplan import perf

    s = s or setup(m)
    spec, gpu, fit, n = s.spec, s.gpu, s.fit, s.n
    hw = perf.hardware(gpu, fit.weights_dtype)
    par = fit.parallel
    if m.metric == "ttft_ms":
        step = perf.step_bound(spec, fit, hw, [(1, m.prompt)], prefill=True)
    else:
        step = perf.step_bound(spec, fit, hw, [(n, m.context)])
    pre = perf.step_bound(spec, fit, hw, [(1, m.prompt)], prefill=True)
    moe = spec.moe
    stages = []
    for st in step.stages:
        moe_layers = 0.0 if moe is None else moe.num_moe_layers * st.layers / spec.num_layers
        reduces = 2 * st.layers if par.attn_tp > 1 else 0
        stages.append((st.bytes, st.flops, st.allreduce_bytes + st.alltoall_bytes, st.layers, moe_layers, reduces))
    return CostTerms(m, n, tuple(stages), tuple(st.flops for st in pre.stages), hw.bandwidth, hw.peak_flops,
                     hw.link, perf.gpu_class(gpu), m.engine)  # fmt: skip


def figures_from_terms(t: CostTerms, eff) -> tuple[float, float]:
    """(limit, estimate) of ``t`` at efficiencies ``eff``: :func:`derive`'s figures, by the same formulas as
    :func:`kvplan.perf.stage_cost` (checked equal in tests)."""
    m = t.m

    def step(e, limit: bool) -> tuple[float, float]:
        total, slowest = 0.0, 0.0
        for b, f, link_b, layers, moe_layers, reduces in t.stages:
            mem = b / (t.bandwidth * e.mbu)
            comp = 0.0 if t.peak is None else f / (t.peak * e.mfu)
            lk = 0.0 if t.link is None or not link_b else link_b / (t.link * e.link)
            fixed = 0.0 if limit else (layers * e.layer_us + moe_layers * e.moe_layer_us + e.step_us
                                       + reduces * e.collective_us) * 1e-6  # fmt: skip
            sec = max(mem, comp) + lk + fixed
            total += sec
            slowest = max(slowest, sec)
        return total, slowest

    from kvplan.perf import LIMIT

    lt, ls = step(LIMIT, True)
    et, es = step(eff, False)
    if m.metric == "ttft_ms":
        return lt * 1e3, et * 1e3
    inter = 0.0
    if m.scope != "decode" and t.peak is not None:
        inter = sum(f / (t.peak * eff.mfu) for f in t.prefill_flops) / max(1, m.output)
    return _figure(m, lt, ls, 0.0, t.n), _figure(m, et, es, inter, t.n)


def median_abs_error(rows: list[Derived]) -> float:
    """The median of |estimate / measured − 1| over ``rows``."""
    return median(abs(r.error) for r in rows)


@dataclass
class Table:
    """docs/throughput-validation.md's table: one Markdown row per measurement, and the summary figures."""

    rows: list[Derived] = field(default_factory=list)

    def markdown(self) -> list[str]:
        """The table rows (``| # | ...``)."""
        out = []
        for i, d in enumerate(self.rows, 1):
            m = d.m
            layout = f"× {m.tp}" + (f", DP {m.dp}" if m.dp > 1 else "") + (f", EP {m.ep}" if m.ep > 1 else "")
            weights = m.weights if m.weights_gib is None else f"{m.weights_gib:g} GiB file"
            batch = f"{d.n:,}" if m.batch is not None else f"{d.n:,} (wall)"
            what = {"tps": "tokens/s", "tpot_ms": "TPOT ms", "ttft_ms": "TTFT ms"}[m.metric]
            out.append(
                f"| {i} | [{m.engine} {m.version}]({m.source}) | {m.model} | {m.gpu} {layout} | {weights} / {m.kv} | "
                f"{batch} | {m.prompt:,}/{m.output:,} | {what} ({m.scope}) | {_num(m.measured)} | {_num(d.limit)} | "
                f"{_num(d.estimate)} | {d.of_limit:.3f} | {d.error:+.0%} |"
            )
        return out


def _num(x: float) -> str:
    return f"{x:,.2f}" if x < 100 else f"{x:,.1f}" if x < 1000 else f"{x:,.0f}"


def validation_table(path: str | Path) -> Table:
    """Every measurement of ``path`` derived (:func:`derive` with the calibrated estimate)."""
    return Table([derive(m) for m in load_measurements(path)])
