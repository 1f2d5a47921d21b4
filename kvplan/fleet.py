"""Fleet planning: replicas and GPUs a workload needs, per GPU type and parallel layout.

A workload is a set of request classes, each with a concurrency (requests in flight across the whole
fleet), tokens per request (prompt + output) and optionally its own latency targets (``tpot_ms``,
``ttft_ms``; the --tpot-ms / --ttft-ms flags are the defaults). A replica is one engine deployment: TP × PP
GPUs, or with attention data parallelism D attention groups of TP GPUs each (the engine's
:meth:`~kvplan.engines.base.EngineRules.parallel`), serving whole requests (a request is never split).

For each candidate (GPU, layout) kvplan takes the per-GPU KV budget of :func:`kvplan.fit.plan_fit` with
``max_model_len`` = the longest class, the units each class's request takes from the engine's pools, and
packs the requests into attention groups first-fit-decreasing (largest requests first, then smaller ones
into the space left), counting a class's shared prefix once per group that holds that class, each group
held to the engine's ``max_num_seqs`` and to the latency targets of the classes it holds: a group keeps a
request only while its decode step, estimated (:func:`kvplan.perf.estimate`) for exactly the requests it
holds, meets the tightest TPOT target among them. Replicas = ceil(groups / D); GPUs = replicas × the
replica's GPUs. The layouts an engine offers by default (:meth:`~kvplan.engines.base.EngineRules.layouts`:
TP × PP, and for MoE models expert parallelism and attention DP) are all tried and ranked by GPUs, then (among
equal GPUs) the fewest GPUs at the low end of the modelled budget's range, then cost (:func:`_key`); ``why``
says what made the best one win. The replicas' max_model_len is the longest class, or the engine's setting
when given (:func:`serving_len`).

:func:`plan_disaggregated` plans prefill and decode on separate pools (``kvplan fleet --disaggregated``).
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass, replace
from decimal import Decimal, InvalidOperation
from itertools import compress, count, islice, repeat
from operator import le
from pathlib import Path
from typing import Any, Callable

from kvplan.calc import check_tp, largest_true, valid_tp_sizes
from kvplan.errors import LoadRefused, UsageError
from kvplan.fit import FitOptions, FitResult, does_not_fit_detail, fit_plan
from kvplan.gpus import GPU
from kvplan.specs import ModelSpec
from kvplan.units import fmt_gib, fmt_tokens, parse_tokens, printable


@dataclass(frozen=True)
class RequestClass:
    """One kind of request in a workload.

    Attributes:
        name: label.
        concurrency: requests of this class in flight across the fleet.
        tokens: tokens per request (prompt + output).
        shared_prefix: prompt tokens every request of the class shares (cached once per replica).
        prompt_tokens, output_tokens: the split of ``tokens`` (optional; they sum to it): the speed figures
            decode at ``prompt + output // 2`` tokens cached (the mean over a generation) and time TTFT for
            the prompt.
        tpot_ms, ttft_ms: this class's latency targets (ms), or None: the workload's defaults (--tpot-ms,
            --ttft-ms).
    """

    name: str
    concurrency: int
    tokens: int
    shared_prefix: int = 0
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    tpot_ms: float | None = None
    ttft_ms: float | None = None


@dataclass(frozen=True)
class Workload:
    """Request classes served together."""

    name: str
    classes: tuple[RequestClass, ...]

    @property
    def max_tokens(self) -> int:
        """The longest request of any class: the replicas' max_model_len."""
        return max(c.tokens for c in self.classes)

    @property
    def concurrency(self) -> int:
        """Requests in flight, all classes."""
        return sum(c.concurrency for c in self.classes)


_WORKLOAD_KEYS = {"name", "classes", "notes"}
MAX_CLASSES = 1000
MAX_CONCURRENCY = 10**12
_CLASS_KEYS = {"name", "concurrency", "tokens", "shared_prefix", "prompt_tokens", "output_tokens", "tpot_ms", "ttft_ms"}
MAX_MS = 1e9


def _unknown(where: str, data: dict, allowed: set[str], prefix: str) -> None:
    extra = sorted(set(data) - allowed)
    if extra:
        close = difflib.get_close_matches(str(extra[0]), sorted(allowed), n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise UsageError(f"{where}: unknown key {prefix}{extra[0]!r}{hint}; allowed: {', '.join(sorted(allowed))}")


def check_ms(what: str, value: Any) -> float | None:
    """A latency target in milliseconds: a number in (0, 10^9), or None.

    Raises:
        UsageError: naming ``what`` (a flag or a workload field).
    """
    if value is None:
        return None
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value < MAX_MS
    if not ok:
        raise UsageError(f"{what}: {value!r} must be a number of milliseconds > 0")
    return float(value)


def workload_from_data(data: Any, where: str) -> Workload:
    """Validate a parsed workload mapping.

    ``tokens`` may be left out when ``prompt_tokens`` and ``output_tokens`` are both given (it is their sum);
    given with them, it must equal the sum. ``tpot_ms`` / ``ttft_ms`` are a class's own latency targets.

    Raises:
        UsageError: not a mapping, no classes, unknown keys, counts < 1, token counts that do not parse,
            a shared prefix longer than the request, a prompt/output split that does not add up, a latency
            target that is not a positive number, two classes with one name (the message names the file and
            field).
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
        if c.get("concurrency") is None:
            raise UsageError(f"{where}: {key} is missing concurrency")
        conc = c["concurrency"]
        if isinstance(conc, bool) or not isinstance(conc, int) or conc < 1:
            raise UsageError(f"{where}: {key}.concurrency={conc!r} must be an integer >= 1")
        if conc > MAX_CONCURRENCY:
            raise UsageError(
                f"{where}: {key}.concurrency={conc:,} is beyond what kvplan plans for ({MAX_CONCURRENCY:,})"
            )
        present = [k for k in ("prompt_tokens", "output_tokens") if c.get(k) is not None]  # falsy too: 0, false
        split = {k: parse_tokens(c[k], f"{where}: {key}.{k}") for k in present}
        if c.get("tokens") is None:
            if len(split) < 2:
                raise UsageError(f"{where}: {key} is missing tokens (or prompt_tokens and output_tokens, its parts)")
            tokens = split["prompt_tokens"] + split["output_tokens"]
        else:
            tokens = parse_tokens(c["tokens"], f"{where}: {key}.tokens")
        prefix = 0
        if c.get("shared_prefix") is not None:  # present: validated even when falsy (false, '', [])
            prefix = parse_tokens(c["shared_prefix"], f"{where}: {key}.shared_prefix", allow_zero=True)
        if prefix >= tokens:
            raise UsageError(
                f"{where}: {key}.shared_prefix={prefix} must be shorter than tokens={tokens} "
                "(each request has tokens of its own)"
            )
        prompt = split.get("prompt_tokens", tokens - split["output_tokens"] if "output_tokens" in split else None)
        output = None if prompt is None else tokens - prompt
        if prompt is not None and (prompt < 1 or output < 1 or split.get("output_tokens", output) != output):
            raise UsageError(
                f"{where}: {key}: prompt_tokens + output_tokens must equal tokens={tokens} (each at least 1)"
            )
        if prompt is not None and prefix > prompt:
            raise UsageError(
                f"{where}: {key}.shared_prefix={prefix} is longer than prompt_tokens={prompt} (the shared prefix is "
                "part of each prompt)"
            )
        tpot = check_ms(f"{where}: {key}.tpot_ms", c.get("tpot_ms"))
        ttft = check_ms(f"{where}: {key}.ttft_ms", c.get("ttft_ms"))
        name = _label(where, f"{key}.name", c.get("name")) or f"class{i}"
        if name in names:
            raise UsageError(
                f"{where}: {key}.name={name!r} is the name of classes[{names[name]}] too; class names must be unique"
            )
        names[name] = i
        out.append(RequestClass(name, conc, tokens, prefix, prompt, output, tpot, ttft))
    return Workload(_label(where, "name", data.get("name")) or printable(Path(where).stem), tuple(out))


def _label(where: str, field: str, value: Any) -> str | None:
    """A workload or class name: one line of text (a number is written out), or None when not given.

    Raises:
        UsageError: a name with a character that is not printable (``str.isprintable``: a newline, an ESC that
            would colour the terminal, U+2028 that breaks the line, U+202E that reverses the text after it).
    """
    if not value:
        return None
    text = str(value)
    if not text.isprintable():
        raise UsageError(f"{where}: {field}='{printable(text)[:80]}' must be one line of printable text")
    return text or None


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
class ClassSpeed:
    """One request class's own figures on a layout, to check against its own targets (a row's speed figures are
    the largest over its replicas, which can hold different classes). A group is an attention group: the whole
    replica without attention data parallelism.

    Attributes:
        name: the class.
        requests_per_group: the most requests of this class one group holds.
        requests_in_group: the most requests (of every class) in one group that holds this class: the batch its
            decode steps run.
        max_requests_per_group: this class's cap per group: the most requests of it alone whose estimated step
            meets its TPOT target, and the engine's cap on running requests (the smaller), or None.
        tpot_ms_limit, tpot_ms_estimate: TPOT of the slowest group holding this class (ms) at the physical limit
            (MBU = MFU = 1) and as estimated (what the replicas are sized with); None without a bandwidth.
        ttft_ms_limit, ttft_ms_estimate: this class's prompt alone (ms), the same two ways.
        tpot_ms_target, ttft_ms_target: its targets (the class's own, else --tpot-ms / --ttft-ms), or None.
    """

    name: str
    requests_per_group: int
    requests_in_group: int
    max_requests_per_group: int | None = None
    tpot_ms_limit: float | None = None
    tpot_ms_estimate: float | None = None
    ttft_ms_limit: float | None = None
    ttft_ms_estimate: float | None = None
    tpot_ms_target: float | None = None
    ttft_ms_target: float | None = None


@dataclass(frozen=True)
class FleetRow:
    """One candidate layout: a GPU type in one parallel layout, and the replicas it needs.

    Attributes:
        gpu, gpu_name: catalog id and name.
        tensor_parallel_size, pipeline_parallel_size: the engine's TP and PP flags.
        data_parallel_size, expert_parallel_size: attention DP groups per replica and the GPUs the routed
            experts are split over (1: none); ``layout`` names the whole (``TP 1 × DP 8, EP 8``) and
            ``parallel_flags`` gives the engine's own flags for it.
        replica_gpus: GPUs of one replica (TP × PP, × DP for vLLM's data parallelism).
        fits: whether every class fits a replica (and its latency targets can be met).
        reason: why not, when it does not (None when it fits).
        replicas: replicas needed (0 when it does not fit).
        gpus: replicas × replica_gpus.
        kv_budget_bytes_per_gpu: KV budget of one GPU (B).
        kv_bytes_needed_per_gpu: KV bytes one GPU of each attention group holds, summed over the groups: all
            requests' per-GPU bytes (prefixes once per group), to set against ``kv_budget_bytes_per_gpu`` ×
            the groups (B).
        kv_utilization: the fullest pool's share used: units needed / (groups × the pool's capacity), over
            the engine's pools (:attr:`kvplan.fit.FitResult.pools`; one pool of bytes or blocks for most).
        requests_per_replica: the most requests any replica holds.
        price_usd_per_hour: per GPU, or None; cost_usd_per_hour = gpus × price, computed in exact decimal
            arithmetic from the price as given (``2.49`` × 112 = 278.88, not 278.88000000000005).
        limit: what sets the replicas: ``memory``, ``SLO`` (a TPOT target) or the engine's cap on running requests
            (``max_num_seqs``; SGLang ``max_running_requests``, whose Mamba-slot bound packs as a pool too).
        max_requests_per_replica: the cap of the SLO or max_num_seqs (the smaller), per attention group, or None;
            with several classes the largest class's cap (each class's own: ``class_speed``).
        tpot_ms_limit, tpot_ms_estimate: the slowest group's TPOT at the physical limit (MBU = MFU = 1: no
            system is faster) and as estimated (what the replicas are sized with); None without a bandwidth. Each
            is the largest over the groups, which can hold different classes (and need not be the same group).
        ttft_ms_limit, ttft_ms_estimate: the same for the longest prompt alone.
        class_speed: each class's own figures (:class:`ClassSpeed`), in the workload's order; empty when the row
            does not fit.
        output_tokens_per_s_per_gpu: the estimate's output tokens/s over all GPUs of the fleet.
        usd_per_million_output_tokens: cost_usd_per_hour / estimated tokens per hour × 10⁶, with a price.
        requests_per_replica_mean: requests of the workload / replicas (None when it does not fit).
        kv_budget_low_bytes_per_gpu, kv_budget_high_bytes_per_gpu: the range of the KV budget per GPU (its
            modelled terms at the extremes measured on engine logs, :attr:`kvplan.fit.FitResult.kv_budget_low_bytes`).
        replicas_low, replicas_high: the replicas at the high and at the low end of that budget (equal to
            ``replicas`` for an exact budget); None where a request does not fit at that end.
        load_notes: what the engine changes to load the checkpoint at this layout.
        why: for the best layout of each GPU, what made it win (one line); "" otherwise.
    """

    gpu: str
    gpu_name: str
    tensor_parallel_size: int
    pipeline_parallel_size: int
    fits: bool
    reason: str | None
    replicas: int
    gpus: int
    kv_budget_bytes_per_gpu: int
    kv_bytes_needed_per_gpu: int
    kv_utilization: float
    requests_per_replica: int
    price_usd_per_hour: float | None
    cost_usd_per_hour: float | None
    best_for_gpu: bool = False
    limit: str = "memory"
    max_requests_per_replica: int | None = None
    tpot_ms_limit: float | None = None
    tpot_ms_estimate: float | None = None
    ttft_ms_limit: float | None = None
    ttft_ms_estimate: float | None = None
    output_tokens_per_s_per_gpu: float | None = None
    usd_per_million_output_tokens: float | None = None
    requests_per_replica_mean: float | None = None
    kv_budget_low_bytes_per_gpu: int = 0
    kv_budget_high_bytes_per_gpu: int = 0
    replicas_low: int | None = None
    replicas_high: int | None = None
    data_parallel_size: int = 1
    expert_parallel_size: int = 1
    replica_gpus: int = 0
    layout: str = ""
    parallel_flags: str = ""
    load_notes: tuple[str, ...] = ()
    why: str = ""
    class_speed: tuple[ClassSpeed, ...] = ()

    @property
    def gpus_per_replica(self) -> int:
        """GPUs of one replica."""
        return self.replica_gpus or self.tensor_parallel_size * self.pipeline_parallel_size


@dataclass(frozen=True)
class SLO:
    """Latency targets and the speed model's settings for a fleet.

    Attributes:
        tpot_ms: time per output token each request must see at most (ms), for classes without their own
            ``tpot_ms``; None: no TPOT target.
        ttft_ms: time to first token at most (ms), for classes without their own ``ttft_ms``.
        prompt_len: prompt tokens of a class without a prompt/output split (its TTFT prompt, and its decode
            context ``P + (tokens − P) // 2``); None: such a class decodes and prefills at all its tokens.
        mbu, mfu: replace the estimate's fractions of peak bandwidth and FLOP/s (None: calibrated).
        max_num_seqs: hold replicas to the engine's ``max_num_seqs`` (default on).
    """

    tpot_ms: float | None = None
    ttft_ms: float | None = None
    prompt_len: int | None = None
    mbu: float | None = None
    mfu: float | None = None
    max_num_seqs: bool = True

    def check(self, workload: Workload) -> None:
        """Refuse a ``prompt_len`` that cannot be the prompt of a class it applies to (one without its own
        prompt/output split): not shorter than the class's tokens (no output left), or shorter than its shared
        prefix (part of every prompt).

        Raises:
            UsageError: naming ``--prompt-len`` and the class.
        """
        if self.prompt_len is None:
            return
        for c in workload.classes:
            if c.prompt_tokens is not None:
                continue
            if self.prompt_len >= c.tokens:
                raise UsageError(
                    f"--prompt-len: {self.prompt_len:,} tokens is not shorter than the {c.tokens:,} tokens of class "
                    f"{c.name!r} (prompt and output together); give a prompt length below it"
                )
            if self.prompt_len < c.shared_prefix:
                raise UsageError(
                    f"--prompt-len: {self.prompt_len:,} tokens is shorter than the shared prefix of class {c.name!r}, "
                    f"{c.shared_prefix:,} tokens (part of each prompt)"
                )

    def prompt(self, c: RequestClass) -> int:
        """Prompt tokens of class ``c`` (TTFT): its split, else --prompt-len (below its tokens), else its tokens."""
        if c.prompt_tokens is not None:
            return c.prompt_tokens
        return c.tokens if self.prompt_len is None else min(self.prompt_len, c.tokens)

    def output(self, c: RequestClass) -> int | None:
        """Output tokens of class ``c``: tokens less the prompt; None without a split (no prompt/output
        split and no --prompt-len: the workload does not say how long requests decode)."""
        out = c.tokens - self.prompt(c)
        return out if out >= 1 else None

    def context(self, c: RequestClass) -> int:
        """Tokens cached while class ``c`` decodes, on average over a generation: ``prompt + output // 2``."""
        p = self.prompt(c)
        return p + (c.tokens - p) // 2

    def tpot(self, c: RequestClass) -> float | None:
        """Class ``c``'s TPOT target (ms): its own, else --tpot-ms."""
        return self.tpot_ms if c.tpot_ms is None else c.tpot_ms

    def ttft(self, c: RequestClass) -> float | None:
        """Class ``c``'s TTFT target (ms): its own, else --ttft-ms."""
        return self.ttft_ms if c.ttft_ms is None else c.ttft_ms

    def wants_speed(self, workload: Workload) -> bool:
        """Whether any class has a latency target."""
        return any(self.tpot(c) is not None or self.ttft(c) is not None for c in workload.classes)


def pack_replicas(budget, classes: list[tuple]) -> tuple[int, int, int]:
    """First-fit-decreasing packing of whole requests into replicas of ``budget`` (per GPU).

    Args:
        budget: what one replica holds per GPU: bytes, or a tuple of pool capacities (the engine's pools,
            :attr:`kvplan.fit.FitResult.pools`).
        classes: ``(count, size of one request, prefix paid once per replica holding the class)``, sizes in
            the budget's units (ints, or tuples with one entry per pool).

    Returns:
        (replicas, units used including prefixes (summed over pools), the most requests in one replica).

    Groups of identical replicas are tracked as counts, so the cost is per class, not per request; a class
    passes over blocks of replica groups none of which can take one of its requests, and replicas no later
    class can use are closed, so a class costs about the groups it lands in, not every replica so far (a
    1,000-class workload: a few ms per packing; ``scripts/bench_inputs.py`` times the fleet over the catalog).
    A request larger than ``budget`` must be excluded by the caller.
    """
    replicas, used, most, _ = pack_limited(budget, classes)
    return replicas, sum(used), most


_BLOCK = 32  # pack_limited keeps the open replica groups in blocks of about this many


def _vec(x, n: int) -> tuple:
    return tuple(x) if isinstance(x, (tuple, list)) else (x,) * n if n > 1 else (x,)


TimeCheck = Callable[[dict], bool]
"""``ok(counts)``: whether a group holding ``counts[i]`` requests of class i meets its latency targets; it must
be monotone (adding requests never turns False into True)."""


def _first(values: list, need, start: int) -> int:
    """The first index ``i >= start`` with ``values[i] >= need``, or -1 (the scan runs in C: map, compress)."""
    return next(compress(count(start), map(le, repeat(need), islice(values, start, None))), -1)


def _pack_one_pool(
    budget: int, classes: list[tuple], cap: int, time_ok: TimeCheck | None
) -> tuple[int, tuple, int, list[tuple[int, dict[int, int]]]]:
    """:func:`pack_limited` for one pool: the same steps on plain ints (most engines have one pool; a
    1,000-class workload packs in a few milliseconds)."""
    block_max = _BLOCK
    order = sorted(enumerate(classes), key=lambda x: -(x[1][1] + x[1][2]))
    big = 1 << 126
    least = [big] * (len(order) + 1)  # the smallest request of the classes from each position on
    for j in range(len(order) - 1, -1, -1):
        size = order[j][1][1]
        least[j] = size if size < least[j + 1] else least[j + 1]
    # a group: [replicas alike, units left, requests each, {class: requests each}]; a block: [its groups, the
    # units each has left (-1: at the cap)]; room[b]: the most of block b
    blocks: list[list[list]] = []
    room: list[int] = []
    closed: list[list] = []
    used = 0

    def timed(per: int, comp: dict, cid: int, remaining: int) -> int:
        return _most_timed(time_ok, comp, cid, per, remaining)

    for j, (cid, (remaining, size, prefix)) in enumerate(order):
        need = prefix + size
        b = 0
        while remaining:
            # the first block, then the first group in it, with room for one request (scans in C)
            b = next(compress(count(b), map(le, repeat(need), islice(room, b, None))), -1)
            if b < 0:
                break
            groups, lefts = blocks[b]
            most = room[b]
            i = next(compress(count(), map(le, repeat(need), lefts)), -1)
            changed = False
            while i >= 0:
                reps, left, reqs, comp = groups[i]
                per = cap - reqs
                if size > 0:  # 0-byte requests: count-bound
                    k = (left - prefix) // size
                    if k < per:
                        per = k
                if time_ok is not None and per > 0:
                    per = timed(per, comp, cid, remaining)
                if per <= 0:
                    i = next(compress(count(i + 1), map(le, repeat(need), islice(lefts, i + 1, None))), -1)
                    continue
                changed = changed or lefts[i] == most  # the block's most may fall
                if reps == 1:  # the common case, in fewer steps: one replica takes min(per, remaining)
                    k = per if per < remaining else remaining
                    left -= prefix + k * size
                    reqs += k
                    groups[i] = [1, left, reqs, {**comp, cid: k}]
                    lefts[i] = left if reqs < cap else -1
                    used += prefix + k * size
                    remaining -= k
                    i += 1
                else:
                    pieces = []
                    full = min(reps, remaining // per)
                    if full:
                        pieces.append([full, left - prefix - per * size, reqs + per, {**comp, cid: per}])
                        used += full * (prefix + per * size)
                        remaining -= full * per
                    rest = reps - full
                    if rest and remaining:  # remaining < per
                        pieces.append([1, left - prefix - remaining * size, reqs + remaining, {**comp, cid: remaining}])
                        used += prefix + remaining * size
                        remaining = 0
                        rest -= 1
                    if rest:
                        pieces.append([rest, left, reqs, comp])
                    groups[i : i + 1] = pieces
                    lefts[i : i + 1] = [g[1] if g[2] < cap else -1 for g in pieces]
                    i += len(pieces)
                    changed = True
                if not remaining:
                    break
                i = next(compress(count(i), map(le, repeat(need), islice(lefts, i, None))), -1)
            if not changed:
                b += 1
            elif len(groups) > 2 * block_max:
                parts = []
                for k in range(0, len(groups), block_max):
                    part = groups[k : k + block_max]
                    parts.append([part, [g[1] if g[2] < cap else -1 for g in part]])
                blocks[b : b + 1] = parts
                room[b : b + 1] = [max(part[1]) for part in parts]
                b += len(parts)
            else:
                room[b] = max(lefts)
                b += 1
        if remaining:
            per = 0 if budget < need else cap if size <= 0 else min(cap, (budget - prefix) // size)
            if time_ok is not None and per > 0:
                per = timed(per, {}, cid, remaining)
            if per <= 0:
                raise UsageError(f"class {cid}: not one request fits an empty replica (the caller must exclude it)")
            full, part = divmod(remaining, per)
            fresh = []
            if full:
                fresh.append([full, budget - prefix - per * size, per, {cid: per}])
                used += full * (prefix + per * size)
            if part:
                fresh.append([1, budget - prefix - part * size, part, {cid: part}])
                used += prefix + part * size
            lefts = [g[1] if g[2] < cap else -1 for g in fresh]
            if blocks and len(blocks[-1][0]) + len(fresh) <= block_max:
                last = blocks[-1]
                last[0].extend(fresh)
                last[1].extend(lefts)
                room[-1] = max(last[1])
            else:
                blocks.append([fresh, lefts])
                room.append(max(lefts))
        # close the blocks no later class can use (too few units left); the rest keep their first-fit order
        smallest = least[j + 1]
        if room and min(room) < smallest:
            keep = [b for b, most in enumerate(room) if most >= smallest]
            kept = set(keep)
            closed.extend(g for b, blk in enumerate(blocks) if b not in kept for g in blk[0])
            blocks = [blocks[b] for b in keep]
            room = [room[b] for b in keep]
    groups = closed + [g for blk in blocks for g in blk[0]]
    replicas = sum(g[0] for g in groups)
    most = max((g[2] for g in groups), default=0)
    return replicas, (used,), most, [(g[0], g[3]) for g in groups]


def pack_limited(
    budget,
    classes: list[tuple],
    max_requests: int | None = None,
    time_ok: TimeCheck | None = None,
) -> tuple[int, tuple, int, list[tuple[int, dict[int, int]]]]:
    """:func:`pack_replicas` with two more limits per replica: at most ``max_requests`` requests (the
    engine's max_num_seqs), and only mixes that ``time_ok`` accepts (the latency targets, checked exactly for
    the requests a replica holds: the largest count a replica can take is found by binary search over the
    monotone check). Every pool of ``budget`` must hold its share.

    When ``time_ok`` accepts every mix the packing is the one without it (the check only ever lowers a count
    the memory and ``max_requests`` allow, and is asked at most of the count placed).

    First fit, classes largest first, over groups of replicas alike. The open groups sit in blocks of about
    :data:`_BLOCK`; each block keeps, per pool, the units each of its groups has left (-1 for a group at the
    request cap) and the most of them, so a class finds the first block, and in it the first group, with room
    for one of its requests by a scan that runs in C (:func:`_first`), and a block no later class can use is
    closed (never visited again). A class visits each group at most once (the groups it fills cannot take
    another of its requests), so it pays its prefix in every group it lands in. The result is that of visiting
    every group (tests/test_fleet.py checks it against a one-request-at-a-time first fit, one and two pools,
    with a request cap and a latency check).

    Returns:
        (replicas, units used per pool, the most requests in one replica, [(replicas alike, {class index:
        requests each})]).
    """
    caps, cls = _packable(budget, classes)
    return _pack(caps, cls, max_requests, time_ok)


def _packable(budget, classes: list[tuple]) -> tuple[tuple, list[tuple]]:
    """(pool capacities, classes) as :func:`_pack` takes them: sizes as ints for one pool, tuples for several."""
    caps = _vec(budget, 1)
    n = len(caps)
    if n == 1:
        seq = (tuple, list)
        return caps, [(k, s[0] if isinstance(s, seq) else s, p[0] if isinstance(p, seq) else p) for k, s, p in classes]
    return caps, [(k, _vec(s, n), _vec(p, n)) for k, s, p in classes]


def _pack(caps: tuple, cls: list[tuple], max_requests: int | None, time_ok: TimeCheck | None) -> tuple:
    """:func:`pack_limited` of classes already in :func:`_packable`'s form (a layout packs them several times)."""
    if len(caps) == 1:
        return _pack_one_pool(caps[0], cls, max_requests or 1 << 62, time_ok)
    return _pack_pools(caps, cls, max_requests or 1 << 62, time_ok)


def _pack_pools(caps: tuple, cls: list[tuple], cap: int, time_ok: TimeCheck | None) -> tuple:
    """:func:`pack_limited` for several pools (sizes and prefixes as tuples, one entry per pool)."""
    block_max = _BLOCK
    n = len(caps)
    pools = range(n)
    order = sorted(enumerate(cls), key=lambda x: -(sum(x[1][1]) + sum(x[1][2])))
    # what the classes still to come need at least, per pool, from each position on
    big = 1 << 126
    min_size = [(big,) * n] * (len(order) + 1)
    for j in range(len(order) - 1, -1, -1):
        min_size[j] = tuple(min(a, b) for a, b in zip(min_size[j + 1], order[j][1][1], strict=True))
    # a group: [replicas alike, units left per pool, requests each, {class: requests each}]; a block: [its groups,
    # then per pool the units each group has left (-1: at the cap)]; room[p][b]: the most of block b in pool p
    blocks: list[list[list]] = []
    room: list[list[int]] = [[] for _ in pools]
    closed: list[list] = []
    used = [0] * n

    def fits(left: tuple, pay: tuple, size: tuple, reqs: int, comp: dict, cid: int, remaining: int) -> int:
        per = cap - reqs
        for lft, p, z in zip(left, pay, size, strict=True):
            if lft < p + z:
                return 0
            if z > 0:  # a pool a request draws nothing from does not limit (0-byte requests: count-bound)
                per = min(per, (lft - p) // z)
        if time_ok is None or per <= 0:
            return per
        return _most_timed(time_ok, comp, cid, per, remaining)

    def group(times: int, left: tuple, reqs: int, comp: dict, cid: int, k: int, pay: tuple, size: tuple) -> list:
        for i in pools:
            used[i] += times * (pay[i] + k * size[i])
        new = tuple(lft - p - k * z for lft, p, z in zip(left, pay, size, strict=True))
        return [times, new, reqs + k, {**comp, cid: k}]

    def lefts(groups: list[list], p: int) -> list[int]:
        return [g[1][p] if g[2] < cap else -1 for g in groups]

    def fresh_block(groups: list[list]) -> list:
        return [groups, *(lefts(groups, p) for p in pools)]

    for j, (cid, (count_, size, prefix)) in enumerate(order):
        remaining = count_
        need = tuple(p + z for p, z in zip(prefix, size, strict=True))
        need0 = need[0]
        room0 = room[0]
        b = 0
        while remaining:
            b = _first(room0, need0, b)
            if b < 0:
                break
            if n > 1 and any(room[p][b] < need[p] for p in pools):
                b += 1
                continue
            block = blocks[b]
            groups, left0 = block[0], block[1]
            i = 0
            changed = False
            while remaining:
                i = _first(left0, need0, i)
                if i < 0:
                    break
                if n > 1 and any(block[1 + p][i] < need[p] for p in pools):
                    i += 1
                    continue
                reps, left, reqs, comp = groups[i]
                per = fits(left, prefix, size, reqs, comp, cid, remaining)
                if per <= 0:
                    i += 1
                    continue
                pieces = []
                full = min(reps, remaining // per)
                if full:
                    pieces.append(group(full, left, reqs, comp, cid, per, prefix, size))
                    remaining -= full * per
                rest = reps - full
                if rest and remaining:
                    pieces.append(group(1, left, reqs, comp, cid, remaining, prefix, size))  # remaining < per
                    remaining = 0
                    rest -= 1
                if rest:
                    pieces.append([rest, left, reqs, comp])
                groups[i : i + 1] = pieces
                for p in pools:
                    block[1 + p][i : i + 1] = lefts(pieces, p)
                i += len(pieces)
                changed = True
            if not changed:
                b += 1
                continue
            if len(groups) > 2 * block_max:
                parts = [fresh_block(groups[k : k + block_max]) for k in range(0, len(groups), block_max)]
            else:
                parts = [block]
            blocks[b : b + 1] = parts
            for p in pools:
                room[p][b : b + 1] = [max(part[1 + p]) for part in parts]
            b += len(parts)
        if remaining:
            per = fits(caps, prefix, size, 0, {}, cid, remaining)
            if per <= 0:
                raise UsageError(f"class {cid}: not one request fits an empty replica (the caller must exclude it)")
            full, part = divmod(remaining, per)
            fresh = []
            if full:
                fresh.append(group(full, caps, 0, {}, cid, per, prefix, size))
            if part:
                fresh.append(group(1, caps, 0, {}, cid, part, prefix, size))
            if blocks and len(blocks[-1][0]) + len(fresh) <= block_max:
                last = blocks[-1]
                last[0].extend(fresh)
                for p in pools:
                    last[1 + p].extend(lefts(fresh, p))
                    room[p][-1] = max(last[1 + p])
            else:
                blocks.append(fresh_block(fresh))
                for p in pools:
                    room[p].append(max(blocks[-1][1 + p]))
        # close the blocks no later class can use (too few units left in some pool); the rest keep their
        # first-fit order
        least = min_size[j + 1]
        if blocks and any(min(room[p]) < least[p] for p in pools):
            keep = [b for b in range(len(blocks)) if all(room[p][b] >= least[p] for p in pools)]
            kept = set(keep)
            closed.extend(g for b, blk in enumerate(blocks) if b not in kept for g in blk[0])
            blocks = [blocks[b] for b in keep]
            room = [[room[p][b] for b in keep] for p in pools]
    groups = closed + [g for blk in blocks for g in blk[0]]
    replicas = sum(g[0] for g in groups)
    most = max((g[2] for g in groups), default=0)
    return replicas, tuple(used), most, [(g[0], g[3]) for g in groups]


def _replica_most(groups: list[tuple[int, dict]], dp: int) -> int:
    """The most requests in one replica when groups fill replicas of ``dp`` groups, largest first."""
    sizes = sorted(((n, sum(comp.values())) for n, comp in groups), key=lambda x: -x[1])
    total, slots = 0, dp
    for n, size in sizes:
        k = min(n, slots)
        total += k * size
        slots -= k
        if not slots:
            break
    return total


@dataclass(frozen=True, eq=False)
class _Speed:
    """A layout's speed models: the limit's and the estimate's (None without a bandwidth), the TTFT of the
    longest prompt, and each class's TPOT target in seconds (inf: none)."""

    limit: Any = None
    estimate: Any = None
    ttft_limit_s: float | None = None
    ttft_estimate_s: float | None = None
    targets: tuple = ()
    reason: str | None = None
    ttft_s: tuple = ()  # (limit, estimate) seconds of each class's prompt alone


def _speed(spec: ModelSpec, gpu: GPU, fit: FitResult, workload: Workload, slo: SLO, ttft: bool = True,
           prefill_here: bool = True) -> _Speed:  # fmt: skip
    """The speed facts of a layout, or the reason it cannot meet a class's target: TTFT of each class's prompt
    alone, and TPOT of one request alone, against the limit (then it can never meet it: no system is faster)
    and against the estimate (what sizing uses). ``ttft``: check TTFT targets; ``prefill_here``: the pool also
    prefills its requests' successors (aggregated serving: the estimate's TPOT pays
    :func:`kvplan.perf.prefill_interference_s`); both off for a decode pool."""
    from kvplan import perf

    wants = slo.wants_speed(workload)
    try:
        lim_hw = perf.hardware(gpu, fit.weights_dtype)
        est_hw = perf.hardware(gpu, fit.weights_dtype, eff=perf.estimate_efficiency(fit.engine, gpu, slo.mbu, slo.mfu))
    except UsageError as e:
        return _Speed(reason=f"no speed figures: {e}" if wants else None)
    contexts = [slo.context(c) for c in workload.classes]
    limit = perf.StepModel(spec, fit, lim_hw, contexts)
    interference = None
    if prefill_here:
        interference = [0.0 if slo.output(c) is None else
                        perf.prefill_interference_s(spec, fit, est_hw, slo.prompt(c), slo.output(c))
                        for c in workload.classes]  # fmt: skip
    est = perf.StepModel(spec, fit, est_hw, contexts, interference, terms=limit.terms)
    prompts = {slo.prompt(c) for c in workload.classes}
    lim_at, est_at = perf.prefill_seconds(spec, fit, lim_hw, prompts), perf.prefill_seconds(spec, fit, est_hw, prompts)
    ttft_at = {p: (lim_at[p], est_at[p]) for p in prompts}
    ttft_lim, ttft_est = ttft_at[max(prompts)]
    targets = tuple(math.inf if slo.tpot(c) is None else slo.tpot(c) / 1e3 for c in workload.classes)
    out = dict(limit=limit, estimate=est, ttft_limit_s=ttft_lim, ttft_estimate_s=ttft_est, targets=targets,
               ttft_s=tuple(ttft_at[slo.prompt(c)] for c in workload.classes))  # fmt: skip
    for i, c in enumerate(workload.classes):
        target = slo.ttft(c)
        if ttft and target is not None:
            p = slo.prompt(c)
            for what, at, never in (("limit", lim_at, True), ("estimate", est_at, False)):
                ms = at[p] * 1e3
                if ms > target:
                    why = " (no system is faster)" if never else ""
                    return _Speed(reason=f"TTFT {what} {ms:,.1f} ms for a {p:,}-token prompt of class {c.name} exceeds "
                                         f"its target {target:g} ms{why}", **out)  # fmt: skip
        if targets[i] < math.inf:
            for what, model, never in (("limit", limit, True), ("estimate", est, False)):
                ms = model.seconds({i: 1}) * 1e3
                if ms > targets[i] * 1e3:
                    why = " (no system is faster)" if never else ""
                    cached = fmt_tokens(contexts[i])
                    reason = (f"TPOT {what} {ms:,.2f} ms for one request of class {c.name} ({cached} cached) exceeds "
                              f"its target {targets[i] * 1e3:g} ms{why}")  # fmt: skip
                    return _Speed(reason=reason, **out)
    return _Speed(**out)


SLO_CAP_SEARCH = 1 << 24
"""The most requests of one class alone a latency cap is searched up to (:meth:`_TimeCheck.cap`)."""


class _TimeCheck:
    """The packing's latency check (a :data:`TimeCheck`): the estimated step of exactly the requests a group
    holds against the tightest TPOT target among them.

    The step only grows with the requests of any class, and a mix's target is at most each of its classes', so
    a class's own cap (:meth:`cap`: the most requests of it alone that meet its target, found once) answers
    every question about that class alone, and bounds it in any mix (:func:`_most_timed`): the answers are the
    ones of computing each step, with far fewer steps computed (a 1,000-class workload asks a million)."""

    def __init__(self, model, targets: tuple):
        self.model, self.targets = model, targets
        self._caps: dict[int, int] = {}
        self._last = (0, 0)  # the last two caps found: the next class's (of a similar length and target) is
        # searched near the one they extrapolate to

    def _step_ok(self, present: dict) -> bool:
        return self.model.seconds(present) <= min(self.targets[i] for i in present)

    def cap(self, i: int) -> int:
        """The largest k in [0, :data:`SLO_CAP_SEARCH`] whose group of k requests of class i alone meets its
        target (binary search: the check is monotone)."""
        found = self._caps.get(i)
        if found is None:
            before, last = self._last
            hint = max(0, 2 * last - before)
            found = _largest_near(lambda k: self._step_ok({i: k}) if k else True, hint, SLO_CAP_SEARCH)
            self._caps[i] = found
            self._last = (last, found)
        return found

    def adding(self, comp: dict, cid: int) -> Callable[[int], bool]:
        """``k -> self({**comp, cid: k})`` for a class ``cid`` not in ``comp``, with ``comp``'s sums done once."""
        present = {i: k for i, k in comp.items() if k}
        if not present or cid in present:
            return lambda k: self({**comp, cid: k})
        mix, model = self.model.mix(present), self.model
        target = min(self.targets[i] for i in {**present, cid: 1})
        return lambda k: model.seconds_with(mix, cid, k) <= target if k else self(present)

    def __call__(self, counts: dict) -> bool:
        present = {i: k for i, k in counts.items() if k}
        if not present:
            return True
        if len(present) == 1:
            ((i, k),) = present.items()
            cap = self.cap(i)
            if k <= cap or cap < SLO_CAP_SEARCH:
                return k <= cap
        return self._step_ok(present)


def _most_timed(time_ok: TimeCheck, comp: dict, cid: int, per: int, remaining: int) -> int:
    """``per`` when a group holding ``comp`` meets its targets with ``min(per, remaining)`` requests of class
    ``cid`` more, else the largest k below that with which it does: what a binary search over the counts
    finds for a monotone check, in fewer checks (each a step computed): the class's own cap (a
    :class:`_TimeCheck`'s) bounds the count, and the search gallops up from 1 (a full group answers at once)."""
    hi = min(per, remaining)
    if isinstance(time_ok, _TimeCheck):
        cap, ok = time_ok.cap(cid), time_ok.adding(comp, cid)
    else:
        cap, ok = SLO_CAP_SEARCH, lambda k: time_ok({**comp, cid: k})
    top = hi if cap >= SLO_CAP_SEARCH else min(hi, cap)
    if top == hi:
        if ok(hi):
            return per
        top = hi - 1
    lo, step = 0, 1  # lo: a count known to meet the targets; then the largest k <= top that does
    while step <= top and ok(step):
        lo, step = step, 2 * step
    return largest_true(ok, lo, min(step - 1, top))


def _time_check(speed: _Speed) -> TimeCheck | None:
    """The packing's latency check (:class:`_TimeCheck`; None when no class has a TPOT target)."""
    targets = speed.targets
    if speed.estimate is None or all(t == math.inf for t in targets):
        return None
    return _TimeCheck(speed.estimate, targets)


def serving_len(workload: Workload, opts: FitOptions) -> int:
    """The replicas' max_model_len: the engine's setting when given (``opts.max_model_len``: vLLM
    ``--max-model-len``, SGLang ``--context-length``, TensorRT-LLM ``--max_seq_len``), else the longest class.

    Raises:
        UsageError: a class longer than the given max_model_len (the engine refuses such requests).
    """
    given = opts.max_model_len
    if given is None:
        return workload.max_tokens
    for c in workload.classes:
        if c.tokens > given:
            raise UsageError(
                f"--max-model-len {given:,}: requests of class {c.name} ({c.tokens:,} tokens) are longer, and the "
                f"engine refuses them; give a max_model_len of at least {workload.max_tokens:,}"
            )
    return given


def plan_layout(
    spec: ModelSpec,
    gpu: GPU,
    workload: Workload,
    opts: FitOptions,
    price: Decimal | float | None = None,
    slo: SLO | None = None,
    ttft: bool = True,
) -> FleetRow:
    """Replicas of ``gpu`` in ``opts``' layout needed for ``workload`` (see the module docstring), held to
    ``slo``.

    Memory packs the requests into attention groups; each group keeps at most the engine's ``max_num_seqs``
    and only the requests whose estimated decode step meets the tightest TPOT target of the classes it holds
    (:func:`pack_limited`); a layout on which even one request misses a class's TPOT or TTFT target (TTFT:
    its prompt alone; ``ttft`` False skips it) cannot serve the workload. ``limit`` names what set the
    replicas. A layout the engine refuses to load (:class:`kvplan.errors.LoadRefused`) is a row that does
    not fit, with the engine's reason.

    Raises:
        UsageError: as :func:`kvplan.fit.plan_fit`; MBU/MFU outside [0.01, 1].
    """
    given = opts.max_model_len is not None
    opts = replace(opts, max_model_len=serving_len(workload, opts), shared_prefix_tokens=0)
    tp, pp = opts.tensor_parallel_size, opts.pipeline_parallel_size
    base = dict(gpu=gpu.id, gpu_name=gpu.name, tensor_parallel_size=tp, pipeline_parallel_size=pp,
                price_usd_per_hour=None if price is None else float(price))  # fmt: skip
    try:
        fit, cache = fit_plan(spec, gpu, opts)
    except LoadRefused as e:
        from kvplan import engines

        par = engines.get(opts.engine).parallel(spec, opts)
        return FleetRow(fits=False, reason=str(e), replicas=0, gpus=0, kv_budget_bytes_per_gpu=0,
                        kv_bytes_needed_per_gpu=0, kv_utilization=0.0, requests_per_replica=0, cost_usd_per_hour=None,
                        data_parallel_size=par.attn_dp, expert_parallel_size=par.ep, replica_gpus=par.gpus,
                        layout=par.name, parallel_flags=par.flags, **base)  # fmt: skip
    par = fit.parallel
    base.update(
        kv_budget_bytes_per_gpu=fit.kv_budget_bytes,
        kv_budget_low_bytes_per_gpu=fit.kv_budget_low_bytes,
        kv_budget_high_bytes_per_gpu=fit.kv_budget_high_bytes,
        price_usd_per_hour=None if price is None else float(price),
        data_parallel_size=par.attn_dp,
        expert_parallel_size=par.ep,
        replica_gpus=par.gpus,
        layout=par.name,
        parallel_flags=par.flags,
        load_notes=fit.load_notes,
    )

    def no(reason: str) -> FleetRow:
        return FleetRow(fits=False, reason=reason, replicas=0, gpus=0, kv_bytes_needed_per_gpu=0, kv_utilization=0.0,
                        requests_per_replica=0, cost_usd_per_hour=None, **base)  # fmt: skip

    if fit.engine_refusal:
        return no(fit.engine_refusal)
    if fit.kv_budget_bytes <= 0:
        return no("weights and activations leave no KV memory")
    if given and not fit.fits:  # a max_model_len the engine cannot hold one request of: it does not start
        return no(f"--max-model-len {opts.max_model_len:,}: {does_not_fit_detail(fit)}")
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
            if len(pool_caps) == 1:
                return no(
                    f"one request of class {c.name} ({fmt_tokens(c.tokens)}) needs {fmt_gib(need)} of KV per "
                    f"GPU, more than the {fmt_gib(room)} the engine leaves for requests"
                )
            # several pools (SGLang's full / SWA / state pools): the one that cannot hold it, not the bytes of all
            name, d, cap, u = next((n, d, cap, u) for n, d, cap, u in zip(cache.pool_names, demand, pool_caps, units,
                                                                         strict=True) if d > cap)  # fmt: skip
            return no(
                f"one request of class {c.name} ({fmt_tokens(c.tokens)}) needs {d:,} {name} ({fmt_gib(d * u)} per "
                f"GPU), more than the {cap:,} of the engine's {name} pool ({fmt_gib(cap * u)}; the rest of the KV "
                f"budget is its other pools: {', '.join(n for n in cache.pool_names if n != name)})"
            )
        classes.append((c.concurrency, tuple(d - p for d, p in zip(demand, prefix, strict=True)), prefix))
    slo = slo or SLO()
    speed = _speed(spec, gpu, fit, workload, slo, ttft, prefill_here=ttft)
    if speed.reason is not None:
        return no(speed.reason)
    from kvplan import engines

    seqs = engines.get(opts.engine).max_seqs_per_group(fit.max_num_seqs, par) if slo.max_num_seqs else None
    ok = _time_check(speed)
    caps_in, packable = _packable(pool_caps, classes)  # converted once, packed up to five times
    memory = _pack(caps_in, packable, None, None)
    # the cap changes nothing when no replica packed without it holds more (fits() never hits cap − reqs)
    by_seqs = _pack(caps_in, packable, seqs, None) if seqs and memory[2] > seqs else memory
    groups_n, used_units, most, groups = _pack(caps_in, packable, seqs, ok) if ok else by_seqs
    dp = par.attn_dp
    replicas = -(-groups_n // dp)
    used = sum(n * u for n, u in zip(used_units, units, strict=True))
    cap_name = engines.get(opts.engine).request_cap_name
    limit = "memory" if groups_n == memory[0] else cap_name if groups_n == by_seqs[0] else "SLO"
    slo_caps = [None] * len(workload.classes)
    if ok is not None:
        slo_caps = [ok.cap(i) for i in range(len(workload.classes))]
    slo_cap = None if ok is None else max(slo_caps)
    caps = [c for c in (seqs, slo_cap) if c]
    gpus = replicas * par.gpus
    # the budget is a range (its modelled terms): the replicas at its two ends, packed the same way
    ends = []
    widest = [max(size[i] + prefix[i] for _, size, prefix in classes) for i in range(len(pool_caps))]
    packed = {(pool_caps, seqs): groups_n}  # the same pools and cap pack the same (an exact budget's ends)
    for end in (fit.kv_budget_high_bytes, fit.kv_budget_low_bytes):
        end_caps = tuple(cache.pools(end))
        end_seqs = seqs
        cap = cache.request_cap(end, fit.max_model_len) if slo.max_num_seqs else None
        if cap is not None:  # a cap that depends on the pools (SGLang's max_running_requests), per attention group
            end_seqs = engines.get(opts.engine).max_seqs_per_group(cap, par)
        if (
            end <= 0
            or (end_seqs is not None and end_seqs <= 0)
            or any(d > cap for d, cap in zip(widest, end_caps, strict=True))
        ):
            ends.append(None)  # a request does not fit at that end of the range
        else:
            if (end_caps, end_seqs) not in packed:
                packed[end_caps, end_seqs] = _pack(end_caps, packable, end_seqs, ok)[0]
            ends.append(-(-packed[end_caps, end_seqs] // dp))
    cost = None if price is None else float(exact_usd(price) * gpus)  # exact: 2.49 × 112 = 278.88
    tpot_lim = tpot_est = per_gpu = usd = None
    # each class's own figures: its groups' most requests, and (with the speed models) its slowest group's TPOT
    own = [dict(mine=0, batch=0, lim=None, est=None) for _ in workload.classes]
    for _, comp in groups:
        for i, k in comp.items():
            if k:
                own[i]["mine"] = max(own[i]["mine"], k)
                own[i]["batch"] = max(own[i]["batch"], sum(comp.values()))
    if speed.estimate is not None:
        tpot_lim = tpot_est = 0.0
        tokens_per_s = 0.0
        est, lim = speed.estimate, speed.limit
        for n, comp in groups:  # each kind of group: its own requests, each one token per step
            sums = est.sums(comp)  # the same for both models (shared request terms)
            seconds, slowest_s = est.times(comp, sums)
            extra = (seconds + est.extra_s(comp)) - seconds  # prefill mixed into the steps
            step_est, step_lim = seconds + extra, lim.seconds(comp, sums)
            tpot_est = max(tpot_est, step_est)
            tpot_lim = max(tpot_lim, step_lim)
            for i, k in comp.items():
                if k:
                    own[i]["est"] = max(own[i]["est"] or 0.0, step_est)
                    own[i]["lim"] = max(own[i]["lim"] or 0.0, step_lim)
            tokens_per_s += n * sum(comp.values()) / (slowest_s + extra)
        per_gpu = tokens_per_s / gpus
        usd = None if cost is None or not tokens_per_s > 0 else cost / (tokens_per_s * 3600) * 1e6

    def ms(x: float | None) -> float | None:
        return None if x is None else x * 1e3

    class_speed = tuple(
        ClassSpeed(
            name=c.name,
            requests_per_group=o["mine"],
            requests_in_group=o["batch"],
            max_requests_per_group=min((x for x in (seqs, cap) if x), default=None),
            tpot_ms_limit=ms(o["lim"]),
            tpot_ms_estimate=ms(o["est"]),
            ttft_ms_limit=ms(speed.ttft_s[i][0]) if speed.ttft_s else None,
            ttft_ms_estimate=ms(speed.ttft_s[i][1]) if speed.ttft_s else None,
            tpot_ms_target=slo.tpot(c),
            ttft_ms_target=slo.ttft(c),
        )
        for i, (c, o, cap) in enumerate(zip(workload.classes, own, slo_caps, strict=True))
    )
    return FleetRow(
        fits=True,
        reason=None,
        replicas=replicas,
        gpus=gpus,
        kv_bytes_needed_per_gpu=used,
        kv_utilization=max(n / (groups_n * cap) for n, cap in zip(used_units, pool_caps, strict=True) if cap > 0),
        requests_per_replica=_replica_most(groups, dp) if dp > 1 else most,
        cost_usd_per_hour=cost,
        limit=limit,
        max_requests_per_replica=min(caps) if caps else None,
        tpot_ms_limit=None if tpot_lim is None else tpot_lim * 1e3,
        tpot_ms_estimate=None if tpot_est is None else tpot_est * 1e3,
        ttft_ms_limit=None if speed.ttft_limit_s is None else speed.ttft_limit_s * 1e3,
        ttft_ms_estimate=None if speed.ttft_estimate_s is None else speed.ttft_estimate_s * 1e3,
        output_tokens_per_s_per_gpu=per_gpu,
        usd_per_million_output_tokens=usd,
        requests_per_replica_mean=workload.concurrency / replicas,
        replicas_low=ends[0],
        replicas_high=ends[1],
        class_speed=class_speed,
        **base,
    )


def _largest_near(ok: Callable[[int], bool], hint: int, hi: int) -> int:
    """:func:`_largest` (``ok(0)`` true), searched outward from ``hint``: doubling steps up or down to a bracket,
    then bisection; the same answer, in about 2 log2(|answer − hint|) checks instead of log2(hi)."""
    h = min(max(hint, 0), hi)
    if ok(h):
        lo, step = h, 1
        while lo + step <= hi and ok(lo + step):
            lo, step = lo + step, 2 * step
        top = min(lo + step - 1, hi)
    else:
        fail, step = h, 1  # ok(fail) is false: the answer is below it
        while True:
            k = fail - step
            if k <= 0:
                lo, top = 0, fail - 1
                break
            if ok(k):
                lo, top = k, fail - 1
                break
            fail, step = k, 2 * step
    return largest_true(ok, lo, top)


def _largest(ok: Callable[[int], bool], hi: int) -> int:
    """The largest k in [0, hi] with ``ok(k)`` (monotone: true up to some k), by binary search."""
    return largest_true(ok, 0, hi)


DEFAULT_PPS = (1, 2, 4)
"""PP degrees ``kvplan fleet`` tries when --pp is not given."""


def low_end_gpus(r: FleetRow) -> float:
    """GPUs at the low end of the budget range (``replicas_high`` × the replica's GPUs; inf where a request does
    not fit there): how far the layout's GPU count holds when the modelled budget comes out low."""
    return math.inf if r.replicas_high is None else r.replicas_high * r.gpus_per_replica


def _key(sort: str, budget_range: bool = True):
    """The ranking: GPUs (``cost``: cost, then GPUs); among equal GPUs at the modelled budget, the fewest GPUs at
    the low end of its range (the count that holds over the range; ``budget_range`` False leaves it out), then
    cost, then the smaller replica, fewer stages, the simpler layout."""

    def key(r: FleetRow):
        cost = r.cost_usd_per_hour if r.cost_usd_per_hour is not None else float("inf")
        simple = (r.gpus_per_replica, r.pipeline_parallel_size, r.data_parallel_size, r.expert_parallel_size)
        low = (low_end_gpus(r),) if budget_range else ()
        return (cost, r.gpus, *low, *simple) if sort == "cost" else (r.gpus, *low, cost, *simple)

    return key


def _gpus_range(r: FleetRow) -> str:
    low = low_end_gpus(r)
    return f"{r.gpus:,}" if low == r.gpus else f"{r.gpus:,}–{low:,}" if low < math.inf else f"{r.gpus:,}+"


def why_best(best: FleetRow, rows: list[FleetRow], sort: str = "gpus") -> str:
    """One line on what made ``best`` the best of ``rows`` (one GPU's layouts): the runner-up it beats, and the
    figure that differs (KV budget per GPU, requests per replica, what limits the replicas); when its GPU count
    holding over the budget range broke a tie, the layout it beat that way."""
    others = [r for r in rows if r.fits and r is not best]
    if not others:
        return "the only layout that fits"
    runner = min(others, key=_key(sort))
    plain = [r for r in others if r.pipeline_parallel_size == 1 and r.layout == f"TP {r.tensor_parallel_size}"]
    ref = min(plain, key=_key(sort)) if plain and best.layout != f"TP {best.tensor_parallel_size}" else runner
    # the layout that would win without the budget range, when the range decided against it
    old = min([best, *others], key=_key(sort, budget_range=False))
    by_range = old is not best and old.gpus == best.gpus and low_end_gpus(old) > low_end_gpus(best)
    if by_range and ref.gpus == best.gpus:
        ref = old
    costs = (best.cost_usd_per_hour, ref.cost_usd_per_hour)
    priced = None not in costs
    cost_tie = f" and ${costs[0]:,.2f}/h" if priced and costs[0] == costs[1] else ""
    if sort == "cost" and priced and costs[0] < costs[1]:
        head = f"${costs[0]:,.2f}/h vs ${costs[1]:,.2f}/h for {ref.layout}"
    elif best.gpus < ref.gpus:
        head = f"{best.gpus:,} GPUs vs {ref.gpus:,} for {ref.layout}"
    elif low_end_gpus(best) < low_end_gpus(ref):
        head = (f"ties {ref.layout} at {best.gpus:,} GPUs{cost_tie} and holds them over the budget range "
                f"({_gpus_range(best)} vs {_gpus_range(ref)} GPUs)")  # fmt: skip
    elif best.gpus_per_replica < ref.gpus_per_replica:
        head = (f"ties {ref.layout} at {best.gpus:,} GPUs{cost_tie} with smaller replicas ({best.gpus_per_replica} vs "
                f"{ref.gpus_per_replica} GPUs)")  # fmt: skip
    elif best.pipeline_parallel_size < ref.pipeline_parallel_size:
        head = f"ties {ref.layout} at {best.gpus:,} GPUs{cost_tie} with fewer pipeline stages"
    else:
        head = f"ties {ref.layout} at {best.gpus:,} GPUs{cost_tie} with a simpler layout"
    parts = []
    gib = 1 << 30
    b_kv, r_kv = best.kv_budget_bytes_per_gpu, ref.kv_budget_bytes_per_gpu
    if abs(b_kv - r_kv) > 0.05 * max(r_kv, 1):
        parts.append(f"KV budget {b_kv / gib:,.1f} vs {r_kv / gib:,.1f} GiB per GPU")
    per_gpu_b = best.requests_per_replica / best.gpus_per_replica
    per_gpu_r = ref.requests_per_replica / ref.gpus_per_replica
    if abs(per_gpu_b - per_gpu_r) > 0.05 * max(per_gpu_r, 1e-9):
        parts.append(f"{per_gpu_b:,.1f} vs {per_gpu_r:,.1f} requests per GPU")
    if best.limit != ref.limit:
        parts.append(f"limited by {best.limit} vs {ref.limit}")
    line = head + (": " + ", ".join(parts) if parts else "")
    if by_range and ref is not old:
        line += (f"; it holds its {best.gpus:,} GPUs over the budget range, where {old.layout} (also {old.gpus:,}) "
                 f"needs {_gpus_range(old)}")  # fmt: skip
    return line


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
    pps: list[int] | None = None,
    decode_pool: bool = False,
) -> list[FleetRow]:
    """Every (GPU, layout), sorted by GPUs (or cost), feasible first (ties: :func:`_key`); the best per GPU is
    marked and says why.

    The layouts: ``tps`` × ``pps`` (defaults: every TP ≤ 8 the heads allow, PP in :data:`DEFAULT_PPS`) as
    the engine offers them (:meth:`~kvplan.engines.base.EngineRules.layouts`: with expert and attention data
    parallelism for MoE models), unless ``opts`` asks for data or expert parallelism itself (then only
    that, at each TP × PP). A default layout the heads or layers do not allow is skipped; one the engine
    refuses to load is a row with its reason.

    Args:
        tps: TP degrees to try; default: every TP ≤ 8 the model's heads allow.
        pps: PP degrees to try; default :data:`DEFAULT_PPS` (≤ the layers).
        prices: USD per GPU-hour by catalog id (overrides the catalog's default price).
        sort: ``gpus`` or ``cost``.
        slo: latency targets and speed settings (:class:`SLO`); None: memory and max_num_seqs only.
        decode_pool: plan a disaggregated decode pool (no TTFT targets, no prefill in its steps).

    A default layout that cannot be planned (UsageError) is left out, unless no layout can serve the workload:
    then it is a row with its reason, and when no layout at all could be planned the reason is raised (one
    line: the reason itself when every layout has it).

    Raises:
        UsageError: a TP the heads do not allow, ``sort`` unknown, a class longer than a given max_model_len,
            no layout that can be planned, as :func:`plan_layout`.
    """
    from kvplan import engines

    if sort not in ("gpus", "cost"):
        raise UsageError(f"--sort: {sort!r}; allowed: gpus, cost")
    serving_len(workload, opts)  # a class longer than a given max_model_len: one line, before any layout
    (slo or SLO()).check(workload)
    allowed = valid_tp_sizes(spec)
    for tp in tps or []:
        check_tp(spec, tp)
    tp_list = list(tps or [t for t in allowed if t <= max_default_tp])
    pp_list = list(pps or [p for p in DEFAULT_PPS if p <= spec.num_layers])
    eng = engines.get(opts.engine)
    asked = opts.data_parallel_size > 1 or opts.enable_expert_parallel or (opts.expert_parallel_size or 1) > 1
    if asked or opts.pp_layer_partition is not None:
        layouts = [dict(tensor_parallel_size=t, pipeline_parallel_size=p) for p in pp_list for t in tp_list]
    else:
        layouts = eng.layouts(spec, tp_list, pp_list)
    prices = prices or {}
    rows = []
    skipped: list[tuple[GPU, dict, str]] = []  # default layouts that could not be planned, and why
    for g in gpus:
        price = prices.get(g.id, g.price_usd_per_hour)
        for layout in layouts:
            try:
                rows.append(plan_layout(spec, g, workload, replace(opts, **layout), price, slo, ttft=not decode_pool))
            except UsageError as e:
                plain = set(layout) <= {"tensor_parallel_size", "pipeline_parallel_size"}
                if plain and (tps or pps or asked):
                    raise  # the layout the flags asked for
                skipped.append((g, layout, str(e)))  # a default layout the heads, experts or layers do not allow
    if skipped and not any(r.fits for r in rows):
        # nothing can serve the workload: say why for the layouts that could not be planned too
        if not rows:
            raise UsageError(_unplanned_reason(spec, opts, skipped))
        for g, layout, reason in skipped:
            price = prices.get(g.id, g.price_usd_per_hour)
            rows.append(_unplanned_row(spec, g, replace(opts, **layout), reason, price))
    key = _key(sort)
    best: dict[str, FleetRow] = {}
    for r in rows:
        if r.fits and (r.gpu not in best or key(r) < key(best[r.gpu])):
            best[r.gpu] = r
    by_gpu: dict[str, list[FleetRow]] = {}
    for r in rows:
        by_gpu.setdefault(r.gpu, []).append(r)
    rows = [replace(r, best_for_gpu=True, why=why_best(r, by_gpu[r.gpu], sort)) if best.get(r.gpu) is r else r
            for r in rows]  # fmt: skip
    return sorted(rows, key=lambda r: (not r.fits, key(r) if r.fits else (0,) * 6, r.gpu))


def _layout_name(spec: ModelSpec, opts: FitOptions) -> tuple[str, str, int, int, int]:
    """(name, engine flags, GPUs per replica, attention DP, EP) of ``opts``' layout, or its TP × PP when the
    engine refuses the layout itself."""
    from kvplan import engines

    try:
        par = engines.get(opts.engine).parallel(spec, opts)
        return par.name, par.flags, par.gpus, par.attn_dp, par.ep
    except UsageError:
        tp, pp = opts.tensor_parallel_size, opts.pipeline_parallel_size
        return f"TP {tp}" + (f" × PP {pp}" if pp > 1 else ""), "", tp * pp, 1, 1


def _unplanned_reason(spec: ModelSpec, opts: FitOptions, skipped: list[tuple[GPU, dict, str]]) -> str:
    """One line for default layouts none of which could be planned: the reason itself when every layout has
    the same one (a problem of the model or the flags, not of a layout), else each distinct reason once, with
    the layouts it applies to."""
    by_reason: dict[str, list[str]] = {}
    for _, layout, reason in skipped:
        name = _layout_name(spec, replace(opts, **layout))[0]
        names = by_reason.setdefault(reason, [])
        if name not in names:
            names.append(name)
    if len(by_reason) == 1:
        return next(iter(by_reason))
    parts = "; ".join(f"{', '.join(names)}: {reason}" for reason, names in by_reason.items())
    return f"no layout tried can be planned ({parts})"


def _unplanned_row(spec: ModelSpec, gpu: GPU, opts: FitOptions, reason: str, price) -> FleetRow:
    """A row for a default layout that could not be planned (shown only when no layout can serve)."""
    name, flags, replica_gpus, dp, ep = _layout_name(spec, opts)
    return FleetRow(gpu=gpu.id, gpu_name=gpu.name, tensor_parallel_size=opts.tensor_parallel_size,
                    pipeline_parallel_size=opts.pipeline_parallel_size, fits=False, reason=reason, replicas=0,
                    gpus=0, kv_budget_bytes_per_gpu=0, kv_bytes_needed_per_gpu=0, kv_utilization=0.0,
                    requests_per_replica=0, price_usd_per_hour=None if price is None else float(price),
                    cost_usd_per_hour=None, data_parallel_size=dp, expert_parallel_size=ep,
                    replica_gpus=replica_gpus, layout=name, parallel_flags=flags)  # fmt: skip


# --- disaggregated prefill / decode ------------------------------------------------------------------------

DEFAULT_KV_LINK_GBS = 50.0
"""KV transfer bandwidth per GPU between the pools, GB/s: one 400 Gb/s NIC (InfiniBand NDR, RoCE) per GPU."""


@dataclass(frozen=True)
class PrefillRow:
    """A prefill pool of one GPU type and layout.

    Attributes:
        gpu, layout, parallel_flags, tensor_parallel_size, pipeline_parallel_size, replica_gpus: as
            :class:`FleetRow`.
        fits, reason: whether it can serve the prompts (each fits, each meets its TTFT target with the KV
            transfer), and why not.
        replicas, gpus: replicas needed for the prompt throughput, and their GPUs.
        prompt_tokens_per_s_needed: prompt tokens per second the workload brings (Little's law on the decode
            plan: each class's requests finish at ``concurrency / (output tokens × its TPOT)``).
        prompt_tokens_per_s_per_replica: what one replica prefills per second (estimate: batches of
            max_num_batched_tokens).
        utilization: needed / (replicas × per replica).
        ttft_ms_estimate: the longest prompt's prefill alone plus its KV transfer (estimate).
        kv_transfer_ms: the longest prompt's KV transfer time (its fullest GPU's bytes over the link).
        price_usd_per_hour, cost_usd_per_hour: per GPU, and gpus × price.
    """

    gpu: str
    layout: str
    parallel_flags: str
    tensor_parallel_size: int
    pipeline_parallel_size: int
    replica_gpus: int
    fits: bool
    reason: str | None
    replicas: int = 0
    gpus: int = 0
    prompt_tokens_per_s_needed: float = 0.0
    prompt_tokens_per_s_per_replica: float = 0.0
    utilization: float = 0.0
    ttft_ms_estimate: float | None = None
    kv_transfer_ms: float | None = None
    price_usd_per_hour: float | None = None
    cost_usd_per_hour: float | None = None


@dataclass(frozen=True)
class KvTransfer:
    """The KV cache a request's prompt hands from the prefill pool to the decode pool.

    Attributes:
        klass: the request class.
        prompt_tokens: its prompt.
        bytes_per_request: the prompt's KV on every GPU of the prefill replica's attention group, summed
            (the engine's cache model at the decode layout: whole blocks; an MLA latent once per TP rank that
            holds it).
        bytes_per_gpu: the fullest GPU's share (what its link carries).
        transfer_ms: bytes_per_gpu / the link.
        requests_per_s: the class's requests per second (Little's law on the decode plan).
        gbs_total: bytes per second over all requests, GB/s (10⁹).
    """

    klass: str
    prompt_tokens: int
    bytes_per_request: int
    bytes_per_gpu: int
    transfer_ms: float
    requests_per_s: float
    gbs_total: float


@dataclass(frozen=True)
class DisaggregatedPlan:
    """``kvplan fleet --disaggregated``: the best prefill and decode pools, the KV between them, and the
    aggregated plan of the same workload for comparison.

    Attributes:
        prefill: every prefill row, best first.
        decode: every decode row (:class:`FleetRow`, sized without TTFT targets), best first.
        transfers: per class, the KV handed over (:class:`KvTransfer`).
        link_gbs: the KV link per GPU assumed, GB/s.
        aggregated: the best aggregated row (:func:`plan_fleet` with every target), or None.
        gpus: the best prefill pool's GPUs + the best decode pool's (0 when either does not fit).
        cost_usd_per_hour: their cost, where both have prices.
    """

    prefill: tuple[PrefillRow, ...]
    decode: tuple[FleetRow, ...]
    transfers: tuple[KvTransfer, ...]
    link_gbs: float
    aggregated: FleetRow | None
    gpus: int
    cost_usd_per_hour: float | None


def _decode_rate(row: FleetRow, workload: Workload, slo: SLO) -> list[float]:
    """Requests per second each class finishes on the decode plan ``row`` (Little's law): the fleet's
    estimated output tokens/s, shared by the classes as their requests (each gets one token a step), over
    the class's output tokens."""
    total = (row.output_tokens_per_s_per_gpu or 0.0) * row.gpus
    n = workload.concurrency
    return [total * c.concurrency / n / (slo.output(c) or 1) for c in workload.classes]


def _transfer(spec: ModelSpec, gpu: GPU, opts: FitOptions, decode: FleetRow, workload: Workload, slo: SLO,
              link_gbs: float, rates: list[float]) -> tuple[KvTransfer, ...]:  # fmt: skip
    """The KV each class's prompt hands over, from the engine's cache model at the decode layout."""
    layout = dict(
        tensor_parallel_size=decode.tensor_parallel_size,
        pipeline_parallel_size=decode.pipeline_parallel_size,
        data_parallel_size=decode.data_parallel_size,
    )
    o = replace(opts, **layout, max_model_len=serving_len(workload, opts), shared_prefix_tokens=0)
    fit, cache = fit_plan(spec, gpu, o)
    whole, whole_cache = fit_plan(spec, gpu, replace(o, pipeline_parallel_size=1, pp_layer_partition=None))
    attn_tp = fit.parallel.attn_tp
    out = []
    for c, rate in zip(workload.classes, rates, strict=True):
        p = slo.prompt(c)
        per_gpu = sum(cache.request_bytes(p))
        total = sum(whole_cache.request_bytes(p)) * attn_tp
        ms = per_gpu / (link_gbs * 1e9) * 1e3
        out.append(KvTransfer(c.name, p, total, per_gpu, ms, rate, total * rate / 1e9))
    return tuple(out)


def plan_prefill(spec: ModelSpec, gpu: GPU, workload: Workload, opts: FitOptions, slo: SLO, rates: list[float],
                 transfer_ms: list[float], price=None) -> PrefillRow:  # fmt: skip
    """A prefill pool of ``gpu`` in ``opts``' layout: replicas = ceil(prompt tokens per second needed /
    what one replica prefills per second), each class's prompt (alone, estimated) + its KV transfer within its
    TTFT target, and the longest prompt must fit a replica's KV pool.

    One replica prefills ``B = max(1, max_num_batched_tokens // P)`` prompts of P tokens per step (chunked
    prefill's token budget), so its rate for class c is ``B × P / step time`` (:func:`kvplan.perf.step_bound`
    with the estimate); the replicas needed are the sum over classes of ``rate_c × P_c / that``.

    Raises:
        UsageError: as :func:`kvplan.fit.plan_fit`.
    """
    from kvplan import perf

    longest = max(slo.prompt(c) for c in workload.classes)
    given = opts.max_model_len is not None
    o = replace(opts, max_model_len=opts.max_model_len if given else longest, shared_prefix_tokens=0)
    tp, pp = o.tensor_parallel_size, o.pipeline_parallel_size
    try:
        fit, _ = fit_plan(spec, gpu, o)
    except LoadRefused as e:
        from kvplan import engines

        par = engines.get(o.engine).parallel(spec, o)
        return PrefillRow(gpu.id, par.name, par.flags, tp, pp, par.gpus, False, str(e))
    par = fit.parallel
    row = dict(gpu=gpu.id, layout=par.name, parallel_flags=par.flags, tensor_parallel_size=tp,
               pipeline_parallel_size=pp, replica_gpus=par.gpus)  # fmt: skip
    price_f = None if price is None else float(price)
    if not fit.fits:
        reason = (f"--max-model-len {o.max_model_len:,}: {does_not_fit_detail(fit)}" if given else
                  f"a {longest:,}-token prompt does not fit the KV pool")  # fmt: skip
        return PrefillRow(**row, fits=False, reason=reason, price_usd_per_hour=price_f)
    try:
        hw = perf.hardware(gpu, fit.weights_dtype, eff=perf.estimate_efficiency(fit.engine, gpu, slo.mbu, slo.mfu))
    except UsageError as e:
        return PrefillRow(**row, fits=False, reason=f"no speed figures: {e}", price_usd_per_hour=price_f)
    busy = 0.0  # replica-seconds of prefill per second
    need = 0.0
    worst_ttft = 0.0
    worst_transfer = 0.0
    for c, rate, xfer in zip(workload.classes, rates, transfer_ms, strict=True):
        p = slo.prompt(c)
        alone = perf.step_bound(spec, fit, hw, [(1, p)], prefill=True).seconds * 1e3 + xfer
        target = slo.ttft(c)
        if target is not None and alone > target:
            reason = (f"TTFT estimate {alone:,.1f} ms (prefill + KV transfer {xfer:,.1f} ms) for a {p:,}-token prompt "
                      f"of class {c.name} exceeds its target {target:g} ms")  # fmt: skip
            return PrefillRow(**row, fits=False, price_usd_per_hour=price_f, reason=reason)
        if alone > worst_ttft:
            worst_ttft, worst_transfer = alone, xfer
        batch = max(1, fit.max_num_batched_tokens // p)
        step = perf.step_bound(spec, fit, hw, [(batch, p)], prefill=True).seconds
        busy += rate * step / batch
        need += rate * p
    replicas = max(1, math.ceil(busy - 1e-12))
    gpus = replicas * par.gpus
    cost = None if price is None else float(exact_usd(price) * gpus)
    per_replica = need / busy if busy else 0.0
    return PrefillRow(**row, fits=True, reason=None, replicas=replicas, gpus=gpus, prompt_tokens_per_s_needed=need,
                      prompt_tokens_per_s_per_replica=per_replica, utilization=busy / replicas,
                      ttft_ms_estimate=worst_ttft, kv_transfer_ms=worst_transfer, price_usd_per_hour=price_f,
                      cost_usd_per_hour=cost)  # fmt: skip


def plan_disaggregated(
    spec: ModelSpec,
    workload: Workload,
    gpus: list[GPU],
    opts: FitOptions,
    tps: list[int] | None = None,
    prices: dict[str, Decimal | float] | None = None,
    sort: str = "gpus",
    slo: SLO | None = None,
    pps: list[int] | None = None,
    link_gbs: float = DEFAULT_KV_LINK_GBS,
) -> DisaggregatedPlan:
    """Prefill and decode on separate pools (vLLM's and SGLang's disaggregated serving), each sized on its
    own, compared with the aggregated plan of the same workload.

    The decode pool holds every request for its whole decode (tokens = prompt + output), sized by KV
    capacity, TPOT targets and max_num_seqs (:func:`plan_fleet` with the TTFT targets left to the prefill
    pool). The prefill pool is sized by the prompt tokens per second the decode plan implies (Little's law)
    and each class's TTFT target, which also pays the prompt's KV transfer (:class:`KvTransfer`: the
    engine's cache bytes of the prompt, over ``link_gbs`` per GPU). Queueing is not modelled: a pool at
    utilization 1 has no headroom.

    Raises:
        UsageError: as :func:`plan_fleet`; ``link_gbs`` not a positive number.
    """
    if isinstance(link_gbs, bool) or not isinstance(link_gbs, (int, float)) or not 0 < link_gbs < 1e6:
        raise UsageError(f"--kv-link-gbs: {link_gbs!r} must be a number of GB/s > 0")
    slo = slo or SLO()
    slo.check(workload)
    for c in workload.classes:
        if slo.output(c) is None:
            raise UsageError(
                f"--disaggregated: class {c.name} has no prompt/output split; give its prompt_tokens and output_tokens "
                "(or --prompt-len): the prefill pool is sized by prompts, the decode pool by outputs"
            )
    key = _key(sort)
    decode_slo = replace(slo, ttft_ms=None)
    decode_wl = replace(workload, classes=tuple(replace(c, ttft_ms=None) for c in workload.classes))
    decode = plan_fleet(spec, decode_wl, gpus, opts, tps, prices, sort, slo=decode_slo, pps=pps, decode_pool=True)
    aggregated = plan_fleet(spec, workload, gpus, opts, tps, prices, sort, slo=slo, pps=pps)
    best_decode = next((r for r in decode if r.fits), None)
    best_agg = next((r for r in aggregated if r.fits), None)
    if best_decode is None:
        return DisaggregatedPlan((), tuple(decode), (), link_gbs, best_agg, 0, None)
    by_id = {g.id: g for g in gpus}
    rates = _decode_rate(best_decode, workload, slo)
    transfers = _transfer(spec, by_id[best_decode.gpu], opts, best_decode, workload, slo, link_gbs, rates)
    xfer_ms = [t.transfer_ms for t in transfers]
    from kvplan import engines

    eng = engines.get(opts.engine)
    tp_list = list(tps or [t for t in valid_tp_sizes(spec) if t <= 8])
    pp_list = list(pps or [p for p in DEFAULT_PPS if p <= spec.num_layers])
    prices = prices or {}
    prefill = []
    for g in gpus:
        price = prices.get(g.id, g.price_usd_per_hour)
        for layout in eng.layouts(spec, tp_list, pp_list):
            o = replace(opts, **layout)
            try:
                prefill.append(plan_prefill(spec, g, workload, o, slo, rates, xfer_ms, price))
            except UsageError as e:  # a layout that cannot be planned: a row with the reason (the pool's reason
                name, flags, replica_gpus, _, _ = _layout_name(spec, o)  # when no layout can prefill)
                prefill.append(PrefillRow(g.id, name, flags, o.tensor_parallel_size, o.pipeline_parallel_size,
                                          replica_gpus, False, str(e)))  # fmt: skip

    def pkey(r: PrefillRow):
        cost = r.cost_usd_per_hour if r.cost_usd_per_hour is not None else float("inf")
        return (cost, r.gpus, r.replica_gpus) if sort == "cost" else (r.gpus, cost, r.replica_gpus)

    prefill.sort(key=lambda r: (not r.fits, pkey(r) if r.fits else (0, 0, 0), r.gpu))
    best_pre = next((r for r in prefill if r.fits), None)
    total = 0 if best_pre is None else best_pre.gpus + best_decode.gpus
    cost = None
    if best_pre is not None and best_pre.cost_usd_per_hour is not None and best_decode.cost_usd_per_hour is not None:
        cost = best_pre.cost_usd_per_hour + best_decode.cost_usd_per_hour
    del key
    return DisaggregatedPlan(tuple(prefill), tuple(decode), transfers, float(link_gbs), best_agg, total, cost)


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
