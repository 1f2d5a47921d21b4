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
from pathlib import Path
from typing import Any

from kvplan.calc import check_tp, resolve_kv_dtype, valid_tp_sizes
from kvplan.errors import UsageError
from kvplan.fit import CONVENTIONS, FitOptions, FitResult, plan_fit, request_bytes, stage_cache, stage_layers
from kvplan.gpus import GPU
from kvplan.specs import ModelSpec
from kvplan.units import fmt_gib, parse_tokens


@dataclass(frozen=True)
class RequestClass:
    """One kind of request in a workload.

    Attributes:
        name: label.
        concurrency: requests of this class in flight across the fleet.
        tokens: tokens per request (prompt + output).
        shared_prefix: prompt tokens every request of the class shares (cached once per replica).
    """

    name: str
    concurrency: int
    tokens: int
    shared_prefix: int = 0


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
_CLASS_KEYS = {"name", "concurrency", "tokens", "shared_prefix"}


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
            a shared prefix longer than the request (the message names the file and field).
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
        prefix = c.get("shared_prefix", 0) or 0
        if prefix:
            prefix = parse_tokens(prefix, f"{where}: {key}.shared_prefix")
        if prefix >= tokens:
            raise UsageError(
                f"{where}: {key}.shared_prefix={prefix} must be shorter than tokens={tokens} "
                "(each request has tokens of its own)"
            )
        out.append(RequestClass(str(c.get("name") or f"class{i}"), conc, tokens, prefix))
    return Workload(str(data.get("name") or Path(where).stem), tuple(out))


def load_workload(path: str | Path) -> Workload:
    """Load a workload YAML file.

    Raises:
        UsageError: missing file, malformed YAML, invalid fields.
    """
    from kvplan.specs import _read_text, _yaml_load

    p = Path(path)
    return workload_from_data(_yaml_load(_read_text(p), str(p)), str(p))


@dataclass(frozen=True)
class FleetRow:
    """One candidate layout: a GPU type at a TP, and the replicas it needs.

    Attributes:
        gpu, gpu_name: catalog id and name.
        tensor_parallel_size, pipeline_parallel_size: GPUs per replica = TP × PP.
        fits: whether every class fits a replica.
        reason: why not, when it does not.
        replicas: replicas needed (0 when it does not fit).
        gpus: replicas × TP × PP.
        kv_budget_bytes: KV budget per GPU.
        kv_bytes_needed: KV bytes per GPU summed over all requests (prefixes once per replica).
        kv_utilization: kv_bytes_needed / (replicas × kv_budget_bytes).
        requests_per_replica: the most requests any replica holds.
        price_usd_per_hour: per GPU, or None; cost_usd_per_hour = gpus × price.
    """

    gpu: str
    gpu_name: str
    tensor_parallel_size: int
    pipeline_parallel_size: int
    fits: bool
    reason: str
    replicas: int
    gpus: int
    kv_budget_bytes: int
    kv_bytes_needed: int
    kv_utilization: float
    requests_per_replica: int
    price_usd_per_hour: float | None
    cost_usd_per_hour: float | None
    best_for_gpu: bool = False

    @property
    def gpus_per_replica(self) -> int:
        """TP × PP."""
        return self.tensor_parallel_size * self.pipeline_parallel_size


def pack_replicas(budget: int, classes: list[tuple[int, int, int]]) -> tuple[int, int, int]:
    """First-fit-decreasing packing of whole requests into replicas of ``budget`` bytes (per GPU).

    Args:
        budget: KV bytes one replica holds (per GPU).
        classes: ``(count, bytes per request, prefix bytes paid once per replica holding the class)``.

    Returns:
        (replicas, bytes used including prefixes, the most requests in one replica).

    Groups of identical replicas are tracked as counts, so the cost is per class, not per request.
    A request larger than ``budget`` must be excluded by the caller.
    """
    groups: list[list] = []  # [number of replicas, leftover bytes, classes held, requests each]
    used = 0
    for cid, (count, size, prefix) in sorted(enumerate(classes), key=lambda x: -(x[1][1] + x[1][2])):
        remaining = count
        new_groups = []
        for g in groups:
            n, left, held, reqs = g
            if not remaining:
                new_groups.append(g)
                continue
            pay = 0 if cid in held else prefix
            per = (left - pay) // size if left >= pay + size else 0
            if not per:
                new_groups.append(g)
                continue
            full = min(n, remaining // per)
            if full:
                new_groups.append([full, left - pay - per * size, held | {cid}, reqs + per])
                remaining -= full * per
                used += full * (pay + per * size)
            rest = n - full
            if rest and remaining:
                k = remaining  # < per
                new_groups.append([1, left - pay - k * size, held | {cid}, reqs + k])
                used += pay + k * size
                remaining = 0
                rest -= 1
            if rest:
                new_groups.append([rest, left, held, reqs])
        groups = new_groups
        if remaining:
            per = (budget - prefix) // size
            full, part = divmod(remaining, per)
            if full:
                groups.append([full, budget - prefix - per * size, {cid}, per])
                used += full * (prefix + per * size)
            if part:
                groups.append([1, budget - prefix - part * size, {cid}, part])
                used += prefix + part * size
    replicas = sum(g[0] for g in groups)
    most = max((g[3] for g in groups), default=0)
    return replicas, used, most


def plan_layout(
    spec: ModelSpec, gpu: GPU, workload: Workload, opts: FitOptions, price: float | None = None
) -> FleetRow:
    """Replicas of (``gpu`` × TP × PP) needed for ``workload`` (see the module docstring).

    Raises:
        UsageError: as :func:`kvplan.fit.plan_fit`.
    """
    opts = replace(opts, max_model_len=workload.max_tokens, shared_prefix_tokens=0)
    fit: FitResult = plan_fit(spec, gpu, opts)
    tp, pp = opts.tensor_parallel_size, opts.pipeline_parallel_size
    base = dict(
        gpu=gpu.id,
        gpu_name=gpu.name,
        tensor_parallel_size=tp,
        pipeline_parallel_size=pp,
        kv_budget_bytes=fit.kv_budget_bytes,
        price_usd_per_hour=price,
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

    if fit.kv_budget_bytes <= 0:
        return no("weights and activations leave no KV memory")
    kv_dtype = resolve_kv_dtype(spec, opts.kv_dtype)
    conv = CONVENTIONS[opts.engine]
    # the same worst stage as plan_fit
    stages = stage_layers(spec.num_layers, pp)
    caches = [stage_cache(spec, kv_dtype, tp, r) for r in stages]
    classes = []
    for c in workload.classes:
        per_stage = []
        for cache in caches:
            size = request_bytes(
                cache, c.tokens, conv.engine, fit.block_size, fit.max_num_batched_tokens, opts.swa_full
            )
            shared = (c.shared_prefix // fit.block_size) * fit.block_size * cache.growing_bytes_per_token
            per_stage.append((size - shared, shared))
        unique, prefix = max(per_stage)
        if unique + prefix > fit.kv_budget_bytes:
            return no(
                f"one request of class {c.name} ({c.tokens:,} tokens) needs {fmt_gib(unique + prefix)} of KV per GPU, "
                f"more than the {fmt_gib(fit.kv_budget_bytes)} budget"
            )
        classes.append((c.concurrency, unique, prefix))
    replicas, used, most = pack_replicas(fit.kv_budget_bytes, classes)
    gpus = replicas * tp * pp
    return FleetRow(
        fits=True,
        reason="",
        replicas=replicas,
        gpus=gpus,
        kv_bytes_needed=used,
        kv_utilization=used / (replicas * fit.kv_budget_bytes),
        requests_per_replica=most,
        cost_usd_per_hour=None if price is None else gpus * price,
        **base,
    )


def plan_fleet(
    spec: ModelSpec,
    workload: Workload,
    gpus: list[GPU],
    opts: FitOptions,
    tps: list[int] | None = None,
    prices: dict[str, float] | None = None,
    sort: str = "gpus",
    max_default_tp: int = 8,
) -> list[FleetRow]:
    """Every (GPU, TP) layout, sorted by GPUs (or cost), feasible first; the best per GPU is marked.

    Args:
        tps: TP degrees to try; default: every TP ≤ 8 the model's heads allow.
        prices: USD per GPU-hour by catalog id (overrides the catalog's default price).
        sort: ``gpus`` or ``cost``.

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
        rows.extend(plan_layout(spec, g, workload, replace(opts, tensor_parallel_size=tp), price) for tp in candidates)
    best: dict[str, FleetRow] = {}

    def key(r: FleetRow):
        cost = r.cost_usd_per_hour if r.cost_usd_per_hour is not None else float("inf")
        return (cost, r.gpus, r.tensor_parallel_size) if sort == "cost" else (r.gpus, cost, r.tensor_parallel_size)

    for r in rows:
        if r.fits and (r.gpu not in best or key(r) < key(best[r.gpu])):
            best[r.gpu] = r
    rows = [replace(r, best_for_gpu=True) if best.get(r.gpu) is r else r for r in rows]
    return sorted(rows, key=lambda r: (not r.fits, key(r) if r.fits else (0, 0, 0), r.gpu))


def parse_prices(items: list[str], resolve) -> dict[str, float]:
    """``["h100=2.49", "mi300x=3.5"]`` → ``{gpu id: USD per GPU-hour}``.

    Raises:
        UsageError: not ``GPU=NUMBER`` with a number >= 0, or an unknown GPU.
    """
    out = {}
    for item in items:
        name, sep, value = str(item).partition("=")
        try:
            usd = float(value)
        except ValueError:
            usd = -1.0
        if not sep or not 0 <= usd < 1e9:  # also refuses nan and inf
            raise UsageError(f"--price: {item!r} must be GPU=USD_PER_HOUR, e.g. h100=2.49")
        out[resolve(name, "--price").id] = usd
    return out


# kvplan.fleet(...) calls kvplan.api.fleet: the module is made callable (see kvplan/__init__.py)
__import__("kvplan")._make_callable(__name__)
