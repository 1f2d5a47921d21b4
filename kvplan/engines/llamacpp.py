"""llama.cpp's context, cache and memory rules as ``kvplan fit --engine llamacpp`` applies them.

Every rule below is taken from llama.cpp's own code at commit 0c1e57098 (2026-10-01, ggml 0.25.3, vendored by
llama-cpp-python 0.3.36; file:line below are at that commit) and checked against what llama.cpp allocated
there: ``tests/fixtures/llamacpp_golden.json`` (2,818 contexts created by llama.cpp itself on CPU,
``scripts/llamacpp_golden.py``; ``tests/test_llamacpp_golden.py`` holds kvplan to every row). The details
are in ``docs/engines-llamacpp.md``.

A llama.cpp server is a fixed allocation, not a pool requests fill: ``-c`` cells of context for ``-np``
slots, allocated at start-up. So a plan is one server configuration (:class:`Config`):

- the tool's defaults (:func:`resolve_config`): llama-server with no ``-np`` runs 4 slots sharing one
  unified cache (tools/server/server.cpp:156-161); ``-np N`` keeps one stream per slot unless
  ``--kv-unified``; llama-cli has 1 slot. ``-c`` is the context of all slots together; with no ``-c``,
  ``--max-model-len S`` (kvplan's tokens per request) asks for ``-c = S × slots``; with neither, the model's
  context (× streams), lowered by llama.cpp's ``-fit`` (on by default) to what fits with 1 GiB to spare
  (common/fit.cpp:266-436, :func:`fit_context`).
- the context sizes (src/llama-context.cpp:133, :246-305): ``n_ctx`` padded to 256; split streams get
  ``pad(n_ctx / slots, 256)`` cells each; ``n_ubatch = min(n_ubatch, n_batch, n_ctx)``.
- the caches (:func:`memory`; src/llama-model.cpp create_memory :2352-2858, src/llama-kv-cache.cpp,
  src/llama-kv-cache-iswa.cpp, src/llama-memory-recurrent.cpp): K and V of every attention layer for
  ``n_ctx_seq`` cells × streams, a second cache of ``pad(min(n_ctx_seq, n_swa × (unified ? slots : 1) +
  n_ubatch), 256)`` cells for sliding-window layers (``--swa-full``: ``n_ctx_seq``), V rows widened to the
  widest layer's when flash attention is off (V is stored transposed), one latent K row and no V for MLA,
  and ``max(1, slots)`` f32 recurrent states for Mamba / hybrid layers.
- the refusals (:func:`refusal`, src/llama-context.cpp:3835-3871): K ≠ V types on MLA, a quantized V
  without flash attention, a quantized K/V whose block does not divide a head; and llama.cpp's abort
  (ggml.c:1797) on a quantized K row that is not whole blocks with flash attention off.

Requests are slots: a plan's pools are the slots (all of them when the whole allocation fits the KV
budget, none otherwise) and the context cells (unified: the ``n_ctx`` cells all slots share; split: each
slot's own ``n_ctx_seq``); a request takes a slot and, unified, its tokens in cells; no request is longer
than llama-server's slot context ``min(n_ctx_seq, n_ctx_train)`` (tools/server/server-context.cpp:4008-4016).

The budget: llama.cpp has no memory fraction. KV budget = GPU memory − model buffer (the GGUF's tensors
less the input layer llama.cpp keeps on the host, exact) − compute buffer (modelled: :func:`compute_buffer`,
stated with the error measured against llama.cpp's own figures as a range) − overhead (the CUDA context).

Pure Python: no numpy or torch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from kvplan.calc import cdiv, kv_dtype_label, kv_heads_per_rank, largest_true
from kvplan.dtypes import IQ4_NL, KVDtype, get_kv_dtype
from kvplan.engines import parse_version
from kvplan.engines.base import PY, Budget, CachePlan, EngineRules, Settings, Term, count_requests, exact_term
from kvplan.errors import UsageError
from kvplan.options import Engine, FitOptions, check_int, stage_layers
from kvplan.specs import KV_HEAD_KINDS, ModelSpec
from kvplan.units import GIB, MIB

LLAMA_CPP_COMMIT = "0c1e57098bba43ac29e6e3b677cdceebdd22334f"
RULES_VERSION = ""  # no numbered rule set
DESCRIPTION = (
    "llama.cpp 0c1e57098 (llama-server/llama-cli defaults, llama-context, llama-kv-cache(-iswa), "
    "llama-memory-recurrent)"
)


@dataclass(frozen=True)
class LlamacppRules:
    """llama.cpp's one rule set (no version number)."""

    version: str
    description: str


RULE_SETS = (LlamacppRules(RULES_VERSION, DESCRIPTION),)

PAD = 256  # n_ctx and the SWA cache are padded to 256 cells (src/llama-context.cpp:290, llama-kv-cache-iswa.cpp:73)
DEFAULT_N_BATCH = 2048  # common/common.h:453
DEFAULT_N_UBATCH = 512  # common/common.h:454
SERVER_AUTO_SLOTS = 4  # tools/server/server.cpp:156-161: no -np -> 4 slots, kv_unified
MAX_SEQ = 256  # LLAMA_MAX_SEQ (src/llama-cparams.h:8)
FIT_MARGIN = GIB  # --fit-target: 1 GiB left free per device (common/common.h:483)
FIT_MIN_CTX = 4096  # --fit-ctx: the fit never goes below 4096 per stream (common/common.h:480)
TOOLS = {"server": "llama-server", "cli": "llama-cli"}
FLASH_ATTN = ("on", "off", "auto")

# llama.cpp's -ctk / -ctv values (common/arg.cpp:304-314 kv_cache_types) -> kvplan's dtypes
CACHE_TYPES: dict[str, KVDtype] = {
    "f32": get_kv_dtype("fp32"),
    "f16": get_kv_dtype("fp16"),
    "bf16": get_kv_dtype("bf16"),
    "q8_0": get_kv_dtype("q8_0"),
    "q4_0": get_kv_dtype("q4_0"),
    "q4_1": get_kv_dtype("q4_1"),
    "iq4_nl": IQ4_NL,
    "q5_0": get_kv_dtype("q5_0"),
    "q5_1": get_kv_dtype("q5_1"),
}
GGML_NAME = {d.name: n for n, d in CACHE_TYPES.items()}  # kvplan name -> ggml name
F32_BYTES = 4  # recurrent states are f32 (llama_memory_recurrent(GGML_TYPE_F32, GGML_TYPE_F32), llama-model.cpp:2669)


def resolve_rules(version: str | None) -> LlamacppRules:
    """The rule set for a llama.cpp build (``b5000``, ``5000``) or an ollama version (``0.6.8``): the one set.

    Raises:
        UsageError: not a build or version number.
    """
    if version is None or str(version).strip().lower() in ("", "latest", "current"):
        return RULE_SETS[0]
    text = str(version).strip().lower()
    if re.fullmatch(r"b?\d{1,7}", text) is None and parse_version(text) is None:
        raise UsageError(
            f"--engine-version: {version!r} is not a llama.cpp build (e.g. b5000) or ollama version (e.g. 0.6.8); "
            "llama.cpp rule sets: one (llama-kv-cache)"
        )
    return RULE_SETS[0]


def cache_type(name: str, flag: str) -> KVDtype:
    """A llama.cpp cache type (``f16``, ``q8_0``, ``iq4_nl`` ...; kvplan's ``fp16``, ``bf16`` ... too).

    Raises:
        UsageError: a type llama.cpp's ``-ctk``/``-ctv`` do not take (fp8, nvfp4, int8 ...).
    """
    key = str(name).strip().lower()
    if key in CACHE_TYPES:
        return CACHE_TYPES[key]
    try:
        d = get_kv_dtype(key, what=flag)
    except UsageError:
        d = None
    if d is not None and d.name in GGML_NAME:
        return d
    raise UsageError(
        f"{flag}: llama.cpp has no {name!r} cache type; allowed: {', '.join(CACHE_TYPES)} (common/arg.cpp)"
    )


def _is_quantized(d: KVDtype) -> bool:
    return d.block_elems > 1


# --- 1. the configuration ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Config:
    """One llama.cpp context, its settings resolved as llama.cpp resolves them.

    Attributes:
        tool: ``server`` or ``cli``.
        n_parallel: slots (``n_seq_max``); parallel_auto: ``-np`` not given (llama-server: 4, unified).
        kv_unified: one cache for all slots; n_stream: 1 when unified, else the slots.
        ctx_asked: ``-c`` as given (None: not given); ctx_from: where ``n_ctx`` came from.
        n_ctx: total cells (padded); n_ctx_seq: cells of one stream; n_ctx_train: the model's context.
        slot_ctx: the longest request a slot takes (llama-server ``n_ctx_slot()``).
        n_batch, n_ubatch: after llama.cpp's cuts; ubatch_asked: ``-ub`` as given.
        flash_attn_asked: ``on``/``off``/``auto``; flash_attn: resolved (auto: on).
        type_k, type_v: cache types; swa_full: ``--swa-full``; notes: what the user should know.
    """

    tool: str
    n_parallel: int
    parallel_auto: bool
    kv_unified: bool
    ctx_asked: int | None
    ctx_from: str
    n_ctx: int
    n_ctx_seq: int
    n_ctx_train: int
    slot_ctx: int
    n_batch: int
    n_ubatch: int
    flash_attn_asked: str
    flash_attn: bool
    type_k: KVDtype
    type_v: KVDtype
    swa_full: bool
    notes: tuple[str, ...] = ()

    @property
    def n_stream(self) -> int:
        return 1 if self.kv_unified else self.n_parallel


def context_sizes(n_ctx_asked: int, n_ctx_train: int, n_seq: int, unified: bool, n_batch: int, n_ubatch: int):
    """(n_ctx, n_ctx_seq, n_batch, n_ubatch) as ``llama_context`` sets them (src/llama-context.cpp):
    ``n_ctx = params.n_ctx or n_ctx_train`` (:133); ``n_batch = min(n_ctx, n_batch)`` (:246, the value asked,
    before padding); ``n_ubatch = min(n_batch, n_ubatch)`` (:248); ``n_ctx = pad(n_ctx, 256)`` (:290); split
    streams: ``n_ctx_seq = pad(n_ctx // n_seq, 256)`` and ``n_ctx = n_ctx_seq × n_seq`` (:295-305, which can
    round up: 1000 cells for 3 slots are 3 × 512)."""
    n_ctx = n_ctx_asked or n_ctx_train
    nb = min(n_ctx, n_batch)
    nub = min(nb, n_ubatch or n_batch)
    n_ctx = cdiv(n_ctx, PAD) * PAD
    if unified:
        return n_ctx, n_ctx, nb, nub
    seq = cdiv(n_ctx // n_seq, PAD) * PAD
    return seq * n_seq, seq, nb, nub


def resolve_config(spec: ModelSpec, opts: FitOptions, kv: KVDtype, n_ctx_fit: int | None = None) -> Config:
    """The :class:`Config` of ``opts`` for ``spec`` (``kv``: ``--kv-dtype``, the K and V type unless ``-ctk`` /
    ``-ctv`` say otherwise); ``n_ctx_fit``: the ``-fit`` context, when the engine found one.

    Tool defaults: common/common.h:452-590 (n_ctx 0, n_batch 2048, n_ubatch 512, n_parallel 1, flash attention
    auto, swa_full and kv_unified false, f16 caches); llama-server: ``n_parallel = -1`` (common/arg.cpp:1403)
    becomes 4 slots with ``kv_unified = true`` (tools/server/server.cpp:156-161, whatever ``--no-kv-unified``
    says); llama-cli: 1 slot, no ``--kv-unified`` (common/arg.cpp:1724-1730 does not offer it to the CLI).

    Raises:
        UsageError: a bad ``-c``, ``-np``, ``-b``, ``-ub``, ``-fa``, ``--llama-tool`` or cache type.
    """
    tool = (opts.llama_tool or "server").strip().lower().removeprefix("llama-")
    if tool not in TOOLS:
        raise UsageError(f"--llama-tool: {opts.llama_tool!r}; allowed: server (llama-server), cli (llama-cli)")
    check_int("--ctx-size", opts.ctx_size, 0)
    check_int("--parallel", opts.n_parallel, 1)
    check_int("--batch-size", opts.n_batch, 1)
    check_int("--ubatch-size", opts.max_num_batched_tokens, 1)
    fa_asked = "auto" if opts.flash_attn is None else str(opts.flash_attn).strip().lower()
    fa_asked = {"1": "on", "true": "on", "enabled": "on", "0": "off", "false": "off", "disabled": "off"}.get(
        fa_asked, fa_asked
    )
    if fa_asked not in FLASH_ATTN:
        raise UsageError(f"--flash-attn: {opts.flash_attn!r}; allowed: on, off, auto")
    type_k = cache_type(opts.cache_type_k, "--cache-type-k") if opts.cache_type_k else cache_type(kv.name, "--kv-dtype")
    type_v = cache_type(opts.cache_type_v, "--cache-type-v") if opts.cache_type_v else cache_type(kv.name, "--kv-dtype")
    notes: list[str] = []
    auto = opts.n_parallel is None
    if tool == "cli":
        if opts.kv_unified:
            raise UsageError("--kv-unified: llama-cli does not take it (common/arg.cpp:1724-1730); it has one slot")
        n_seq, unified = (1 if auto else opts.n_parallel), False
    elif auto:
        n_seq, unified = SERVER_AUTO_SLOTS, True
        if opts.kv_unified is False:
            notes.append("--no-kv-unified has no effect without -np: llama-server's automatic 4 slots are unified "
                         "(tools/server/server.cpp:156-161)")  # fmt: skip
    else:
        n_seq, unified = opts.n_parallel, bool(opts.kv_unified)
    if n_seq > MAX_SEQ:
        raise UsageError(f"--parallel: {n_seq} slots; llama.cpp takes at most {MAX_SEQ} (LLAMA_MAX_SEQ)")
    n_streams = 1 if unified else n_seq
    train = spec.max_model_len
    if opts.ctx_size is not None:
        # -c 0: the model's context (x streams under -fit, which then keeps it: common/arg.cpp:1643-1646)
        asked, source = (opts.ctx_size, "-c") if opts.ctx_size else (train * n_streams, "-c 0: the model's context")
    elif opts.max_model_len is not None:
        asked, source = opts.max_model_len * n_seq, "--max-model-len × slots"
    elif n_ctx_fit is not None:
        asked = n_ctx_fit
        source = "the model's context (kept by -fit)" if n_ctx_fit == train * n_streams else "-fit"
    else:
        asked, source = train * n_streams, "the model's context"
    n_batch = DEFAULT_N_BATCH if opts.n_batch is None else opts.n_batch
    n_ubatch = DEFAULT_N_UBATCH if opts.max_num_batched_tokens is None else opts.max_num_batched_tokens
    n_ctx, n_ctx_seq, nb, nub = context_sizes(asked, train, n_seq, unified, n_batch, n_ubatch)
    if nub < n_ubatch:
        notes.append(f"n_ubatch {n_ubatch:,} cut to {nub:,} = min(-b, n_ctx) (src/llama-context.cpp:246-248)")
    if not unified and n_ctx != cdiv(asked, PAD) * PAD:
        notes.append(f"n_ctx {asked:,} for {n_seq} slots becomes {n_seq} × {n_ctx_seq:,} = {n_ctx:,} cells "
                     "(each slot padded to 256, src/llama-context.cpp:295-305)")  # fmt: skip
    return Config(
        tool=tool,
        n_parallel=n_seq,
        parallel_auto=auto and tool == "server",
        kv_unified=unified,
        ctx_asked=opts.ctx_size,
        ctx_from=source,
        n_ctx=n_ctx,
        n_ctx_seq=n_ctx_seq,
        n_ctx_train=train,
        slot_ctx=min(n_ctx_seq, train),
        n_batch=nb,
        n_ubatch=nub,
        flash_attn_asked=fa_asked,
        flash_attn=fa_asked != "off",  # auto: on (the probe of src/llama-context.cpp:557-559 turns it on)
        type_k=type_k,
        type_v=type_v,
        swa_full=bool(opts.swa_full),
        notes=tuple(notes),
    )


# --- 2. the caches -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CacheSize:
    """One ``llama_kv_cache``: ``cells`` per stream, ``n_stream`` streams, its layers and bytes."""

    name: str
    cells: int
    n_stream: int
    layers: int
    k_bytes: int
    v_bytes: int

    @property
    def bytes(self) -> int:
        return self.k_bytes + self.v_bytes


@dataclass(frozen=True)
class RecurrentSize:
    """``llama_memory_recurrent``: ``cells`` f32 states of r and s rows in ``layers`` layers."""

    cells: int
    layers: int
    r_bytes: int
    s_bytes: int

    @property
    def bytes(self) -> int:
        return self.r_bytes + self.s_bytes


@dataclass(frozen=True)
class Memory:
    """Every cache buffer of one context on one GPU."""

    caches: tuple[CacheSize, ...]
    recurrent: RecurrentSize | None
    v_trans: bool

    @property
    def bytes(self) -> int:
        return sum(c.bytes for c in self.caches) + (self.recurrent.bytes if self.recurrent else 0)


@dataclass(frozen=True)
class _Row:
    swa: bool
    k: int  # K elements per cell
    v: int | None  # V elements per cell (None: MLA, no V tensor)
    head_k: int
    head_v: int


def _layer_rows(spec: ModelSpec, tp: int) -> list[_Row | None]:
    """Per layer: its K/V row widths (elements) when it has a KV cache of its own, else None
    (llama-kv-cache.cpp:165-234: ``n_embd_k_gqa = n_head_kv × n_embd_head_k``, the ``_swa`` head dims on
    sliding layers; MLA: one row of ``kv_lora_rank + rope``, src/llama-kv-cache.cpp:231)."""
    return spec.memo(("llamacpp.layer_rows", tp), lambda: _rows_of(spec, tp))


def _rows_of(spec: ModelSpec, tp: int) -> list[_Row | None]:
    rows: list[_Row | None] = []
    for layer in spec.layers:
        if layer.kind in KV_HEAD_KINDS:
            h = kv_heads_per_rank(layer.num_kv_heads, tp)
            rows.append(_Row(layer.kind != "full", h * layer.head_dim, h * layer.v_head_dim, layer.head_dim,
                             layer.v_head_dim))  # fmt: skip
        elif layer.kind == "mla":
            assert layer.mla is not None
            latent = layer.mla.latent_dim
            rows.append(_Row(False, latent, None, latent, layer.mla.kv_lora_rank))
        else:
            rows.append(None)
    return rows


def _v_max(spec: ModelSpec, tp: int) -> int:
    """``n_embd_v_gqa_max()``: the widest V row of all layers (src/llama-hparams.cpp:199-206), shared layers
    included (they have heads too)."""

    def compute() -> int:
        widths = [kv_heads_per_rank(la.num_kv_heads, tp) * la.v_head_dim for la in spec.layers
                  if la.kind in KV_HEAD_KINDS or (la.kind == "shared" and la.num_kv_heads)]  # fmt: skip
        return max(widths, default=0)

    return spec.memo(("llamacpp.v_max", tp), compute)


def _states(layer, tp: int) -> tuple[int, int]:
    """(r, s) elements of one recurrent layer's state: the conv and the recurrent state
    (src/llama-hparams.cpp:208-258: ``n_embd_r``, ``n_embd_s``; kvplan's StateConfig shapes agree at TP 1)."""
    if layer.state is None:
        return 0, 0
    r = s = 0
    for t in layer.state.tensors("fp32", tp):
        if t.name == "conv":
            r += t.elements
        else:
            s += t.elements
    return r, s


def swa_window(spec: ModelSpec) -> int:
    """``hparams.n_swa``: the sliding window (or chunk) of the model's windowed layers, 0 when none."""
    return max((la.window or spec.window_of(la.kind) or 0 for la in spec.layers if la.kind in ("sliding", "chunked")),
               default=0)  # fmt: skip


def memory(spec: ModelSpec, cfg: Config, tp: int = 1, layers: range | None = None) -> Memory:
    """The cache buffers llama.cpp allocates for ``cfg`` on the GPU holding ``layers`` (default: all), exact.

    src/llama-model.cpp create_memory (:2352): a pure recurrent model gets ``llama_memory_recurrent`` of
    ``max(1, n_seq_max)`` cells (:2669-2677); a hybrid gets an attention ``llama_kv_cache`` of ``n_ctx_seq``
    cells plus that recurrent memory (:2679-2774); a model with sliding-window layers gets
    ``llama_kv_cache_iswa`` (:2822-2836): a base cache of ``n_ctx_seq`` cells and a SWA cache of
    ``pad(min(n_ctx_seq, n_swa × (unified ? n_seq : 1) + n_ubatch), 256)`` cells (``--swa-full``:
    ``n_ctx_seq``; src/llama-kv-cache-iswa.cpp:69-81); otherwise one ``llama_kv_cache`` of ``n_ctx_seq`` cells
    (:2839-2858). Every cache has ``n_stream`` streams (1 unified, else the slots; llama-kv-cache.cpp:84).
    Tensor bytes: ``row_size(type, elements) × cells × streams`` (ggml.c:1298-1344). Without flash
    attention V is transposed and every V row is the widest one (llama-kv-cache.cpp:158-161, :210).
    """
    chosen = range(spec.num_layers) if layers is None else layers
    v_trans = not cfg.flash_attn
    agg = _aggregates(spec, tp, chosen.start, chosen.stop)
    recurrent = None
    if agg["hybrid"]:
        cells = max(1, cfg.n_parallel)
        n_state, er, es = agg["states"]
        recurrent = RecurrentSize(cells, n_state, F32_BYTES * er * cells, F32_BYTES * es * cells)
    if not agg["attention"]:  # pure recurrent
        return Memory((), recurrent, v_trans)
    stream, base_cells = cfg.n_stream, cfg.n_ctx_seq
    sums = _row_bytes(spec, tp, chosen.start, chosen.stop, cfg.type_k, cfg.type_v, v_trans)

    def cache(name: str, cells: int, which: str) -> CacheSize:
        n, k_row, v_row = sums[which]  # bytes of one cell's K and V rows, summed over the layers
        return CacheSize(name, cells, stream, n, k_row * cells * stream, v_row * cells * stream)

    if agg["has_swa"]:
        swa_cells = base_cells
        if not cfg.swa_full:
            windows = agg["n_swa"] * (cfg.n_parallel if cfg.kv_unified else 1)
            swa_cells = cdiv(min(base_cells, windows + cfg.n_ubatch), PAD) * PAD
        caches = (cache("base", base_cells, "base"), cache("swa", swa_cells, "swa"))
    else:
        caches = (cache("attn" if agg["hybrid"] else "kv", base_cells, "all"),)
    return Memory(caches, recurrent, v_trans)


def _aggregates(spec: ModelSpec, tp: int, start: int, stop: int) -> dict:
    """What :func:`memory` reads of the layers ``start:stop`` at ``tp``, computed once per spec (the advice
    of a model that does not fit, and the ``-fit`` and largest ``-c`` searches, call :func:`memory` many
    times with the same layers): whether any layer has attention, a sliding window (and ``n_swa``) or a
    state, and the state layers' count and conv / recurrent elements per cell."""

    def compute() -> dict:
        rows = _layer_rows(spec, tp)
        state_layers = [spec.layers[i] for i in range(start, stop) if spec.layers[i].state is not None]
        er = es = 0
        for la in state_layers:
            r, s = _states(la, tp)
            er, es = er + r, es + s
        return dict(
            attention=any(r is not None for r in rows),
            has_swa=any(r is not None and r.swa for r in rows),
            n_swa=swa_window(spec),
            hybrid=any(la.state is not None for la in spec.layers),
            states=(len(state_layers), er, es),
        )

    return spec.memo(("llamacpp.aggregates", tp, start, stop), compute)


def _row_bytes(spec: ModelSpec, tp: int, start: int, stop: int, type_k: KVDtype, type_v: KVDtype, v_trans: bool):
    """``{"all" | "base" | "swa": (layers, K bytes of one cell, V bytes of one cell)}`` of the layers
    ``start:stop`` that have a cache: each row's ``ggml_row_size`` summed (without flash attention every V row
    is the widest, :func:`_v_max`); a cache's bytes are these × cells × streams. Computed once per spec and
    key."""

    def compute() -> dict:
        rows = _layer_rows(spec, tp)
        vmax = _v_max(spec, tp)
        mine = [rows[i] for i in range(start, stop) if rows[i] is not None]

        def sums(picked: list[_Row]) -> tuple[int, int, int]:
            k = sum(type_k.bytes_for(r.k) for r in picked)
            v = sum(type_v.bytes_for(vmax if v_trans else r.v) for r in picked if r.v is not None)
            return len(picked), k, v

        return dict(all=sums(mine), base=sums([r for r in mine if not r.swa]), swa=sums([r for r in mine if r.swa]))

    return spec.memo(("llamacpp.row_bytes", tp, start, stop, type_k, type_v, v_trans), compute)


def _row_widths(spec: ModelSpec) -> dict:
    """What :func:`refusal` reads of the cache rows at TP 1, once per spec: whether any layer has a cache and
    any is MLA, and the distinct K head dims, V head dims and K row widths in layer order (the first that a
    block size does not divide is the one named)."""

    def compute() -> dict:
        rows = [r for r in _layer_rows(spec, 1) if r is not None]
        return dict(
            any=bool(rows),
            mla=any(r.v is None for r in rows),
            head_k=tuple(dict.fromkeys(r.head_k for r in rows)),
            head_v=tuple(dict.fromkeys(r.head_v for r in rows)),
            k=tuple(dict.fromkeys(r.k for r in rows)),
        )

    return spec.memo(("llamacpp.row_widths",), compute)


def _unplanned_layer(spec: ModelSpec) -> str | None:
    """The refusal of the first layer llama.cpp has no cache for (in layer order), once per spec; None."""

    def compute() -> str | None:
        for la in spec.layers:
            if la.kind == "cross":
                return f"{spec.name}: llama.cpp runs no cross-attention layers (its mllama support is gone)"
            if la.kind == "mla" and la.mla is not None and la.mla.index_head_dim:
                return f"{spec.name}: kvplan does not know llama.cpp's cache for DeepSeek-V3.2's indexer keys"
            if la.kind == "linear_attention":
                return f"{spec.name}: kvplan does not know llama.cpp's state for lightning-attention layers"
        return None

    return spec.memo(("llamacpp.unplanned_layer",), compute)


def refusal(spec: ModelSpec, cfg: Config) -> str | None:
    """Why llama.cpp refuses (or aborts on) ``cfg`` for ``spec``, one line naming the flag; None when it
    takes it. In llama.cpp's order (src/llama-context.cpp ``llama_init_from_model``):

    - MLA with K type ≠ V type: "model does not support different K and V cache types" (:3835);
    - a quantized V without flash attention: ``auto`` turns it on, ``off`` is refused (:3840-3847);
    - flash attention on/auto and a quantized K (V) whose block does not divide ``n_embd_head_k`` (``_v``)
      of a layer (:3851-3871);
    - flash attention off and a quantized K row (heads × head dim) that is not whole blocks: the process
      aborts, ``GGML_ASSERT(... <= ggml_nbytes(view_src))`` (ggml/src/ggml.c:1797).
    """
    rows = _row_widths(spec)
    tk, tv = GGML_NAME[cfg.type_k.name], GGML_NAME[cfg.type_v.name]
    if rows["mla"] and cfg.type_k.name != cfg.type_v.name:
        return (f"-ctk {tk} -ctv {tv}: llama.cpp refuses different K and V cache types for an MLA model "
                "(src/llama-context.cpp:3835); give the same type to both")  # fmt: skip
    if _is_quantized(cfg.type_v) and cfg.flash_attn_asked == "off":
        return (f"-ctv {tv}: llama.cpp refuses a quantized V cache without flash attention (src/llama-context.cpp"
                ":3845-3847: 'quantized V cache requires flash_attn'); use -fa on or auto")  # fmt: skip
    if not rows["any"]:
        return None
    if cfg.flash_attn:
        for flag, t, dims in (("-ctk", cfg.type_k, rows["head_k"]), ("-ctv", cfg.type_v, rows["head_v"])):
            if _is_quantized(t):
                bad = [d for d in dims if d % t.block_elems]
                if bad:
                    what = "n_embd_head_k" if flag == "-ctk" else "n_embd_head_v"
                    return (f"{flag} {GGML_NAME[t.name]}: llama.cpp refuses it for {spec.name}: block size "
                            f"{t.block_elems} does not divide {what}={bad[0]} "
                            "(src/llama-context.cpp:3851-3871)")  # fmt: skip
    elif _is_quantized(cfg.type_k):
        bad = [k for k in rows["k"] if k % cfg.type_k.block_elems]
        if bad:
            return (f"-ctk {tk} -fa off: llama.cpp aborts for {spec.name}: a K row of {bad[0]} elements is not "
                    f"whole blocks of {cfg.type_k.block_elems} (GGML_ASSERT, ggml/src/ggml.c:1797)")  # fmt: skip
    return None


# --- 3. the compute buffer (modelled) ---------------------------------------------------------------------

# The compute buffer's stated range: measured / model − 1 over every figure llama.cpp printed or reserved
# (tests/test_llamacpp_golden.py holds each one to its source; docs/engines-llamacpp.md lists them):
# - flash attention on, CPU, llama.cpp 0c1e57098: 0 for f16 caches (27 rows of llama3.1-8b, qwen2.5-7b,
#   gemma2-9b, n_ubatch 128-2048, n_ctx 4096-32768, 1 and 4 slots); +1.4 % .. +3.0 % with a q8_0 cache (3 rows
#   */ctx8192-np1-q8_0-faon: 4 × n_ubatch × n_embd more);
# - older builds and other backends (tests/fixtures/engine_logs): CANN gpt-oss-20b at 131,072 cells with flash
#   attention, −1.9 % (llamacpp-file-44321302313); CPU Llama-3.2-1B and Qwen3-1.7B at 1,024 cells, −1.6 % and
#   −1.3 % (llamacpp-file-14033481518, -14162148190);
# - flash attention off, CPU: −1.3 % .. +1.0 % (18 rows); CUDA Phi-3-mini at 4,096 cells, n_ubatch 256: 0.0 %
#   (llamacpp-file-68635202314); Vulkan gpt-oss-20b at 4,096 cells (24 of 25 layers offloaded): +77 %
#   (llamacpp-llama.cpp-16188), the only figure far off, and the upper end of the flash-attention-off range.
FA_ON_RANGE = (-0.02, 0.031)  # (low, high) of measured / model − 1
FA_OFF_RANGE = (-0.02, 0.78)
VOCAB_UNKNOWN = (32_000, 262_144)  # vocabularies of common models, when the spec has none (Llama 2 .. Gemma 3)


def compute_buffer(spec: ModelSpec, cfg: Config, mem: Memory, vocab: int | None = None) -> int:
    """The compute buffer llama.cpp's scheduler reserves on the GPU for ``cfg`` (bytes; a model).

    The worst-case graph is a micro-batch of ``n_ubatch`` tokens with every token's logits
    (src/llama-context.cpp:615-670). Two phases set the peak, whichever is larger:

    - the logits: ``4 × n_ubatch × (n_vocab + 2 × n_embd + 1)`` B. Exact for f16 caches with flash attention
      on the CPU at llama.cpp 0c1e57098 (fixture rows llama3.1-8b/*, qwen2.5-7b/*, gemma2-9b/*-faon,
      n_ubatch 128-2048, n_ctx 4096-32768);
    - the attention scores, with flash attention off: ``4 × n_ubatch × ((n_head + 1) × n_kv + n_kv_swa +
      6 × n_embd)`` B: the f32 scores of every head and the mask over ``n_kv`` cells of one stream (+4 ×
      n_ubatch per cell: llama3.1-8b rows 4096 → 32768, 67,584 B per cell = 4 × 512 × 33), the SWA mask,
      and activations (6 × n_embd: Phi-3-mini's CUDA buffer exactly; 5.5 and 5.3 × n_embd on the CPU
      for Llama 3.1 8B and Qwen 2.5 7B). With flash attention on: ``2 × n_ubatch × (n_kv + n_kv_swa) + 4 ×
      n_ubatch × 6 × n_embd`` (an f16 mask), below the logits for real vocabularies.

    ``vocab``: n_vocab (default the spec's; :data:`VOCAB_UNKNOWN`'s upper end when the spec has none).
    """
    ub = cfg.n_ubatch
    n_vocab = vocab or spec.vocab_size or VOCAB_UNKNOWN[1]
    n_embd = spec.hidden_size or spec.num_q_heads * spec.head_dim
    logits = 4 * ub * (n_vocab + 2 * n_embd + 1)
    if not mem.caches:  # no attention (Mamba): the logits' phase
        return logits
    by_name = {c.name: c.cells for c in mem.caches}
    swa = by_name.get("swa", 0)
    n_kv = max(by_name.get(n, 0) for n in ("kv", "attn", "base"))
    if cfg.flash_attn:
        attention = 2 * ub * (n_kv + swa) + 4 * ub * 6 * n_embd
    else:
        attention = 4 * ub * ((spec.num_q_heads + 1) * n_kv + swa + 6 * n_embd)
    return max(logits, attention)


def compute_range(spec: ModelSpec, cfg: Config, mem: Memory) -> tuple[int, int, int]:
    """(model, low, high) of :func:`compute_buffer`: the measured error band around the model; an unknown
    vocabulary widens it to :data:`VOCAB_UNKNOWN` (the model then takes the upper end)."""
    central = compute_buffer(spec, cfg, mem)
    lo_v = compute_buffer(spec, cfg, mem, VOCAB_UNKNOWN[0]) if spec.vocab_size is None else central
    lo_e, hi_e = FA_ON_RANGE if cfg.flash_attn else FA_OFF_RANGE
    return central, int(lo_v * (1 + lo_e)), int(central * (1 + hi_e)) + 1


# --- 4. the -fit context ------------------------------------------------------------------------------------


def fit_context(spec: ModelSpec, opts: FitOptions, kv: KVDtype, free: int, model: int, tp: int, pp: int) -> int:
    """The ``n_ctx`` llama.cpp's ``-fit`` (on by default) picks when ``-c`` is not given, on one device of
    ``free`` bytes holding ``model`` bytes of weights (common/fit.cpp:266-436): the model's context ×
    streams when the projected use leaves 1 GiB (``--fit-target``) free; else, linearly between 4096 ×
    streams and that, ``n_min + (n_max − n_min) × (target − used(n_min)) / (used(n_max) − used(n_min))``
    rounded down to a multiple of 256 × streams; ``n_min`` when even that leaves less (llama.cpp then
    moves layers to the CPU, which kvplan does not plan). Used = model + caches + compute buffer.
    """
    cfg = resolve_config(spec, opts, kv)
    streams = cfg.n_stream
    n_max = spec.max_model_len * streams
    n_min = FIT_MIN_CTX * streams

    def used(n: int) -> int:
        c = resolve_config(spec, opts, kv, n)
        mem = _worst_memory(spec, c, tp, pp, opts)
        compute = compute_buffer(spec, c, mem) if opts.activation_bytes is None else opts.activation_bytes
        return model + mem.bytes + compute

    used_max = used(n_max)
    if free - used_max >= FIT_MARGIN or n_max <= n_min:
        return n_max
    target = free - FIT_MARGIN
    used_min = used(n_min)
    if target <= used_min:
        return n_min
    n = n_min + (n_max - n_min) * (target - used_min) // (used_max - used_min)
    align = PAD * streams
    return max(n - n % align, n_min)


def _worst_memory(spec: ModelSpec, cfg: Config, tp: int, pp: int, opts: FitOptions) -> Memory:
    """The memory of the PP stage that holds the most cache bytes."""
    if pp == 1:
        return memory(spec, cfg, tp)
    stages = [memory(spec, cfg, tp, r) for r in stage_layers(spec.num_layers, pp, opts.pp_layer_partition)]
    return max(stages, key=lambda m: m.bytes)


# --- 5. the plan ------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class LlamacppPlan(CachePlan):
    """One llama.cpp context on one GPU: its slots and cells as pools (see the module docstring).

    Pools: ``slots`` (``n_parallel`` when the whole allocation fits the budget, else 0; a request takes 1)
    and ``cells`` (unified: the ``n_ctx`` cells every slot shares, a request takes its tokens; split: one
    slot's ``n_ctx_seq``, a request that fits its slot takes 0 of it). A request longer than the slot
    context takes more cells than there are. Unit bytes: :attr:`unit_bytes`.
    """

    cfg: Config = None  # type: ignore[assignment]
    mem: Memory = None  # type: ignore[assignment]
    block_size: int = PAD
    per_token: int = 0
    num_layers: int = 0
    units: tuple = (0, 0)
    fields: dict = field(default_factory=dict)
    largest: tuple = ()  # arguments of _largest_ctx, evaluated by fit_fields only (the sweep needs none)
    log: str = ""
    pool_names: tuple[str, ...] = ("slots", "cells")

    @property
    def total(self) -> int:
        return self.mem.bytes

    @property
    def unit_bytes(self) -> tuple[int, ...]:  # type: ignore[override]
        """(bytes of a slot, bytes of a cell): split streams, a slot's stream (the allocation / slots, exact);
        unified, a slot's recurrent state and share of the SWA cache, and a cell of the base cache."""
        return self.units

    @property
    def kv_bytes_per_token(self) -> int:  # type: ignore[override]
        return self.per_token

    @property
    def kv_bytes_per_block(self) -> int:  # type: ignore[override]
        return self.block_size * self.per_token

    @property
    def stage_num_layers(self) -> int:  # type: ignore[override]
        return self.num_layers

    def _cells_cap(self) -> int:
        return self.cfg.n_ctx if self.cfg.kv_unified else self.cfg.n_ctx_seq

    def pools(self, budget, xp=PY) -> tuple:
        return (xp.where(budget >= self.total, self.cfg.n_parallel, 0), self._cells_cap())

    def demand(self, tokens, xp=PY) -> tuple:
        ok = tokens <= self.cfg.slot_ctx
        over = self._cells_cap() + 1
        cells = xp.where(ok, tokens, over) if self.cfg.kv_unified else xp.where(ok, 0, over)
        return (1, cells)

    def measures(self, budget, seq, shared_prefix: int = 0, xp=PY) -> dict:
        fits = budget >= self.total
        _, ratio = count_requests(self.pools(budget, xp), self.demand(seq, xp), (0, 0), xp)
        slot, cell = self.units
        held = slot + cell * xp.minimum(seq, self.cfg.n_ctx) if self.cfg.kv_unified else slot
        return dict(
            num_blocks=xp.where(fits, self.cfg.n_ctx // PAD, 0),
            kv_bytes_per_request=held,
            kv_capacity_tokens=xp.where(fits, self.cfg.n_ctx, 0),
            max_concurrency=ratio,
            block_size=self.block_size,
        )

    def search_limit(self, caps: tuple, xp=PY):
        return xp.full(caps[0], self.cfg.slot_ctx + 1)

    def fit_fields(self) -> dict:
        out = {k: dict(v) if isinstance(v, dict) else v for k, v in self.fields.items()}
        out["engine_settings"]["max_ctx_size_fit"] = _largest_ctx(*self.largest) if self.largest else None
        return out

    def log_line(self, measures: dict, seq: int, pools: tuple) -> str:
        return self.log


def _log_lines(cfg: Config, mem: Memory) -> str:
    """The lines llama.cpp prints for these caches (src/llama-kv-cache.cpp:301, llama-memory-recurrent.cpp:133)."""
    out = []
    tk, tv = GGML_NAME[cfg.type_k.name], GGML_NAME[cfg.type_v.name]
    for c in mem.caches:
        out.append(
            f"llama_kv_cache: size = {c.bytes / MIB:7.2f} MiB ({c.cells:6d} cells, {c.layers:3d} layers, "
            f"{cfg.n_parallel:2d}/{c.n_stream} seqs), K ({tk}): {c.k_bytes / MIB:7.2f} MiB, V ({tv}): "
            f"{c.v_bytes / MIB:7.2f} MiB"
        )
    r = mem.recurrent
    if r is not None:
        out.append(
            f"llama_memory_recurrent: size = {r.bytes / MIB:7.2f} MiB ({r.cells:6d} cells, {r.layers:3d} layers, "
            f"{cfg.n_parallel:2d} seqs  0 rs_seq), R (f32): {r.r_bytes / MIB:7.2f} MiB, S (f32): "
            f"{r.s_bytes / MIB:7.2f} MiB, P (f32):    0.00 MiB"
        )
    return "\n".join(out)


def _per_token(spec: ModelSpec, cfg: Config, tp: int, layers: range) -> int:
    """Bytes one cell costs across the stage's attention layers (every layer counted as a full one; computed
    once per spec and key)."""
    type_k, type_v, flash_attn = cfg.type_k, cfg.type_v, cfg.flash_attn

    def compute() -> int:
        rows = _layer_rows(spec, tp)
        vmax = _v_max(spec, tp)
        total = 0
        for i in layers:
            r = rows[i]
            if r is None:
                continue
            total += type_k.bytes_for(r.k)
            if r.v is not None:
                total += type_v.bytes_for(vmax if not flash_attn else r.v)
        return total

    return spec.memo(("llamacpp.per_token", tp, layers.start, layers.stop, type_k, type_v, flash_attn), compute)


# --- the engine ---------------------------------------------------------------------------------------------


class LlamacppEngine(EngineRules):
    """llama.cpp (llama-server by default, llama-cli with ``--llama-tool cli``): a fixed allocation of ``-c``
    cells for ``-np`` slots; budget = total − model buffer − compute buffer − overhead."""

    engine = Engine.llamacpp
    display_name = "llama.cpp"
    unplanned_kinds = {
        "compressed": "llama.cpp's deepseek4 architecture (src/llama-arch.cpp LLM_ARCH_DEEPSEEK4) keeps a cache "
        "kvplan does not model",
        "rglru": "llama.cpp has no RecurrentGemma architecture (src/llama-arch.cpp)",
        "rwkv4": "llama.cpp has no RWKV-4 architecture (src/llama-arch.cpp: RWKV6, RWKV6QWEN2, RWKV7, ARWKV7 only)",
        "mlstm": "llama.cpp has no xLSTM architecture (src/llama-arch.cpp)",
        "cca": "llama.cpp has no ZAYA architecture (src/llama-arch.cpp)",
        "sconv": "llama.cpp has no Inkling architecture (src/llama-arch.cpp)",
        "hidden": "llama.cpp has no XLNet or Reformer architecture (src/llama-arch.cpp)",
        "prefix_tokens": "llama.cpp has no CPM-Ant architecture (src/llama-arch.cpp)",
    }
    block_size = PAD
    utilization = 1.0
    max_num_batched_tokens = DEFAULT_N_UBATCH
    quantized_kv = "q8_0"
    gguf_weights = True

    def resolve_rules(self, version: str | None) -> LlamacppRules:
        return resolve_rules(version)

    def kv_label(self, spec: ModelSpec, kv: KVDtype, opts: FitOptions) -> str:
        """The cache's types for the KV dtype ``kv``: ``-ctk`` / ``-ctv`` where given (they override
        ``--kv-dtype``, as :meth:`plan` applies them), as :func:`kvplan.calc.kv_dtype_label` names them."""
        try:
            k = cache_type(opts.cache_type_k, "--cache-type-k") if opts.cache_type_k else cache_type(kv.name, "")
            v = cache_type(opts.cache_type_v, "--cache-type-v") if opts.cache_type_v else cache_type(kv.name, "")
        except UsageError:  # a type llama.cpp lacks: refused by plan, named as given
            return kv.name
        return kv_dtype_label(k, v)

    # llama.cpp has no tensor parallelism: --tp splits heads the way kvplan does for the other engines
    # (docs/engines-llamacpp.md, "Not modelled"), so the replication note cites kvplan's split, not an engine's
    kv_split_source = (
        "kvplan's split; llama.cpp itself has no tensor parallelism",
        "kvplan's split; llama.cpp itself has no tensor parallelism",
    )
    kv_cache_dtypes = {name: d.name for name, d in CACHE_TYPES.items()}
    kv_cache_dtypes_source = "llama.cpp common/arg.cpp kv_cache_types"

    def kv_dtype(self, spec: ModelSpec, name: str | None) -> KVDtype:
        """``--kv-dtype``: ``auto`` is f16, llama.cpp's default cache type whatever the model's dtype
        (common/common.h:589-590); ``iq4_nl`` and the other ggml names are taken (:data:`CACHE_TYPES`, kvplan's
        names of them too).

        Raises:
            UsageError: a type llama.cpp lacks (fp8, nvfp4, int8 ...), listing those it has.
        """
        if name is None or str(name).strip().lower() == "auto":
            return CACHE_TYPES["f16"]
        return cache_type(name, "--kv-dtype")

    def _fixed(self, spec: ModelSpec, opts: FitOptions) -> tuple[int, str, int]:
        """(model buffer per GPU, how it was sized, overhead): the GGUF's tensors less those llama.cpp keeps
        on the host (its input layer: src/llama-model.cpp:1603-1605), or kvplan's weights model."""
        from kvplan.weights import weights_per_gpu

        tp, pp = opts.tensor_parallel_size, opts.pipeline_parallel_size
        if opts.weights_bytes is not None:
            weights, wname = opts.weights_bytes, "given"
        elif spec.param_count is None and spec.weights_bytes is None and opts.kv_cache_memory_bytes is not None:
            weights, wname = 0, "unknown"
        elif spec.weights_bytes is not None and opts.weights_dtype is None:
            weights, wname = cdiv(spec.weights_bytes - spec.host_weights_bytes, tp * pp), "checkpoint"
        else:
            weights, wname = weights_per_gpu(spec, opts.weights_dtype, tp, pp)
        overhead = self.overhead_bytes(spec, None, tp, pp) if opts.overhead_bytes is None else opts.overhead_bytes
        return weights, wname, overhead

    def _fits_fit(self, opts: FitOptions) -> bool:
        """Whether llama.cpp's ``-fit`` picks the context: no ``-c``, no ``--max-model-len``, no given KV budget."""
        return opts.ctx_size is None and opts.max_model_len is None and opts.kv_cache_memory_bytes is None

    def settings(self, spec: ModelSpec, gpu, opts: FitOptions) -> Settings:
        """The resolved :class:`Config` (``-fit``'s context when it picks one) in ``extra["config"]``.

        Raises:
            UsageError: a bad llama.cpp flag, or a kvplan flag llama.cpp has no such setting for.
        """
        rules = self.resolve_rules(opts.engine_version)
        if opts.gpu_memory_utilization is not None:
            raise UsageError(
                "--gpu-memory-utilization: llama.cpp has no memory fraction (its -fit leaves 1 GiB free when it "
                "picks -c); give --overhead-gib or --kv-cache-memory instead"
            )
        if opts.block_size is not None:
            raise UsageError("--block-size: llama.cpp has no KV blocks (its cells are tokens; n_ctx is padded to 256)")
        if opts.max_num_seqs is not None:
            raise UsageError("--max-num-seqs: llama.cpp's slots are -np/--parallel")
        kv = self.kv_dtype(spec, opts.kv_dtype)
        weights, wname, overhead = self._fixed(spec, opts)
        fit_ctx = None
        if self._fits_fit(opts):
            free = gpu.cuda_total_bytes - overhead
            fit_ctx = fit_context(spec, opts, kv, free, weights, opts.tensor_parallel_size, opts.pipeline_parallel_size)
        cfg = resolve_config(spec, opts, kv, fit_ctx)
        extra = {"config": cfg, "kv": kv, "fixed": (weights, wname, overhead), "gpu_total": gpu.cuda_total_bytes}
        return Settings(rules, 1.0, PAD, cfg.n_ubatch, 0, None, extra)

    def settings_key(self, spec: ModelSpec, gpu, opts: FitOptions) -> tuple:
        return (gpu.cuda_total_bytes,) if self._fits_fit(opts) else ()

    def request_length(self, spec: ModelSpec, opts: FitOptions, settings: Settings) -> int:
        """``--max-model-len``, else one slot's context (llama-server ``n_ctx_slot()``)."""
        return settings.extra["config"].slot_ctx if opts.max_model_len is None else opts.max_model_len

    def plan_depends_on_length(self, opts: FitOptions) -> bool:
        """True without ``-c``: ``--max-model-len`` then sizes ``-c`` (× slots)."""
        return opts.ctx_size is None

    def check(self, spec: ModelSpec, opts: FitOptions, settings: Settings) -> None:
        super().check(spec, opts, settings)
        if opts.shared_prefix_tokens:
            raise UsageError(
                "--shared-prefix: llama.cpp's slots each cache their own prompt; no prefix is shared across slots"
            )

    def budget(self, spec: ModelSpec, gpu, opts: FitOptions, settings: Settings) -> Budget:
        """GPU memory − model buffer − compute buffer − overhead, bytes per GPU. The compute buffer is
        modelled (:func:`compute_range`: its ``activation`` term carries the measured error as its range, and
        the KV budget the range that gives); ``--activation-gib`` and ``--kv-cache-memory`` make it exact.

        Raises:
            UsageError: as :func:`kvplan.weights.weights_per_gpu`.
        """
        cfg = settings.extra["config"]
        weights, wname, overhead = settings.extra["fixed"]
        tp, pp = opts.tensor_parallel_size, opts.pipeline_parallel_size
        mem = _worst_memory(spec, cfg, tp, pp, opts)
        if opts.activation_bytes is None:
            central, low, high = compute_range(spec, cfg, mem)
            compute = Term("activation", central, low, high, "llama.cpp compute buffer (modelled, measured error)")
        else:
            compute = exact_term("activation", opts.activation_bytes, "--activation-gib")
        terms = (
            exact_term("weights", weights, wname),
            compute,
            exact_term("non_torch", overhead, "CUDA context"),
        )
        total = gpu.cuda_total_bytes
        budget = total - weights - compute.bytes - overhead
        low, high = total - weights - compute.high - overhead, total - weights - compute.low - overhead
        given = opts.kv_cache_memory_bytes is not None
        if given:
            budget = low = high = opts.kv_cache_memory_bytes
        return Budget(
            total, total, weights, wname, compute.bytes, overhead, max(0, budget), given, terms=terms,
            kv_budget_low_bytes=max(0, low), kv_budget_high_bytes=max(0, high),
        )  # fmt: skip

    def plan(self, spec: ModelSpec, kv_dtype, opts: FitOptions, settings: Settings, max_len: int) -> LlamacppPlan:
        """The context's caches and slots on one GPU (``opts``' TP and PP: the stage with the most bytes).

        Raises:
            UsageError: a cache type llama.cpp does not have, what llama.cpp refuses (:func:`refusal`), or a
                layer kind it has no cache for.
        """
        cfg = settings.extra["config"]
        if kv_dtype.name != settings.extra["kv"].name:  # the sweep's KV dtype axis
            axis = cache_type(kv_dtype.name, "--kv-dtype")
            cfg = replace(cfg, type_k=cfg.type_k if opts.cache_type_k else axis,
                          type_v=cfg.type_v if opts.cache_type_v else axis)  # fmt: skip
        else:
            cache_type(kv_dtype.name, "--kv-dtype")
        unplanned = _unplanned_layer(spec)
        if unplanned:
            raise UsageError(unplanned)
        why = refusal(spec, cfg)
        if why:
            raise UsageError(why)
        tp, pp = opts.tensor_parallel_size, opts.pipeline_parallel_size
        ranges = stage_layers(spec.num_layers, pp, opts.pp_layer_partition)
        mems = [memory(spec, cfg, tp, r) for r in ranges]
        worst = max(range(len(mems)), key=lambda i: (mems[i].bytes, i == 0))
        mem = mems[worst]
        if cfg.kv_unified:  # a request holds its tokens' cells of the base cache, a slot its state and SWA share
            base = sum(c.bytes for c in mem.caches if c.name != "swa")
            swa = sum(c.bytes for c in mem.caches if c.name == "swa")
            state = mem.recurrent.bytes // cfg.n_parallel if mem.recurrent else 0
            units = (state + swa // cfg.n_parallel, base // cfg.n_ctx)
        else:  # a slot holds its own stream of every cache
            units = (mem.bytes // cfg.n_parallel, 0)
        largest = (spec, opts, cfg, settings.extra["kv"], settings.extra["fixed"], settings.extra["gpu_total"])
        return LlamacppPlan(cfg=cfg, mem=mem, per_token=_per_token(spec, cfg, tp, ranges[worst]),
                            num_layers=len(ranges[worst]), units=units, fields=_fit_fields(spec, cfg, mem),
                            largest=largest, log=_log_lines(cfg, mem))  # fmt: skip

    def does_not_fit_what(self, result) -> str | None:
        """What does not fit: the caches of all slots against the KV budget, or a request longer than a slot."""
        from kvplan.units import fmt_gib

        s = result.engine_settings
        if not s or result.kv_budget_bytes <= 0:
            return None
        if result.max_model_len > s["slot_ctx"]:
            return (f"a request of {result.max_model_len:,} tokens is longer than a slot's context of "
                    f"{s['slot_ctx']:,} (-c {s['n_ctx']} for {s['n_parallel']} slots; llama-server caps a slot at "
                    f"the model's {s['n_ctx_train']:,})")  # fmt: skip
        return (f"llama.cpp's caches for -c {s['n_ctx']} with {s['n_parallel']} slots take "
                f"{s['kv_total_bytes']:,} B ({fmt_gib(s['kv_total_bytes'])}) but the KV budget is "
                f"{fmt_gib(result.kv_budget_bytes)}")  # fmt: skip

    def does_not_fit_note(self, result) -> str:
        s = result.engine_settings
        if s and s.get("max_ctx_size_fit"):
            return f"; the largest -c that fits with -np {s['n_parallel']}: {s['max_ctx_size_fit']:,}"
        return ""


def _largest_ctx(spec: ModelSpec, opts: FitOptions, cfg: Config, kv: KVDtype, fixed: tuple, gpu_total: int) -> int:
    """The largest ``-c`` whose caches (and compute buffer) fit the GPU with ``cfg``'s slots and types, by
    bisection over multiples of 256 × streams (what llama.cpp rounds ``-c`` to); 0 when not even 256 cells a
    stream fit."""
    weights, _, overhead = fixed
    tp, pp = opts.tensor_parallel_size, opts.pipeline_parallel_size
    given = opts.kv_cache_memory_bytes
    step = PAD * cfg.n_stream
    base = replace(opts, max_model_len=None)

    def fits(k: int) -> bool:
        c = replace(resolve_config(spec, replace(base, ctx_size=k * step), kv), type_k=cfg.type_k, type_v=cfg.type_v)
        mem = _worst_memory(spec, c, tp, pp, opts)
        if given is not None:
            return mem.bytes <= given
        compute = compute_buffer(spec, c, mem) if opts.activation_bytes is None else opts.activation_bytes
        return mem.bytes + compute <= gpu_total - weights - overhead

    return largest_true(fits, 0, ((1 << 32) - 1) // step) * step


def _fit_fields(spec: ModelSpec, cfg: Config, mem: Memory) -> dict:
    """FitResult fields: llama.cpp's settings and figures (``engine_settings``), its K/V types."""
    tk, tv = GGML_NAME[cfg.type_k.name], GGML_NAME[cfg.type_v.name]
    central, low, high = compute_range(spec, cfg, mem)
    es = {
        "llama_cpp": LLAMA_CPP_COMMIT[:9],
        "tool": TOOLS[cfg.tool],
        "ctx_size": cfg.ctx_asked,
        "ctx_from": cfg.ctx_from,
        "n_ctx": cfg.n_ctx,
        "n_ctx_seq": cfg.n_ctx_seq,
        "n_ctx_train": cfg.n_ctx_train,
        "slot_ctx": cfg.slot_ctx,
        "n_parallel": cfg.n_parallel,
        "parallel_auto": cfg.parallel_auto,
        "kv_unified": cfg.kv_unified,
        "n_stream": cfg.n_stream,
        "n_batch": cfg.n_batch,
        "n_ubatch": cfg.n_ubatch,
        "flash_attn": cfg.flash_attn_asked,
        "flash_attn_on": cfg.flash_attn,
        "cache_type_k": tk,
        "cache_type_v": tv,
        "swa_full": cfg.swa_full,
        "v_trans": mem.v_trans,
        "caches": [
            dict(name=c.name, cells=c.cells, n_stream=c.n_stream, layers=c.layers, k_bytes=c.k_bytes, v_bytes=c.v_bytes)
            for c in mem.caches
        ],  # fmt: skip
        "recurrent": None
        if mem.recurrent is None
        else dict(
            cells=mem.recurrent.cells,
            layers=mem.recurrent.layers,
            r_bytes=mem.recurrent.r_bytes,
            s_bytes=mem.recurrent.s_bytes,
        ),  # fmt: skip
        "kv_total_bytes": mem.bytes,
        "host_weights_bytes": spec.host_weights_bytes,
        "compute_buffer_model_bytes": central,
        "compute_buffer_range": [low, high],
        "max_ctx_size_fit": None,
        "notes": list(cfg.notes),
    }
    # the cache's own types (-ctk / -ctv override --kv-dtype): one name, or K/V when they differ
    return {"engine_settings": es, "max_num_seqs": None, "kv_dtype": kv_dtype_label(cfg.type_k, cfg.type_v)}


def older_than_oldest(version: str | None) -> bool:
    """Always False: the one rule set has no oldest release."""
    return False


ENGINE = LlamacppEngine()


# --- what the start-up log prints (kvplan fit --from-log) ---------------------------------------------------


def cache_bytes_per_cell(spec: ModelSpec, type_k, type_v, swa: bool | None = None) -> tuple[int, int, int]:
    """(layers, K bytes, V bytes) one cell costs across the layers of one cache: llama.cpp's ``size = …
    MiB (C cells, L layers, …), K (type): a MiB, V (type): b MiB`` is ``C ×`` these
    (``llama-kv-cache.cpp``: a K row of ``n_embd_k_gqa = kv_heads × head_dim`` elements per layer in
    ``type_k``, a V row of ``kv_heads × v_head_dim`` in ``type_v``). ``swa``: only the sliding-window layers
    (True), only the others (False), every layer (None, no separate SWA cache). Layers split over devices
    are counted on every device together (no TP in llama.cpp)."""
    n = k = v = 0
    for layer in spec.layers:
        if layer.num_kv_heads is None or layer.kind not in ("full", "sliding", "chunked"):
            continue
        is_swa = layer.kind in ("sliding", "chunked")
        if swa is not None and is_swa != swa:
            continue
        h = layer.num_kv_heads
        n += 1
        k += type_k.row_bytes(h * layer.head_dim, h)
        v += type_v.row_bytes(h * layer.v_head_dim, h)
    return n, k, v


def swa_cells(n_ctx: int, n_swa: int, n_seq: int, n_ubatch: int, flash_attn: bool, swa_full: bool) -> int:
    """Cells of the sliding-window cache of the builds of mid-2025 (b6000–b6200, the corpus's llama.cpp logs):
    ``n_ctx`` with ``--swa-full``, else ``min(n_ctx, GGML_PAD(n_swa × n_seq + n_ubatch, n_pad))`` with
    ``n_pad`` 256 under flash attention and 32 without (``llama-kv-cache-unified-iswa.cpp``,
    ``llama_kv_cache_unified::get_padding``). Later builds pad it to 256 always (llama.cpp issue #17037,
    ``src/llama-kv-cache-iswa.cpp``: "the SWA cache is always padded to 256"), as :func:`memory` does for the
    commit kvplan follows, :data:`LLAMA_CPP_COMMIT`."""
    if swa_full:
        return n_ctx
    pad = 256 if flash_attn else 32
    return min(n_ctx, -(-(n_swa * n_seq + n_ubatch) // pad) * pad)
