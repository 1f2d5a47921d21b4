"""Fleet planning: replicas and GPUs needed to hold a workload's KV cache, per GPU type and TP.

A workload is a set of request classes, each with a concurrency (requests in flight across the whole
fleet) and tokens per request (prompt + output). A replica is TP × PP GPUs serving whole requests
(a request is never split across replicas). For each candidate (GPU, TP) kvplan takes the per-GPU KV
budget of :func:`kvplan.fit.plan_fit` with ``max_model_len`` = the longest class, the bytes each class's
request holds under the engine's block rules, and packs the requests into replicas first-fit-decreasing
(largest requests first, then smaller ones into the space left), counting a class's shared prefix once
per replica that holds that class. GPUs = replicas × TP × PP.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, replace
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from kvplan import engines
from kvplan.calc import check_tp, valid_tp_sizes
from kvplan.errors import UsageError
from kvplan.fit import FitOptions, FitResult, fit_plan
from kvplan.gpus import GPU
from kvplan.specs import ModelSpec
from kvplan.units import fmt_gib, fmt_tokens, parse_tokens


@dataclass(frozen=True)
class RequestClass:
    """One kind of request in a workload.

    Attributes:
        name: label.
        concurrency: requests of this class in flight across the fleet.
        tokens: tokens per request (prompt + output).
        shared_prefix: prompt tokens every request of the class shares (cached once per replica).
        prompt_tokens, output_tokens: the split of ``tokens`` (optional; they sum to it): the speed bounds
            decode at ``prompt + output // 2`` tokens cached (the mean over a generation) and bound TTFT for
            the prompt.
    """

    name: str
    concurrency: int
    tokens: int
    shared_prefix: int = 0
    prompt_tokens: int | None = None
    output_tokens: int | None = None


@dataclass(frozen=True)
class Workload:
    """Request classes served together."""

    name: str
    classes: tuple[RequestClass, ...]

    @property
    def max_tokens(self) -> int:
        """The longest request of any class: the replicas' max_model_len."""
        return max(c.tokens for c in self.classes)


_WORKLOAD_KEYS = {"name", "classes", "notes"}
MAX_CLASSES = 1000
MAX_CONCURRENCY = 10**12
_CLASS_KEYS = {"name", "concurrency", "tokens", "shared_prefix", "prompt_tokens", "output_tokens"}


def _unknown(where: str, data: dict, allowed: set[str], prefix: str) -> None:
    extra = sorted(set(data) - allowed)
    if extra:
        close = difflib.get_close_matches(str(extra[0]), sorted(allowed), n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise UsageError(f"{where}: unknown key {prefix}{extra[0]!r}{hint}; allowed: {', '.join(sorted(allowed))}")


def workload_from_data(data: Any, where: str) -> Workload:
    """Validate a parsed workload mapping.

    Raises:
        UsageError: not a mapping, no classes, unknown keys, counts < 1, token counts that do not parse,
            a shared prefix longer than the request, two classes with one name (the message names the file
            and field).
    """
    if not isinstance(data, dict):
        raise UsageError(f"{where}: a workload must be a YAML mapping with name and classes")
    _unknown(where, data, _WORKLOAD_KEYS, "")
    classes = data.get("classes")
    if not isinstance(classes, list) or not classes:
        raise UsageError(f"{where}: classes must be a non-empty list of request classes")
    if len(classes) > MAX_CLASSES:
        raise UsageError(f"{where}: {len(classes):,} request classes; at most {MAX_CLASSES:,} (merge similar ones)")
    out = []
    names: dict[str, int] = {}
    for i, c in enumerate(classes):
        key = f"classes[{i}]"
        if not isinstance(c, dict):
            raise UsageError(f"{where}: {key} must be a mapping with name, concurrency and tokens")
        _unknown(where, c, _CLASS_KEYS, f"{key}.")
        for field in ("concurrency", "tokens"):
            if c.get(field) is None:
                raise UsageError(f"{where}: {key} is missing {field}")
        conc = c["concurrency"]
        if isinstance(conc, bool) or not isinstance(conc, int) or conc < 1:
            raise UsageError(f"{where}: {key}.concurrency={conc!r} must be an integer >= 1")
        if conc > MAX_CONCURRENCY:
            raise UsageError(
                f"{where}: {key}.concurrency={conc:,} is beyond what kvplan plans for ({MAX_CONCURRENCY:,})"
            )
        tokens = parse_tokens(c["tokens"], f"{where}: {key}.tokens")
        prefix = 0
        if c.get("shared_prefix") is not None:  # present: validated even when falsy (false, '', [])
            prefix = parse_tokens(c["shared_prefix"], f"{where}: {key}.shared_prefix", allow_zero=True)
        if prefix >= tokens:
            raise UsageError(
                f"{where}: {key}.shared_prefix={prefix} must be shorter than tokens={tokens} "
                "(each request has tokens of its own)"
            )
        present = [k for k in ("prompt_tokens", "output_tokens") if c.get(k) is not None]  # falsy too: 0, false
        split = {k: parse_tokens(c[k], f"{where}: {key}.{k}") for k in present}
        prompt = split.get("prompt_tokens", tokens - split["output_tokens"] if "output_tokens" in split else None)
        output = None if prompt is None else tokens - prompt
        if prompt is not None and (prompt < 1 or output < 1 or split.get("output_tokens", output) != output):
            raise UsageError(
                f"{where}: {key}: prompt_tokens + output_tokens must equal tokens={tokens} (each at least 1)"
            )
        name = str(c.get("name") or f"class{i}")
        if name in names:
            raise UsageError(
                f"{where}: {key}.name={name!r} is the name of classes[{names[name]}] too; class names must be unique"
            )
        names[name] = i
        out.append(RequestClass(name, conc, tokens, prefix, prompt, output))
    return Workload(str(data.get("name") or Path(where).stem), tuple(out))


def load_workload(path: str | Path) -> Workload:
    """Load a workload YAML file.

    Raises:
        UsageError: missing file, malformed YAML, invalid fields.
    """
    from kvplan.textio import read_text as _read_text
    from kvplan.textio import yaml_load as _yaml_load

    p = Path(path)
    return workload_from_data(_yaml_load(_read_text(p), str(p)), str(p))


@dataclass(frozen=True)
class FleetRow:
    """One candidate layout: a GPU type at a TP, and the replicas it needs.

    Attributes:
        gpu, gpu_name: catalog id and name.
        tensor_parallel_size, pipeline_parallel_size: GPUs per replica = TP × PP.
        fits: whether every class fits a replica.
        reason: why not, when it does not (None when it fits).
        replicas: replicas needed (0 when it does not fit).
        gpus: replicas × TP × PP.
        kv_budget_bytes: KV budget per GPU.
        kv_bytes_needed: KV bytes per GPU summed over all requests (prefixes once per replica).
        kv_utilization: the fullest pool's share used: units needed / (replicas × the pool's capacity), over
            the engine's pools (:attr:`kvplan.fit.FitResult.pools`; one pool of bytes or blocks for most).
        requests_per_replica: the most requests any replica holds (the maximum over replicas).
        price_usd_per_hour: per GPU, or None; cost_usd_per_hour = gpus × price, computed in exact decimal
            arithmetic from the price as given (``2.49`` × 112 = 278.88, not 278.88000000000005).
        limit: what sets the replicas: ``memory``, ``SLO`` (--tpot-ms) or the engine's cap on running requests
            (``max_num_seqs``; SGLang ``max_running_requests``, whose Mamba-slot bound packs as a pool too).
        max_requests_per_replica: the cap of the SLO or max_num_seqs (the smaller), or None.
        tpot_ms_bound, ttft_ms_bound: the speed bounds (:mod:`kvplan.perf`, MBU/MFU as given) at
            requests_per_replica; None when the GPU has no known bandwidth.
        output_tokens_per_s_per_gpu: the decode bound's tokens/s over all GPUs of the fleet.
        usd_per_million_output_tokens: cost_usd_per_hour / tokens per hour × 10⁶, with a price.
        requests_per_replica_mean: requests of the workload / replicas (None when it does not fit).
        kv_budget_low_bytes, kv_budget_high_bytes: the range of the KV budget per GPU (its modelled terms at the
            extremes measured on engine logs, :attr:`kvplan.fit.FitResult.kv_budget_low_bytes`).
        replicas_low, replicas_high: the replicas at the high and at the low end of that budget (equal to
            ``replicas`` for an exact budget); None where a request does not fit at that end.
    """

    gpu: str
    gpu_name: str
    tensor_parallel_size: int
    pipeline_parallel_size: int
    fits: bool
    reason: str | None
    replicas: int
    gpus: int
    kv_budget_bytes: int
    kv_bytes_needed: int
    kv_utilization: float
    requests_per_replica: int
    price_usd_per_hour: float | None
    cost_usd_per_hour: float | None
    best_for_gpu: bool = False
    limit: str = "memory"
    max_requests_per_replica: int | None = None
    tpot_ms_bound: float | None = None
    ttft_ms_bound: float | None = None
    output_tokens_per_s_per_gpu: float | None = None
    usd_per_million_output_tokens: float | None = None
    requests_per_replica_mean: float | None = None
    kv_budget_low_bytes: int = 0
    kv_budget_high_bytes: int = 0
    replicas_low: int | None = None
    replicas_high: int | None = None

    @property
    def gpus_per_replica(self) -> int:
        """TP × PP."""
        return self.tensor_parallel_size * self.pipeline_parallel_size


@dataclass(frozen=True)
class SLO:
    """Latency targets and the speed model's settings for a fleet.

    Attributes:
        tpot_ms: time per output token each request must see at most (ms), or None.
        ttft_ms: time to first token at most (ms), or None.
        prompt_len: prompt tokens of a class without a prompt/output split (its TTFT prompt, and its decode
            context ``P + (tokens − P) // 2``); None: such a class decodes and prefills at all its tokens.
        mbu, mfu: fractions of peak bandwidth and FLOP/s (None: kvplan.perf's defaults).
        max_num_seqs: hold replicas to the engine's ``max_num_seqs`` (default on).
    """

    tpot_ms: float | None = None
    ttft_ms: float | None = None
    prompt_len: int | None = None
    mbu: float | None = None
    mfu: float | None = None
    max_num_seqs: bool = True

    def prompt(self, c: RequestClass) -> int:
        """Prompt tokens of class ``c`` (TTFT): its split, else --prompt-len (below its tokens), else its tokens."""
        if c.prompt_tokens is not None:
            return c.prompt_tokens
        return c.tokens if self.prompt_len is None else min(self.prompt_len, c.tokens)

    def context(self, c: RequestClass) -> int:
        """Tokens cached while class ``c`` decodes, on average over a generation: ``prompt + output // 2``."""
        p = self.prompt(c)
        return p + (c.tokens - p) // 2


def pack_replicas(budget, classes: list[tuple]) -> tuple[int, int, int]:
    """First-fit-decreasing packing of whole requests into replicas of ``budget`` (per GPU).

    Args:
        budget: what one replica holds per GPU: bytes, or a tuple of pool capacities (the engine's pools,
            :attr:`kvplan.fit.FitResult.pools`).
        classes: ``(count, size of one request, prefix paid once per replica holding the class)``, sizes in
            the budget's units (ints, or tuples with one entry per pool).

    Returns:
        (replicas, units used including prefixes (summed over pools), the most requests in one replica).

    Groups of identical replicas are tracked as counts, so the cost is per class, not per request.
    A request larger than ``budget`` must be excluded by the caller.
    """
    replicas, used, most, _ = pack_limited(budget, classes)
    return replicas, sum(used), most


TIME_SCALE = 10**12  # a replica's decode-time capacity (--tpot-ms) in integer units


def _vec(x, n: int) -> tuple:
    return tuple(x) if isinstance(x, (tuple, list)) else (x,) * n if n > 1 else (x,)


def pack_limited(
    budget,
    classes: list[tuple],
    max_requests: int | None = None,
    time_costs: list[int] | None = None,
) -> tuple[int, tuple, int, list[tuple[int, dict[int, int]]]]:
    """:func:`pack_replicas` with two more limits per replica: at most ``max_requests`` requests (the
    engine's max_num_seqs), and requests whose ``time_costs`` (per class, in :data:`TIME_SCALE` units of the
    TPOT target) sum to at most :data:`TIME_SCALE`. Every pool of ``budget`` must hold its share.

    Returns:
        (replicas, units used per pool, the most requests in one replica, [(replicas alike, {class index:
        requests each})]).
    """
    caps = _vec(budget, 1)
    n = len(caps)
    cls = [(count, _vec(size, n), _vec(prefix, n)) for count, size, prefix in classes]
    cap = max_requests or 1 << 62
    costs = time_costs or [0] * len(cls)
    # a group: [replicas alike, leftover per pool, classes held, requests each, leftover time, {class: requests}]
    groups: list[list] = []
    used = [0] * n

    def fits(left: tuple, pay: tuple, size: tuple, reqs: int, time_left: int, cost: int) -> int:
        if any(lft < p + z for lft, p, z in zip(left, pay, size, strict=True)):
            return 0
        per = cap - reqs
        for lft, p, z in zip(left, pay, size, strict=True):
            if z > 0:  # a pool a request draws nothing from does not limit (0-byte requests: count-bound)
                per = min(per, (lft - p) // z)
        return min(per, time_left // cost) if cost else per

    def take(left: tuple, pay: tuple, size: tuple, k: int) -> tuple:
        return tuple(lft - p - k * z for lft, p, z in zip(left, pay, size, strict=True))

    def spend(times: int, pay: tuple, size: tuple, k: int) -> None:
        for i in range(n):
            used[i] += times * (pay[i] + k * size[i])

    zero = (0,) * n
    for cid, (count, size, prefix) in sorted(enumerate(cls), key=lambda x: -(sum(x[1][1]) + sum(x[1][2]))):
        remaining = count
        cost = costs[cid]
        new_groups = []
        for g in groups:
            reps, left, held, reqs, tleft, comp = g
            if not remaining:
                new_groups.append(g)
                continue
            pay = zero if cid in held else prefix
            per = fits(left, pay, size, reqs, tleft, cost)
            if per <= 0:
                new_groups.append(g)
                continue
            full = min(reps, remaining // per)
            if full:
                new_groups.append([full, take(left, pay, size, per), held | {cid}, reqs + per, tleft - per * cost,
                                   {**comp, cid: per}])  # fmt: skip
                remaining -= full * per
                spend(full, pay, size, per)
            rest = reps - full
            if rest and remaining:
                k = remaining  # < per
                new_groups.append(
                    [1, take(left, pay, size, k), held | {cid}, reqs + k, tleft - k * cost, {**comp, cid: k}]
                )
                spend(1, pay, size, k)
                remaining = 0
                rest -= 1
            if rest:
                new_groups.append([rest, left, held, reqs, tleft, comp])
        groups = new_groups
        if remaining:
            per = fits(caps, prefix, size, 0, TIME_SCALE, cost)
            full, part = divmod(remaining, per)
            if full:
                groups.append([full, take(caps, prefix, size, per), {cid}, per, TIME_SCALE - per * cost, {cid: per}])
                spend(full, prefix, size, per)
            if part:
                groups.append([1, take(caps, prefix, size, part), {cid}, part, TIME_SCALE - part * cost, {cid: part}])
                spend(1, prefix, size, part)
    replicas = sum(g[0] for g in groups)
    most = max((g[3] for g in groups), default=0)
    return replicas, tuple(used), most, [(g[0], g[5]) for g in groups]


def plan_layout(
    spec: ModelSpec,
    gpu: GPU,
    workload: Workload,
    opts: FitOptions,
    price: Decimal | float | None = None,
    slo: SLO | None = None,
) -> FleetRow:
    """Replicas of (``gpu`` × TP × PP) needed for ``workload`` (see the module docstring), held to ``slo``.

    Memory packs the requests first; then each replica keeps at most the requests whose decode step meets
    ``slo.tpot_ms`` (:func:`kvplan.perf.max_concurrency_for_tpot`, the classes mixed as in the workload)
    and at most the engine's ``max_num_seqs``; a layout whose TTFT bound for the longest prompt exceeds
    ``slo.ttft_ms`` cannot serve the workload. ``limit`` names what set the replicas.

    Raises:
        UsageError: as :func:`kvplan.fit.plan_fit`; MBU/MFU outside (0, 1].
    """
    opts = replace(opts, max_model_len=workload.max_tokens, shared_prefix_tokens=0)
    fit, cache = fit_plan(spec, gpu, opts)
    tp, pp = opts.tensor_parallel_size, opts.pipeline_parallel_size
    base = dict(
        gpu=gpu.id,
        gpu_name=gpu.name,
        tensor_parallel_size=tp,
        pipeline_parallel_size=pp,
        kv_budget_bytes=fit.kv_budget_bytes,
        kv_budget_low_bytes=fit.kv_budget_low_bytes,
        kv_budget_high_bytes=fit.kv_budget_high_bytes,
        price_usd_per_hour=None if price is None else float(price),
    )

    def no(reason: str) -> FleetRow:
        return FleetRow(
            fits=False,
            reason=reason,
            replicas=0,
            gpus=0,
            kv_bytes_needed=0,
            kv_utilization=0.0,
            requests_per_replica=0,
            cost_usd_per_hour=None,
            **base,
        )

    if fit.engine_refusal:
        return no(fit.engine_refusal)
    if fit.kv_budget_bytes <= 0:
        return no("weights and activations leave no KV memory")
    # fit's engine rules and pools (vLLM 0.33: KV cache groups, in-flight tokens, the null block; SGLang's
    # hybrid-SWA pools; TensorRT-LLM: windows as full, whole blocks; --pp-layer-partition's worst stage)
    pool_caps = tuple(cap for _, cap, _ in fit.pools)
    units = cache.unit_bytes
    room = fit.kv_room_bytes
    classes = []
    for c in workload.classes:
        demand, prefix = cache.demand(c.tokens), cache.prefix(c.shared_prefix)
        if any(d > cap for d, cap in zip(demand, pool_caps, strict=True)):
            need = sum(d * u for d, u in zip(demand, units, strict=True))
            return no(
                f"one request of class {c.name} ({fmt_tokens(c.tokens)}) needs {fmt_gib(need)} of KV per "
                f"GPU, more than the {fmt_gib(room)} the engine leaves for requests"
            )
        classes.append((c.concurrency, tuple(d - p for d, p in zip(demand, prefix, strict=True)), prefix))
    slo = slo or SLO()
    speed = _speed(spec, gpu, fit, workload, slo)
    if isinstance(speed, str):
        return no(speed)
    seqs = fit.max_num_seqs if slo.max_num_seqs else None
    costs = [-(-TIME_SCALE // n) for n in speed["slo_caps"]] if speed["slo_caps"] else None
    memory = pack_limited(pool_caps, classes)
    by_seqs = pack_limited(pool_caps, classes, seqs) if seqs else memory
    replicas, used_units, most, groups = pack_limited(pool_caps, classes, seqs, costs) if costs else by_seqs
    used = sum(n * u for n, u in zip(used_units, units, strict=True))
    # the budget is a range (its modelled terms): the replicas at its two ends, packed the same way
    ends = []
    for end in (fit.kv_budget_high_bytes, fit.kv_budget_low_bytes):
        end_caps = cache.pools(end)
        whole = [tuple(u + p for u, p in zip(size, prefix, strict=True)) for _, size, prefix in classes]
        end_seqs = seqs
        cap = cache.request_cap(end, opts.max_model_len) if slo.max_num_seqs else None
        if cap is not None:  # a cap that depends on the pools (SGLang's max_running_requests)
            end_seqs = cap
        if end <= 0 or (end_seqs is not None and end_seqs <= 0) or any(
            d > cap for w in whole for d, cap in zip(w, end_caps, strict=True)
        ):
            ends.append(None)  # a request does not fit at that end of the range
        else:
            ends.append(pack_limited(end_caps, classes, end_seqs, costs)[0])
    cap_name = engines.get(opts.engine).request_cap_name
    limit = "memory" if replicas == memory[0] else cap_name if replicas == by_seqs[0] else "SLO"
    caps = [c for c in (seqs, max(speed["slo_caps"], default=None)) if c]
    gpus = replicas * tp * pp
    cost = None if price is None else float(exact_usd(price) * gpus)  # exact: 2.49 × 112 = 278.88
    tpot = per_gpu = usd = None
    if speed["hw"] is not None:
        from kvplan import perf

        contexts = [slo.context(c) for c in workload.classes]
        worst, tokens_per_s = 0.0, 0.0
        for n, comp in groups:  # each kind of replica: its own requests, each one token per step
            step = perf.step_bound(spec, fit, speed["hw"], [(k, contexts[i]) for i, k in comp.items()]).seconds
            worst = max(worst, step)
            tokens_per_s += n * sum(comp.values()) / step
        tpot, per_gpu = worst, tokens_per_s / gpus
        usd = None if cost is None or not tokens_per_s > 0 else cost / (tokens_per_s * 3600) * 1e6
    return FleetRow(
        fits=True,
        reason=None,
        replicas=replicas,
        gpus=gpus,
        kv_bytes_needed=used,
        kv_utilization=max(n / (replicas * cap) for n, cap in zip(used_units, pool_caps, strict=True) if cap > 0),
        requests_per_replica=most,
        cost_usd_per_hour=cost,
        limit=limit,
        max_requests_per_replica=min(caps) if caps else None,
        tpot_ms_bound=None if tpot is None else tpot * 1e3,
        ttft_ms_bound=None if speed["ttft_s"] is None else speed["ttft_s"] * 1e3,
        output_tokens_per_s_per_gpu=per_gpu,
        usd_per_million_output_tokens=usd,
        requests_per_replica_mean=sum(c.concurrency for c in workload.classes) / replicas,
        replicas_low=ends[0],
        replicas_high=ends[1],
        **base,
    )


def _speed(spec: ModelSpec, gpu: GPU, fit: FitResult, workload: Workload, slo: SLO) -> dict | str:
    """The speed facts of a layout, or the reason (a string) it misses the SLO.

    ``slo_caps``: per class, the most requests of that class alone whose decode step meets --tpot-ms (a
    request of class c then uses 1/cap_c of a replica's time: TPOT is convex in the request counts for a
    dense model, so mixes within that budget meet the target; MoE's expert bytes are concave in the count,
    which can put a mix slightly over). ``hw`` is None when the GPU has no known bandwidth (a size): no
    bound, which only an SLO makes an error."""
    from kvplan import perf

    total = sum(c.concurrency for c in workload.classes)
    out: dict[str, Any] = {"slo_caps": [], "ttft_s": None, "hw": None}
    wants = slo.tpot_ms is not None or slo.ttft_ms is not None
    try:
        out["hw"] = perf.hardware(gpu, fit.weights_dtype, slo.mbu, slo.mfu)
    except UsageError as e:
        if wants:
            return f"no speed bound: {e}"
        return out
    prompt = max(slo.prompt(c) for c in workload.classes)
    out["ttft_s"] = perf.step_bound(spec, fit, out["hw"], [(1, prompt)], prefill=True).seconds
    if slo.ttft_ms is not None and out["ttft_s"] * 1e3 > slo.ttft_ms:
        ms = out["ttft_s"] * 1e3
        return f"TTFT bound {ms:,.1f} ms for a {prompt:,}-token prompt exceeds --ttft-ms {slo.ttft_ms:g}"
    if slo.tpot_ms is not None:
        for c in workload.classes:
            ctx = slo.context(c)
            target = slo.tpot_ms / 1e3
            cap = perf.max_concurrency_for_tpot(spec, gpu, fit, target, [(1.0, ctx)], total, slo.mbu, slo.mfu)
            if cap == 0:
                one = perf.tpot_seconds(spec, gpu, fit, [(1, ctx)], slo.mbu, slo.mfu) * 1e3
                return (
                    f"TPOT bound {one:,.2f} ms for one request of class {c.name} ({fmt_tokens(ctx)} cached) exceeds "
                    f"--tpot-ms {slo.tpot_ms:g}"
                )
            out["slo_caps"].append(cap)
    return out


def plan_fleet(
    spec: ModelSpec,
    workload: Workload,
    gpus: list[GPU],
    opts: FitOptions,
    tps: list[int] | None = None,
    prices: dict[str, Decimal | float] | None = None,
    sort: str = "gpus",
    max_default_tp: int = 8,
    slo: SLO | None = None,
) -> list[FleetRow]:
    """Every (GPU, TP) layout, sorted by GPUs (or cost), feasible first; the best per GPU is marked.

    Args:
        tps: TP degrees to try; default: every TP ≤ 8 the model's heads allow.
        prices: USD per GPU-hour by catalog id (overrides the catalog's default price).
        sort: ``gpus`` or ``cost``.
        slo: latency targets and speed settings (:class:`SLO`); None: memory and max_num_seqs only.

    Raises:
        UsageError: a TP the heads do not allow, ``sort`` unknown, as :func:`plan_layout`.
    """
    if sort not in ("gpus", "cost"):
        raise UsageError(f"--sort: {sort!r}; allowed: gpus, cost")
    allowed = valid_tp_sizes(spec)
    for tp in tps or []:
        check_tp(spec, tp)
    candidates = tps or [t for t in allowed if t <= max_default_tp]
    prices = prices or {}
    rows = []
    for g in gpus:
        price = prices.get(g.id, g.price_usd_per_hour)
        rows.extend(
            plan_layout(spec, g, workload, replace(opts, tensor_parallel_size=tp), price, slo) for tp in candidates
        )
    best: dict[str, FleetRow] = {}

    def key(r: FleetRow):
        cost = r.cost_usd_per_hour if r.cost_usd_per_hour is not None else float("inf")
        return (cost, r.gpus, r.tensor_parallel_size) if sort == "cost" else (r.gpus, cost, r.tensor_parallel_size)

    for r in rows:
        if r.fits and (r.gpu not in best or key(r) < key(best[r.gpu])):
            best[r.gpu] = r
    rows = [replace(r, best_for_gpu=True) if best.get(r.gpu) is r else r for r in rows]
    return sorted(rows, key=lambda r: (not r.fits, key(r) if r.fits else (0, 0, 0), r.gpu))


def exact_usd(price: Decimal | float | int | str) -> Decimal:
    """A price as an exact Decimal: a Decimal or string as given, a float by its shortest repr (2.49 → 2.49)."""
    return price if isinstance(price, Decimal) else Decimal(repr(price) if isinstance(price, float) else str(price))


def parse_prices(items: list[str], resolve, gpus: list[GPU] | None = None) -> dict[str, Decimal]:
    """``["h100=2.49", "mi300x=3.5"]`` → ``{gpu id: USD per GPU-hour}``, each price the exact Decimal of its
    string (costs are exact: 2.49 × 112 GPUs = 278.88). An item may be a comma list (``h100=2.49,h200=3.5``),
    as other repeatable flags take; the same price given twice for a GPU (by any of its names) is accepted.

    Args:
        items: ``GPU=USD_PER_HOUR`` strings.
        resolve: ``resolve(name, flag) -> GPU`` (:func:`kvplan.gpus.get_gpu`).
        gpus: the GPUs planned (``--gpu``); a price for another GPU is refused. None: any GPU.

    Raises:
        UsageError: not ``GPU=NUMBER``, a price below 0 (or not below 10^9), an unknown GPU, a GPU not in
            ``gpus``, or two different prices for one GPU (the message names both).
    """
    out: dict[str, Decimal] = {}
    given: dict[str, str] = {}
    planned = None if gpus is None else [g.id for g in gpus]
    for entry in items:
        parts = str(entry).split(",")
        if len(parts) > 1 and any(not p.strip() for p in parts):
            raise UsageError(f"--price: empty item in the list {entry!r}")
        for item in parts:
            item = item.strip()
            name, sep, value = item.partition("=")
            try:
                price = Decimal(value.strip())
            except InvalidOperation:
                price = None
            if not sep or not name.strip() or price is None or not price.is_finite():  # also refuses nan and inf
                raise UsageError(f"--price: {item!r} must be GPU=USD_PER_HOUR, e.g. h100=2.49")
            if not 0 <= price < 10**9:
                raise UsageError(f"--price: {item!r}: the price must be >= 0 USD per GPU-hour (and below 10^9)")
            gid = resolve(name.strip(), "--price").id
            if planned is not None and gid not in planned:
                raise UsageError(
                    f"--price: {name!r} ({gid}) is not among the GPUs planned (--gpu {', '.join(planned)}); "
                    f"add --gpu {name} or drop its price"
                )
            if gid in out and out[gid] != price:
                raise UsageError(f"--price: {given[gid]!r} and {item!r} give {gid} two prices; give one price per GPU")
            out[gid] = price
            given.setdefault(gid, item)
    return out


# kvplan.fleet(...) calls kvplan.api.fleet: the module is made callable (see kvplan/__init__.py)
__import__("kvplan")._make_callable(__name__)
