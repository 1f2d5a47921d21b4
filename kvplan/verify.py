"""Allocate a real KV cache, measure it, and compare with kvplan's formula (``kvplan verify``).

Steps (:func:`verify`):

1. Validate the flags and compute the formula (:func:`kvplan.calc.layer_groups` for the layers allocated).
2. Refuse, before allocating anything, a cache larger than the memory available: on CUDA the driver's free
   memory (``torch.cuda.mem_get_info``) minus a margin; on CPU ``MemAvailable`` (/proc/meminfo) minus a
   margin, or less when ``ulimit -v`` / ``ulimit -d`` leave the process less address space (minus 512 MiB).
   Raises :class:`~kvplan.errors.DoesNotFit`, so a verify never runs a machine or a GPU out of memory.
3. Measure, allocate :class:`~kvplan.kvcache.StaticKVCache`, write every byte, measure again. CUDA: the
   ``torch.cuda.memory_allocated`` delta (also reserved and the driver's view). CPU: the resident-set delta
   from /proc/self/statm after the pages are written (freed heap pages are returned with ``malloc_trim``
   first, so reused memory is counted).
4. Run a chunked prefill and a few decode steps through :func:`kvplan.attention.grouped_query_attention`
   on the first layers of each attention kind (and of each distinct per-layer geometry: Gemma 4's global
   layers with their own H_kv and head_dim), each with its own layer's geometry, writing into and reading
   from the cache, and compare the outputs with ``torch.nn.functional.scaled_dot_product_attention`` in
   fp32 over the full token history with an explicit mask. A ``shared`` layer is checked the same way with
   the tokens written into its source layer: it must read that layer's storage (same addresses). An MLA
   layer with a DeepSeek-V3.2 indexer also writes indexer keys and reads them back. State layers (mamba,
   mamba2, gdn, short_conv, linear_attention) get a random state, then in-place decode updates of every
   tensor of :meth:`kvplan.specs.StateConfig.tensors`, each read back and compared with the same update
   computed out of place. Check decode allocates no cache memory (storage addresses and the cache's bytes
   unchanged; on CUDA the device-wide ``memory_allocated`` growth is reported too).
5. Agree when ``|measured − formula| <= tolerance``: the allocator's rounding per tensor, 512 B on CUDA
   (PyTorch's caching allocator rounds each block to 512 B), two pages per tensor on CPU (glibc's
   mmap'd blocks: a chunk header in front of the data, and the data rounded up to whole pages); and
   every layer's tensors hold exactly its :mod:`kvplan.calc` bytes
   (:meth:`~kvplan.kvcache.StaticKVCache.mismatched_layers`).

Limits, stated so a mismatch can be read:

- CUDA: a block over 1 MiB is split off its segment only when more than 1 MiB would remain
  (``CUDACachingAllocator`` ``should_split``), so a tensor whose rounded size leaves 1 MiB or less of its
  segment counts the rest as allocated too. Sizes that are whole multiples of 2 MiB (every run of
  ``scripts/gpu_check.sh``) are exact; odd sizes can measure up to 1 MiB more per tensor.
- CPU: glibc's mmap threshold is pinned at 128 KiB (:func:`_pin_mmap_threshold`) so every large tensor
  gets fresh pages; the process's own bookkeeping while allocating adds a page or so.
- The attention check covers the first :data:`CHECK_LAYERS_PER_KIND` layers of each kind plus the first
  layer of each further geometry, the first shared layer per attention kind, the first layer of each state
  kind, the first :data:`CHECK_REQUESTS` requests, and as many heads as :data:`REF_BUDGET` allows
  (:func:`check_heads`); every byte of the cache is still allocated and written. ``none`` layers hold
  nothing and are only counted (0 B). Sliding/chunked rings hold exactly
  ``min(S, window)`` tokens (the formula's count), so their prompt is fed one token at a time.
- Packed dtypes (q8_0, q4_0, q4_1, q5_0, q5_1, nvfp4, int8 and fp8_per_token_head with their fp32
  scales): K and V are quantized into the cache's rows with real scales (:data:`PACKED` gives each byte
  layout; the ggml ones are bit for bit those of ggml-quants.c's reference quantizers), read back from
  the cache and dequantized to the model dtype for attention. Two tolerances: every value as stored is
  within :data:`QUANT_BOUND` of the value written (the format's own rounding), and the attention output
  is within :data:`RTOL` of fp32 SDPA over the same dequantized values (computed from the codes and
  scales, not from the cache bytes), so a wrong byte layout, scale or slot fails.

The result is a frozen :class:`VerifyResult`; nothing here prints (progress goes through a callback).
"""

from __future__ import annotations

import ctypes
import gc
import math
import os
import time
import weakref
from dataclasses import asdict, dataclass
from typing import Callable

import torch  # noqa: TID253 - verify is one of the three torch modules
from torch.nn.functional import scaled_dot_product_attention  # noqa: TID253
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: TID253
from torch.utils._pytree import tree_flatten  # noqa: TID253

from kvplan.attention import grouped_query_attention, positional_mask
from kvplan.calc import layer_groups, resolve_kv_dtype
from kvplan.errors import DoesNotFit, UsageError
from kvplan.kvcache import KV_KINDS, LayerCache, StaticKVCache, ring_positions, torch_dtype_of
from kvplan.specs import STATE_KINDS, ModelSpec
from kvplan.units import GIB, fmt_gib

DEVICES = ("auto", "cuda", "cpu")
CUDA_ROUNDING = 512  # PyTorch CUDACachingAllocator: every block is a multiple of 512 B (kMinBlockSize)
DECODE_STEPS = 4  # decode steps checked per attention layer
PREFILL_CHUNK = 32  # query tokens of the checked prefill chunk (fewer when the logits budget says so)
RING_STEPS = 8  # prompt tokens fed one at a time into a sliding/chunked ring before the decode steps
CHECK_LAYERS_PER_KIND = 2  # attention layers checked per attention kind
CHECK_REQUESTS = 2  # requests (batch rows) the attention check writes and reads; the rest stay filled
# Batched axis of a conv state along which its d_conv − 1 past tokens lie: kvplan.specs.StateConfig.tensors
# gives every conv state as (d_conv − 1, dim), vLLM MambaStateShapeCalculator's default "SD" layout.
CONV_TIME_AXIS = 1
# fp32 logits one checked attention call may hold (B·H_q·T_q·T_kv·4 B); bounds the check's work and memory.
LOGITS_BUDGET = {"cpu": 32 << 20, "cuda": 512 << 20}
# fp32 K and V as the reference SDPA expands them to every checked query head (see check_heads).
REF_BUDGET = {"cpu": 256 << 20, "cuda": 2 << 30}
# Tolerance of the attention check: max |out − ref| <= RTOL[dtype] × max(1, max |ref|), ref = fp32 SDPA.
# Like Hugging Face's eager attention, the bundled one rounds the logits q·kᵀ to the input dtype
# (bf16 keeps 8 significant bits, fp16 11): with d = 576 (MLA) bf16 errors reach ~2 % of max |ref|.
# A wrong mask, head mapping or cache slot gives errors of order 1.
RTOL = {torch.float32: 2e-5, torch.float16: 5e-3, torch.bfloat16: 5e-2}
# CPU: glibc serves each tensor of >= 128 KiB from its own mmap, data after a 16-64 B chunk header, so a
# tensor of n bytes keeps ceil((n + header) / page) pages resident: less than n + 2 pages. A tensor whose
# size is a whole number of pages costs exactly one page more (measured). Tolerance: 2 pages per tensor.
CPU_PAGES_PER_TENSOR = 2

Progress = Callable[[str, int, int], None]


@dataclass(frozen=True)
class VerifyResult:
    """Formula vs measured bytes of a real cache, and the attention / decode checks run on it.

    Attributes (bytes are ints):
        model, device (``cpu`` or ``cuda``), seq_len, batch_size, kv_dtype, layers (allocated).
        formula_bytes: :mod:`kvplan.calc` bytes for those layers.
        measured_bytes: CUDA ``memory_allocated`` delta, or CPU resident-set delta after writing the pages.
        diff_bytes: measured − formula; diff_pct: 100 × diff / formula.
        tolerance_bytes: allocator rounding allowed: num_tensors × 512 B on CUDA, num_tensors × 2 pages on
            CPU (glibc's chunk header and page rounding, see :data:`CPU_PAGES_PER_TENSOR`).
        attention_max_abs_err: largest |bundled attention − fp32 SDPA| over every check (None: no check,
            e.g. packed q8_0 storage or a Mamba-only layer range).
        attention_ok: every check within tolerance (None when none ran).
        decode_alloc_bytes: cache bytes allocated by decode steps: storages that moved plus growth of the
            cache's bytes (must be 0).
        transient_peak_bytes: largest memory the bundled attention held during one call (CUDA: peak
            ``memory_allocated`` over the call's start; CPU: peak of live tensors its ops created).
        ok: diff within tolerance, every layer's bytes equal to its formula, attention_ok and readback_ok
            not False, decode_alloc_bytes == 0.
        allocated_bytes: Σ numel × element_size of the cache tensors (what torch was asked for).
        num_tensors: cache tensors (each rounded separately by the allocator).
        reserved_bytes: CUDA ``memory_reserved`` delta (None on CPU).
        driver_bytes: CUDA ``mem_get_info`` used delta, as the driver sees it (None on CPU).
        measure: how measured_bytes was obtained.
        attention_checks: the layers and token counts checked.
        device_name: e.g. ``NVIDIA H200`` or ``cpu``.
        seconds: wall time of the verify.
        decode_device_alloc_bytes: CUDA ``memory_allocated`` growth over the decode steps, temporaries freed
            (information only; None on CPU).
        fit_gpu, fit_engine, fit_requests, fit_kv_budget_bytes: with ``--fit``, the :mod:`kvplan.fit` plan
            whose ``max_concurrent_requests`` of seq_len tokens were allocated (None otherwise).
        fit_formula_bytes: the exact bytes of those requests in every layer; ``ok`` also needs it within
            the plan's KV budget.
        readback_ok: every write-and-read-back check passed: state updates, MLA indexer keys, shared layers
            reading their source layer's storage, packed values within :data:`QUANT_BOUND` (None when none ran).
        mismatched_layers: ``(layer, allocated bytes, formula bytes)`` of each layer whose tensors differ
            from :mod:`kvplan.calc` (empty when every layer matches).
    """

    model: str
    device: str
    seq_len: int
    batch_size: int
    kv_dtype: str
    layers: int
    formula_bytes: int
    measured_bytes: int
    diff_bytes: int
    diff_pct: float
    tolerance_bytes: int
    attention_max_abs_err: float | None
    attention_ok: bool | None
    decode_alloc_bytes: int
    transient_peak_bytes: int
    ok: bool
    allocated_bytes: int
    num_tensors: int
    reserved_bytes: int | None
    driver_bytes: int | None
    measure: str
    attention_checks: tuple[str, ...]
    device_name: str
    seconds: float
    decode_device_alloc_bytes: int | None = None
    fit_gpu: str | None = None
    fit_engine: str | None = None
    fit_requests: int | None = None
    fit_kv_budget_bytes: int | None = None
    fit_formula_bytes: int | None = None
    readback_ok: bool | None = None
    mismatched_layers: tuple[tuple[int, int, int], ...] = ()

    def to_json(self) -> dict:
        """Plain JSON object (the keys of the dataclass, in order)."""
        d = asdict(self)
        if d["attention_max_abs_err"] is not None and not math.isfinite(d["attention_max_abs_err"]):
            d["attention_max_abs_err"] = None  # not a number JSON has; attention_ok says false
        d["attention_checks"] = list(self.attention_checks)
        d["mismatched_layers"] = [list(m) for m in self.mismatched_layers]
        return d


# --- memory probes ---------------------------------------------------------------------------------


def page_size() -> int:
    """The OS page size in bytes (4096 on x86-64 Linux)."""
    return os.sysconf("SC_PAGE_SIZE")


def rss_bytes() -> int:
    """This process's resident set in bytes (second field of /proc/self/statm × page size).

    Raises:
        UsageError: /proc/self/statm is not readable (not Linux).
    """
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * page_size()
    except OSError as e:
        raise UsageError(f"--device cpu: cannot read /proc/self/statm ({e.strerror}); CPU verify needs Linux") from None


def meminfo_bytes(key: str) -> int:
    """A /proc/meminfo field (``MemAvailable``, ``MemTotal``) in bytes.

    Raises:
        UsageError: the file or field is missing.
    """
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                name, _, rest = line.partition(":")
                if name == key:
                    return int(rest.split()[0]) * 1024  # reported in kB (KiB)
    except OSError as e:
        raise UsageError(f"--device cpu: cannot read /proc/meminfo ({e.strerror})") from None
    raise UsageError(f"--device cpu: /proc/meminfo has no {key} line")


def cpu_available_bytes() -> tuple[int, int, int]:
    """(usable, MemAvailable, margin): usable = MemAvailable − max(1 GiB, 10 % of MemTotal)."""
    avail = meminfo_bytes("MemAvailable")
    margin = max(GIB, meminfo_bytes("MemTotal") // 10)
    return avail - margin, avail, margin


ADDRESS_SPACE_MARGIN = 512 << 20  # kept free under ulimit -v / -d: torch's own mappings as it runs the check


def status_bytes(key: str) -> int:
    """A /proc/self/status field (``VmSize``, ``VmData``) in bytes, 0 when the file or field is missing."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                name, _, rest = line.partition(":")
                if name == key:
                    return int(rest.split()[0]) * 1024  # reported in kB (KiB)
    except (OSError, ValueError, IndexError):
        pass
    return 0


def address_space_left() -> tuple[int, str] | None:
    """(bytes this process may still map, the limit's name) under ``ulimit -v`` (RLIMIT_AS, against VmSize)
    or ``ulimit -d`` (RLIMIT_DATA, against VmData: glibc's large blocks are private mappings that count
    there), the tighter of the two; None when neither is set (or on a system without ``resource``)."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not POSIX
        return None
    out = None
    for limit, field, name in (
        (resource.RLIMIT_AS, "VmSize", "ulimit -v"),
        (resource.RLIMIT_DATA, "VmData", "ulimit -d"),
    ):
        soft, _ = resource.getrlimit(limit)
        if soft == resource.RLIM_INFINITY or soft < 0:
            continue
        left = soft - status_bytes(field)
        if out is None or left < out[0]:
            out = (left, name)
    return out


def _libc():
    try:
        return ctypes.CDLL("libc.so.6")
    except OSError:  # pragma: no cover - not glibc
        return None


def _malloc_trim() -> None:
    """Return freed heap pages to the OS (glibc), so that reusing them shows up in the resident set."""
    libc = _libc()
    if libc is not None and hasattr(libc, "malloc_trim"):
        libc.malloc_trim(0)


def _pin_mmap_threshold() -> None:
    """Fix glibc's mmap threshold at its default 128 KiB (M_MMAP_THRESHOLD = −3).

    glibc raises the threshold (up to 32 MiB) each time a large block is freed, after which large tensors
    come from the heap, where they may reuse pages already resident. Pinned, every tensor of 128 KiB or
    more gets fresh pages from mmap: its resident cost is its bytes rounded up to pages, plus the page
    the allocator's header shares with the first bytes.
    """
    libc = _libc()
    if libc is not None and hasattr(libc, "mallopt"):
        libc.mallopt(-3, 128 * 1024)


class LiveTensorPeak(TorchDispatchMode):
    """Peak bytes of the tensors that aten ops create while the mode is active (CPU transient peak).

    Each op output whose storage is new (not a view of an input) is counted until its storage is freed
    (``weakref.finalize`` on the storage). ``largest`` is the biggest single new storage.
    """

    def __init__(self) -> None:
        super().__init__()
        self.live = 0
        self.peak = 0
        self.largest = 0
        self.ops: list[tuple[str, int]] = []
        self._seen: set[int] = set()

    def _free(self, key: int, n: int) -> None:
        self.live -= n
        self._seen.discard(key)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {
            t.untyped_storage().data_ptr() for t in tree_flatten((args, kwargs or {}))[0] if isinstance(t, torch.Tensor)
        }
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor):
                continue
            st = t.untyped_storage()
            key = st.data_ptr()
            if key in inputs or key in self._seen or st.nbytes() == 0:
                continue
            n = st.nbytes()
            self._seen.add(key)
            self.live += n
            self.peak = max(self.peak, self.live)
            self.largest = max(self.largest, n)
            self.ops.append((str(func), n))
            weakref.finalize(st, self._free, key, n)
        return out


# --- device and budget -----------------------------------------------------------------------------


def resolve_device(device: str) -> str:
    """``auto`` → ``cuda`` when torch sees a GPU, else ``cpu``.

    Raises:
        UsageError: unknown name, or ``cuda`` without a CUDA device.
    """
    name = str(device).strip().lower()
    if name not in DEVICES:
        raise UsageError(f"--device: {device!r} is not one of {', '.join(DEVICES)}")
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise UsageError(f"--device cuda: torch {torch.__version__} sees no CUDA device; use --device cpu")
    return name


def _compute_dtype(spec: ModelSpec, cache_dtype: torch.dtype | None) -> torch.dtype | None:
    """Dtype the attention check computes in: the cache's own float type, else the model's (fp8 caches, and
    packed rows, dequantized to it)."""
    if cache_dtype in RTOL:
        return cache_dtype
    model = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
    return model.get(spec.dtype, torch.bfloat16)


def _checked_layers(spec: ModelSpec, n_layers: int) -> list[int]:
    """The layers the check runs on, in index order.

    Attention kinds (full, sliding, chunked, mla): the first :data:`CHECK_LAYERS_PER_KIND` layers of each,
    plus the first layer of each further geometry of that kind (Gemma 4's global layers, OpenELM's
    per-layer heads). Shared layers: the first of each attention kind they run as (those with a known
    source). State kinds: the first layer of each. ``none`` layers: none (nothing is cached).
    """
    picked: list[int] = []
    counts: dict[str, int] = {}
    geometries: set[tuple[str, str]] = set()
    for i in range(n_layers):
        layer = spec.layers[i]
        kind = layer.kind
        if kind in (*KV_KINDS, "mla"):
            new_geometry = (kind, layer.geometry()) not in geometries
            if counts.get(kind, 0) < CHECK_LAYERS_PER_KIND or new_geometry:
                counts[kind] = counts.get(kind, 0) + 1
                geometries.add((kind, layer.geometry()))
                picked.append(i)
        elif kind in STATE_KINDS or (kind == "shared" and layer.shared_from is not None):
            key = f"shared:{layer.attends_as}" if kind == "shared" else kind
            if key not in counts:
                counts[key] = 1
                picked.append(i)
    return picked


def _check_widths(spec: ModelSpec, i: int) -> int:
    """Elements per token of the random K/V history the check of layer ``i`` keeps (0: no attention)."""
    layer = spec.layers[i]
    if layer.kind == "shared" and layer.shared_from is not None:
        layer = spec.layers[layer.shared_from]
    if layer.kind in KV_KINDS:
        return layer.num_kv_heads * (layer.head_dim + layer.v_head_dim)
    if layer.kind == "mla" and layer.mla is not None:
        return layer.mla.latent_dim + layer.mla.kv_lora_rank + (layer.mla.index_head_dim or 0)
    return 0


def _elem_bytes(dt: torch.dtype | None) -> int:
    return 1 if dt is None else torch.empty((), dtype=dt).element_size()


def check_heads(B: int, S: int, H_kv: int, G: int, d: int, d_v: int, device: str) -> tuple[int, int]:
    """(KV heads, query heads per KV head) the attention check uses, within :data:`REF_BUDGET`.

    SDPA's reference path repeats fp32 K and V once per query head: ``B·G·S·(d + d_v)·4`` bytes per KV
    head. The check takes the first KV heads that fit (all of them for Llama-3-8B at 2,048 tokens); when
    one KV head's group is already too big (MLA: 128 query heads on one latent), the first query heads of
    that group (any subset of a group is still grouped-query attention).
    """
    per_kv_head = B * G * S * (d + d_v) * 4
    budget = REF_BUDGET[device]
    if per_kv_head <= budget:
        return min(H_kv, budget // per_kv_head), G
    return 1, max(1, min(G, budget // (B * S * (d + d_v) * 4)))


def check_batch(batch_size: int) -> int:
    """Requests the attention check runs on (the first ones): at most :data:`CHECK_REQUESTS`."""
    return min(batch_size, CHECK_REQUESTS)


def check_overhead_bytes(spec: ModelSpec, seq_len: int, batch_size: int, n_layers: int, device: str) -> int:
    """Upper bound of the memory the attention check needs besides the cache (bytes).

    One layer at a time, for the b = :func:`check_batch` requests checked: the random K/V history in the
    compute dtype plus an fp32 copy for the reference (``b·S·H_kv·(d + d_v)·(e + 4)``, or
    ``b·S·(576 + 512 + index_head_dim)·(e + 4)`` for MLA, e <= 4; each layer its own geometry, a shared
    layer its source's), or three copies of a state layer's tensors, the reference's per-head expansion
    (:data:`REF_BUDGET`), and three logits budgets (ours, SDPA's, the probabilities).
    """
    e = 4  # bound: fp32
    batch_size = check_batch(batch_size)
    widths = [_check_widths(spec, i) for i in _checked_layers(spec, n_layers)]
    history = max(widths, default=0) * seq_len * batch_size * (e + 4)
    # state layers: a random state, the tensor before the update and the update (3 copies, fp32 at most)
    states = [spec.layers[i].state for i in _checked_layers(spec, n_layers) if spec.layers[i].state is not None]
    state = max((st.elements() for st in states if st is not None), default=0) * batch_size * 3 * 4
    return max(history, state) + REF_BUDGET[device] + 3 * LOGITS_BUDGET[device]


def _refuse_if_too_big(need: int, formula: int, device: str, what: str) -> None:
    """Raise DoesNotFit before allocating when ``need`` bytes exceed what the device can spare."""
    if device == "cuda":
        free, total = torch.cuda.mem_get_info()
        margin = max(512 << 20, total // 50)
        usable = free - margin
        where = f"cuda ({fmt_gib(free)} free per torch.cuda.mem_get_info − {fmt_gib(margin)} margin)"
    else:
        usable, avail, margin = cpu_available_bytes()
        where = f"cpu (MemAvailable {fmt_gib(avail)} − {fmt_gib(margin)} safety margin)"
        limited = address_space_left()  # ulimit -v: a cache MemAvailable holds can still fail to be mapped
        if limited is not None and limited[0] - ADDRESS_SPACE_MARGIN < usable:
            usable = limited[0] - ADDRESS_SPACE_MARGIN
            where = (
                f"cpu ({limited[1]} leaves this process {fmt_gib(max(limited[0], 0))} of address space − "
                f"{fmt_gib(ADDRESS_SPACE_MARGIN)} margin)"
            )
    if need > usable:
        raise DoesNotFit(
            f"verify {what}: the cache needs {formula:,} B ({fmt_gib(formula)}) and its check "
            f"{need - formula:,} B more, above the {fmt_gib(max(usable, 0))} usable on {where}; "
            "nothing was allocated; lower --seq or --batch, or allocate fewer layers with --layers N"
        )


# --- packed KV formats: quantized into the cache's rows, dequantized for attention -------------------
#
# A KV dtype torch has no type for is stored as uint8 rows (kvplan.kvcache): one row per token and layer
# of E = H_kv × d values (an MLA latent: E = kv_lora_rank + qk_rope_head_dim, one "head"), of exactly
# KVDtype.row_bytes(E, H_kv) bytes. The check quantizes K and V into these rows with real scales (PACKED
# lists the layouts), reads the rows back from the cache and dequantizes them for attention.
#
# Tolerances (documented in the README):
# - storage: every value read back is within QUANT_BOUND of the value written, per block of A = max |x|
#   and R = max x − min x (half a quantization step, one step where the format clamps its largest
#   magnitude, plus the rounding of the block's scales to fp16 or E4M3);
# - attention: the bundled attention over the dequantized cache against fp32 SDPA over the same values
#   dequantized independently of the cache bytes (PackedFormat.fake), within RTOL of the compute dtype
#   (the model dtype): a wrong byte layout, scale or slot gives errors of order 1.

E2M1_GRID = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)  # NVFP4 magnitudes, code & 7 (OCP MX spec, FP4 E2M1)
E4M3_MAX = 448.0  # largest finite float8_e4m3fn
PACKED = {
    "q8_0": "ggml blocks of 32: [d fp16][32 × int8], x ≈ q·d, d = A/127 (ggml-quants.c quantize_row_q8_0_ref)",
    "q4_0": "ggml blocks of 32: [d fp16][16 B: value j low nibble, j + 16 high], x ≈ (q − 8)·d, d = −max/8",
    "q4_1": "ggml blocks of 32: [d fp16][m fp16][16 B nibbles], x ≈ q·d + m, d = R/15, m = min",
    "q5_0": "ggml blocks of 32: [d fp16][qh 4 B: bit j = bit 4 of value j][16 B low nibbles], x ≈ (q − 16)·d",
    "q5_1": "ggml blocks of 32: [d fp16][m fp16][qh 4 B][16 B low nibbles], x ≈ q·d + m, d = R/31",
    "int8": "E × int8 round(x/s), then one fp32 s = A/127 per head (vLLM per-token-head scales)",
    "fp8_per_token_head": "E × float8_e4m3fn of x/s, then one fp32 s = A/448 per head",
    "nvfp4": "ceil(E/2) B of E2M1 codes (value 2i low nibble), then ceil(E/16) E4M3 scales s = A/6 per 16",
}
# The storage tolerance per value, A = max |x| and R = max x − min x of its block (a head for int8 and
# fp8_per_token_head): half a step, or one step where the format clamps the end opposite its largest
# magnitude, plus the rounding of the scales (fp16: 2^-11 relative; E4M3: 2^-4).
QUANT_BOUND = {
    "q8_0": "|x̂ − x| <= A/254 + A/1024",
    "q4_0": "|x̂ − x| <= A/8 + A/512",
    "q4_1": "|x̂ − x| <= R/30 + A/512",
    "q5_0": "|x̂ − x| <= A/16 + A/512",
    "q5_1": "|x̂ − x| <= R/62 + A/512",
    "int8": "|x̂ − x| <= A/254 + A·2^-20",
    "fp8_per_token_head": "|x̂ − x| <= A/16 + A·2^-16",
    "nvfp4": "|x̂ − x| <= max(s, A − 6s) + A/1024, s the block's E4M3 scale",
}


def _roundf(x: torch.Tensor) -> torch.Tensor:
    """C ``roundf`` (half away from zero), exactly in fp32: ``floor(a) + floor(2·(a − floor(a)))``."""
    a = x.abs()
    f = a.floor()
    return torch.sign(x) * (f + torch.floor(2 * (a - f)))


def _f16(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """fp32 [..., 1] → (its fp16 bytes [..., 2] uint8, little-endian, the fp16 value back in fp32 [..., 1])."""
    h = x.to(torch.float16).contiguous()
    return h.view(torch.uint8), h.float()


def _from_f16(b: torch.Tensor) -> torch.Tensor:
    """uint8 [..., 2] → fp32 [..., 1]."""
    return b.contiguous().view(torch.float16).float()


def _inverse(d: torch.Tensor) -> torch.Tensor:
    """1/d, 0 where d is 0 (an all-zero block), as ggml."""
    return torch.where(d == 0, torch.zeros_like(d), 1.0 / d)


class PackedFormat:
    """Quantize rows of values into a packed KV dtype's bytes (:data:`PACKED`) and back.

    Args:
        dtype: a :class:`~kvplan.dtypes.KVDtype` torch has no type for (``torch_name`` None).

    Raises:
        UsageError: a packed dtype without a layout here.
    """

    GGML = {"q8_0": (127, False), "q4_0": (8, False), "q4_1": (15, True), "q5_0": (16, False), "q5_1": (31, True)}

    def __init__(self, dtype) -> None:
        if dtype.name not in PACKED:
            raise UsageError(f"--kv-dtype: {dtype.name} has no packed layout to check; allowed: {', '.join(PACKED)}")
        self.dtype = dtype
        self.name = dtype.name

    # -- one call per row batch -------------------------------------------------------------------------
    def pack(self, x: torch.Tensor, heads: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Quantize rows.

        Args:
            x: fp32 [..., E], E a multiple of ``heads`` (head h holds values h·d .. h·d + d − 1).
            heads: heads per row (per-head scales).

        Returns:
            (rows uint8 [..., row_bytes(E, heads)], the dequantized values fp32 [..., E] computed from the
            codes and scales (not from the bytes), the worst ``|x̂ − x| − bound`` per row [...]: <= 0 when
            every value is within :meth:`bound`).
        """
        x = x.float()
        E = x.shape[-1]
        if self.name in self.GGML:
            rows, deq, slack = self._ggml(x)
        elif self.name == "nvfp4":
            rows, deq, slack = self._nvfp4(x)
        else:
            rows, deq, slack = self._per_head(x, heads)
        assert rows.shape[-1] == self.dtype.row_bytes(E, heads), (self.name, rows.shape, E, heads)
        return rows, deq, slack

    def fake(self, x: torch.Tensor, heads: int) -> torch.Tensor:
        """The values ``x`` reads back as after packing (fp32 [..., E]), without going through bytes."""
        return self.pack(x, heads)[1]

    def unpack(self, rows: torch.Tensor, E: int, heads: int) -> torch.Tensor:
        """uint8 rows [..., row_bytes(E, heads)] → fp32 values [..., E]."""
        if self.name in self.GGML:
            return self._ggml_unpack(rows, E)
        if self.name == "nvfp4":
            return self._nvfp4_unpack(rows, E)
        return self._per_head_unpack(rows, E, heads)

    # -- ggml blocks ------------------------------------------------------------------------------------
    def _ggml(self, x: torch.Tensor):
        levels, asym = self.GGML[self.name]
        lead, E = x.shape[:-1], x.shape[-1]
        n = -(-E // 32)
        b = torch.nn.functional.pad(x, (0, n * 32 - E)).reshape(-1, 32)  # zero-padded to whole blocks
        A = b.abs().amax(-1, keepdim=True)
        if self.name == "q8_0":
            d = A / 127
            q = _roundf(b * _inverse(d))
            db, dv = _f16(d)
            parts, deq = [db, q.to(torch.int8).view(torch.uint8)], q * dv
            bound = A / 254 + A / 1024
        elif not asym:  # q4_0, q5_0: d = −(the value of largest magnitude)/levels, codes 0 .. 2·levels − 1
            top = b.gather(-1, b.abs().argmax(-1, keepdim=True))
            d = top / -levels
            q = torch.trunc(b * _inverse(d) + (levels + 0.5)).clamp(0, 2 * levels - 1)
            db, dv = _f16(d)
            parts, deq = [db], (q - levels) * dv
            bound = A / levels + A / 512  # one step: the end opposite the largest magnitude clamps
        else:  # q4_1, q5_1: d = R/levels, m = min
            lo, hi = b.amin(-1, keepdim=True), b.amax(-1, keepdim=True)
            d = (hi - lo) / levels
            q = torch.trunc((b - lo) * _inverse(d) + 0.5).clamp(0, levels)
            db, dv = _f16(d)
            mb, mv = _f16(lo)
            parts, deq = [db, mb], dv * q + mv
            bound = (hi - lo) / (2 * levels) + A / 512
        if self.name != "q8_0":
            qi = q.to(torch.uint8)
            if self.name in ("q5_0", "q5_1"):  # bit 4 of value j → bit j of a little-endian uint32
                bits = ((qi >> 4) & 1).reshape(-1, 4, 8).to(torch.int32) << torch.arange(8, device=x.device)
                parts.append(bits.sum(-1).to(torch.uint8))
            parts.append((qi[:, :16] & 15) | ((qi[:, 16:] & 15) << 4))
        rows = torch.cat(parts, -1).reshape(*lead, -1)
        slack = ((deq - b).abs() - bound).amax(-1).reshape(*lead, n).amax(-1)
        return rows, deq.reshape(*lead, n * 32)[..., :E], slack

    def _ggml_unpack(self, rows: torch.Tensor, E: int) -> torch.Tensor:
        levels, asym = self.GGML[self.name]
        lead = rows.shape[:-1]
        n = -(-E // 32)
        b = rows.reshape(-1, self.dtype.block_bytes)
        d = _from_f16(b[:, 0:2])
        if self.name == "q8_0":
            v = b[:, 2:].contiguous().view(torch.int8).float() * d
        else:
            off = 4 if asym else 2
            m = _from_f16(b[:, 2:4]) if asym else None
            high = None
            if self.name in ("q5_0", "q5_1"):
                qh = b[:, off : off + 4]
                high = ((qh.unsqueeze(-1) >> torch.arange(8, device=b.device, dtype=torch.uint8)) & 1).reshape(-1, 32)
                off += 4
            qs = b[:, off : off + 16]
            q = torch.cat([qs & 15, qs >> 4], -1)
            if high is not None:
                q = q | (high << 4)
            q = q.float()
            v = d * q + m if asym else (q - levels) * d
        return v.reshape(*lead, n * 32)[..., :E]

    # -- per-token-head scales --------------------------------------------------------------------------
    def _per_head(self, x: torch.Tensor, heads: int):
        lead, E = x.shape[:-1], x.shape[-1]
        h = x.reshape(*lead, heads, E // heads)
        A = h.abs().amax(-1, keepdim=True)
        if self.name == "int8":
            s = A / 127
            q = _roundf(h * _inverse(s)).clamp(-127, 127)
            data = q.to(torch.int8).view(torch.uint8)
            deq = q * s
            bound = A / 254 + A * 2**-20
        else:  # fp8_per_token_head
            s = A / E4M3_MAX
            q = (h * _inverse(s)).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
            data = q.view(torch.uint8)
            deq = q.float() * s
            bound = A / 16 + A * 2**-16  # E4M3 keeps 3 mantissa bits: half an ulp is 2^-4 of the value
        rows = torch.cat([data.reshape(*lead, E), s.reshape(*lead, heads).contiguous().view(torch.uint8)], -1)
        slack = ((deq - h).abs() - bound).amax(-1).amax(-1)
        return rows, deq.reshape(*lead, E), slack

    def _per_head_unpack(self, rows: torch.Tensor, E: int, heads: int) -> torch.Tensor:
        lead = rows.shape[:-1]
        s = rows[..., E:].contiguous().view(torch.float32).unsqueeze(-1)  # (..., heads, 1)
        code = torch.int8 if self.name == "int8" else torch.float8_e4m3fn
        q = rows[..., :E].contiguous().view(code).float().reshape(*lead, heads, E // heads)
        return (q * s).reshape(*lead, E)

    # -- NVFP4 ------------------------------------------------------------------------------------------
    def _nvfp4(self, x: torch.Tensor):
        lead, E = x.shape[:-1], x.shape[-1]
        n = -(-E // 16)
        b = torch.nn.functional.pad(x, (0, n * 16 - E)).reshape(-1, 16)
        A = b.abs().amax(-1, keepdim=True)
        s8 = (A / 6).clamp(max=E4M3_MAX).to(torch.float8_e4m3fn)
        s = s8.float()
        v = b * _inverse(s)
        grid = torch.tensor(E2M1_GRID, device=x.device)
        mag = (v.abs().unsqueeze(-1) - grid).abs().argmin(-1)  # nearest magnitude, ties to the smaller one
        code = mag | ((v < 0).to(mag.dtype) << 3)
        deq = torch.where(v < 0, -grid[mag], grid[mag]) * s
        bound = torch.maximum(s, A - 6 * s) + A / 1024  # half the widest gap (4 → 6), or the clamp above 6·s
        codes = torch.nn.functional.pad(code.reshape(*lead, n * 16)[..., :E], (0, E % 2)).to(torch.uint8)
        data = codes[..., 0::2] | (codes[..., 1::2] << 4)
        rows = torch.cat([data, s8.reshape(*lead, n).view(torch.uint8)], -1)
        slack = ((deq - b).abs() - bound).amax(-1).reshape(*lead, n).amax(-1)
        return rows, deq.reshape(*lead, n * 16)[..., :E], slack

    def _nvfp4_unpack(self, rows: torch.Tensor, E: int) -> torch.Tensor:
        lead = rows.shape[:-1]
        n, nb = -(-E // 16), -(-E // 2)
        data = rows[..., :nb]
        codes = torch.stack([data & 15, data >> 4], -1).reshape(*lead, 2 * nb)[..., :E]
        codes = torch.nn.functional.pad(codes, (0, n * 16 - E)).reshape(*lead, n, 16).long()
        grid = torch.tensor(E2M1_GRID, device=rows.device)
        mag = grid[codes & 7]
        s = rows[..., nb:].contiguous().view(torch.float8_e4m3fn).float().unsqueeze(-1)  # (..., n, 1)
        v = torch.where((codes & 8) != 0, -mag, mag) * s
        return v.reshape(*lead, n * 16)[..., :E]


# --- the attention check ---------------------------------------------------------------------------


def _ref_mask(T_q: int, end: int, window: int | None, chunk: int | None, device) -> torch.Tensor:
    """Boolean [T_q, end] bottom-right causal mask for the reference, built with ``tril`` (independently
    of :func:`kvplan.attention.allowed_keys`)."""
    ones = torch.ones(T_q, end, dtype=torch.bool, device=device)
    m = ones.tril(end - T_q)  # key j <= query position end − T_q + i
    if window is not None:
        m &= ~ones.tril(end - T_q - window)  # and j > position − window
    if chunk is not None:
        q_chunk = torch.arange(end - T_q, end, device=device).div(chunk, rounding_mode="floor")
        k_chunk = torch.arange(end, device=device).div(chunk, rounding_mode="floor")
        m &= q_chunk[:, None] == k_chunk[None, :]
    return m


@dataclass
class _CheckState:
    max_err: float = 0.0
    ok: bool = True
    ran: int = 0
    peak: int = 0
    decode_alloc: int = 0
    decode_device_alloc: int = 0
    readback_ok: bool = True
    readbacks: int = 0


class _AttentionCheck:
    """Runs prefill + decode on chosen layers of a cache against fp32 SDPA (see module docstring)."""

    def __init__(self, cache: StaticKVCache, device: str, progress: Progress | None) -> None:
        self.cache = cache
        self.device = device
        self.progress = progress
        self.spec = cache.spec
        self.cache_dt = torch_dtype_of(cache.kv_dtype)
        self.compute_dt = _compute_dtype(cache.spec, self.cache_dt)
        self.codec = PackedFormat(cache.kv_dtype) if self.cache_dt is None else None  # packed rows
        self.gen = torch.Generator(device=device).manual_seed(0)
        self.st = _CheckState()
        self.notes: list[str] = []

    # random tensors -----------------------------------------------------------------------------------
    def _randn(self, *shape: int) -> torch.Tensor:
        x = torch.randn(shape, generator=self.gen, device=self.device, dtype=torch.float32)
        return x.to(self.compute_dt)

    def _bytes(self, *shape: int) -> torch.Tensor:
        return torch.randint(0, 256, shape, generator=self.gen, device=self.device, dtype=torch.uint8)

    def _stored(self, x: torch.Tensor) -> torch.Tensor:
        """x as the attention will read it back: rounded through the cache dtype (fp8 caches)."""
        return x if self.cache_dt == self.compute_dt else x.to(self.cache_dt).to(self.compute_dt)

    def _deq(self, x: torch.Tensor) -> torch.Tensor:
        return x if x.dtype == self.compute_dt else x.to(self.compute_dt)

    def _quantize(self, x: torch.Tensor, heads: int) -> tuple[torch.Tensor, torch.Tensor, float]:
        """Pack rows ``x`` [B, T, E] (compute dtype) into the cache's packed dtype, in chunks of tokens.

        Returns:
            (rows uint8 [B, T, row_bytes], the values they hold as the reference sees them [B, T, E] in
            the compute dtype (dequantized from codes and scales, not from the bytes), the worst
            ``|x̂ − x| − bound`` over every value: <= 0 when all are within the format's bound).
        """
        assert self.codec is not None
        B, T, E = x.shape
        step = max(1, (4 << 20) // max(1, B * E))  # bounds the fp32 temporaries of one pack call
        rows, ref, slack = [], [], -math.inf
        for t in range(0, T, step):
            r, deq, sl = self.codec.pack(x[:, t : t + step], heads)
            rows.append(r)
            ref.append(deq.to(self.compute_dt))
            slack = max(slack, sl.max().item())
        return torch.cat(rows, 1), torch.cat(ref, 1), slack

    def _read_packed(self, layer: LayerCache, end: int, B: int):
        """What attention reads from packed layer ``layer`` after tokens 0..end−1: (k, v, positions, rows).

        The rows of the checked requests are read from the storage of the layer's source (a shared layer
        reads its source's) and dequantized to the compute dtype: k [B, H_kv, T, d], v [B, H_kv, T, d_v]
        (MLA: the latent as [B, 1, T, d] and its first kv_lora_rank columns); T = end, or the ring's
        capacity with :func:`kvplan.kvcache.ring_positions`. ``rows`` is the tensor read (its storage).
        """
        assert self.codec is not None
        src = self.cache.source_of(layer.index)
        ls = src.spec
        assert ls is not None
        if src.kind == "mla":
            assert ls.mla is not None
            rows = src.tensors["latent"][:, :end]
            d = ls.mla.latent_dim
            lat = self.codec.unpack(rows[:B], d, 1).to(self.compute_dt).unsqueeze(1)  # (B, 1, end, d)
            return lat, lat[..., : ls.mla.kv_lora_rank], torch.arange(end, device=self.device), rows
        h = ls.num_kv_heads
        out = []
        for name, width in (("k", ls.head_dim), ("v", ls.v_head_dim)):
            rows = src.tensors[name] if src.ring else src.tensors[name][:, :end]  # (B, T, row bytes)
            x = self.codec.unpack(rows[:B], h * width, h)  # (B, T, H_kv·width) fp32
            out.append(x.reshape(B, rows.shape[1], h, width).transpose(1, 2).to(self.compute_dt))
        pos = ring_positions(end, src.capacity, self.device) if src.ring else torch.arange(end, device=self.device)
        return out[0], out[1], pos, src.tensors["k"]

    # measurement --------------------------------------------------------------------------------------
    def _sync(self) -> None:
        if self.device == "cuda":
            torch.cuda.synchronize()

    def _attend(self, q, k, v, **kw) -> torch.Tensor:
        """The bundled attention, its transient peak recorded."""
        if self.device == "cuda":
            self._sync()
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            out = grouped_query_attention(q, k, v, **kw)
            self._sync()
            self.st.peak = max(self.st.peak, torch.cuda.max_memory_allocated() - base)
            return out
        with LiveTensorPeak() as mode:
            out = grouped_query_attention(q, k, v, **kw)
        self.st.peak = max(self.st.peak, mode.peak)
        return out

    def _compare(self, out: torch.Tensor, q, k_ref, v_ref, end: int, window, chunk, scale) -> None:
        T_q = q.shape[2]
        mask = _ref_mask(T_q, end, window, chunk, q.device)
        ref = scaled_dot_product_attention(
            q.float(), k_ref[:, :, :end], v_ref[:, :, :end], attn_mask=mask, scale=scale, enable_gqa=True
        )
        err = (out.float() - ref).abs().max().item()
        bound = RTOL[self.compute_dt] * max(1.0, ref.abs().max().item())
        self.st.max_err = max(self.st.max_err, err if math.isfinite(err) else math.inf)  # NaN: max() would drop it
        self.st.ok = self.st.ok and err <= bound and math.isfinite(err)
        self.st.ran += 1

    # the check of one layer ---------------------------------------------------------------------------
    def run(self, layers: list[int]) -> None:
        for n, i in enumerate(layers):
            if self.progress:
                self.progress("attention check", n, len(layers))
            layer = self.cache.layers[i]
            if layer.kind in STATE_KINDS:
                self._state(layer)
            else:
                self._attention(layer)
        if self.progress:
            self.progress("attention check", len(layers), len(layers))

    def _decode_guard(self):
        """Snapshot the cache before decode steps; the returned ``finish()`` adds what they allocated.

        Cache memory allocated = bytes of every tensor whose storage moved + growth of the cache's bytes
        (both 0 when decode writes in place). On CUDA the device-wide ``memory_allocated`` growth is kept
        too, for information (a library's first-use workspace, e.g. cuBLAS, may land there).
        """
        cache = self.cache
        self._sync()
        ptrs, nbytes = cache.data_ptrs(), cache.nbytes
        alloc = torch.cuda.memory_allocated() if self.device == "cuda" else 0

        def finish() -> None:
            if self.device == "cuda":
                gc.collect()  # a step's temporaries must not linger in reference cycles
            self._sync()
            moved = sum(
                t.numel() * t.element_size() for t, p in zip(cache.tensors(), ptrs, strict=True) if t.data_ptr() != p
            )
            self.st.decode_alloc += moved + cache.nbytes - nbytes
            if self.device == "cuda":
                self.st.decode_device_alloc += torch.cuda.memory_allocated() - alloc

        return finish

    def _readback(self, ok: bool) -> None:
        """Record one write-and-read-back check (state update, indexer keys, shared storage)."""
        self.st.readback_ok = self.st.readback_ok and bool(ok)
        self.st.readbacks += 1

    def _attention(self, layer: LayerCache) -> None:
        """Prefill + decode on one attention layer with its own geometry, against fp32 SDPA.

        A shared layer: the tokens are written into its source layer (as the model does: the source
        computes K and V, the shared layers only read them) and read through the shared layer, which
        must hand back views of the source's storage.
        """
        spec, cache, S = self.spec, self.cache, self.cache.seq_len
        src = cache.source_of(layer.index)  # the layer holding the tensors (itself unless shared)
        ls = src.spec
        assert ls is not None
        B = check_batch(cache.batch_size)  # requests 0..B−1 are checked
        n_dec = min(DECODE_STEPS, S - 1)
        P = S - n_dec  # prompt tokens; positions P..S−1 are decoded
        index_dim = 0
        if src.kind == "mla":
            assert ls.mla is not None
            H_kv, d, d_v = 1, ls.mla.latent_dim, ls.mla.kv_lora_rank
            index_dim = ls.mla.index_head_dim or 0
            scale = 1.0 / math.sqrt(spec.head_dim)  # qk_nope_head_dim + qk_rope_head_dim (192)
            G = spec.num_q_heads
        else:
            H_kv, d, d_v = ls.num_kv_heads, ls.head_dim, ls.v_head_dim
            scale = 1.0 / math.sqrt(d)
            G = spec.num_q_heads // H_kv
        h, g = check_heads(B, S, H_kv, G, d, d_v, self.device)  # KV heads and queries per KV head checked
        H_q = h * g
        packed = self.codec is not None
        within: list[bool] = []  # per packed tensor: every value within the format's bound

        def stored(x: torch.Tensor, heads: int) -> tuple[torch.Tensor, torch.Tensor]:
            """(what is written into the cache, the values the reference attends over) for rows x [B, T, E]."""
            if not packed:
                x = self._stored(x)
                return x, x
            rows, ref, slack = self._quantize(x, heads)
            self._readback(slack <= 0)
            within.append(slack <= 0)
            return rows, ref

        idx_rows = None
        if index_dim:  # (B, S, index_head_dim): written with every token, read back bit for bit
            idx_rows, _ = stored(self._randn(B, S, index_dim), 1)

        if src.kind == "mla":
            lat_rows, lat = stored(self._randn(B, S, d), 1)  # (B, S, kv_lora_rank + qk_rope_head_dim)
            k_ref = lat.unsqueeze(1).float()  # (B, 1, S, d)
            v_ref = k_ref[..., :d_v]  # (B, 1, S, kv_lora_rank)

            def write(t0: int, t1: int) -> None:
                cache.write(src.index, t0, lat_rows[:, t0:t1], None if idx_rows is None else idx_rows[:, t0:t1])

        else:

            def heads_last(x: torch.Tensor) -> torch.Tensor:  # (B, H_kv, S, w) → (B, S, H_kv·w)
                return x.transpose(1, 2).reshape(B, S, -1)

            def heads_first(x: torch.Tensor) -> torch.Tensor:  # (B, S, H_kv·w) → (B, H_kv, S, w)
                return x.reshape(B, S, H_kv, -1).transpose(1, 2)

            if packed:  # uint8 rows (B, S, row bytes) and the dequantized values
                k_rows, k_all = stored(heads_last(self._randn(B, H_kv, S, d)), H_kv)
                v_rows, v_all = stored(heads_last(self._randn(B, H_kv, S, d_v)), H_kv)
                k_all, v_all = heads_first(k_all), heads_first(v_all)
            else:  # (B, H_kv, S, d) and (B, H_kv, S, d_v), the layout the cache writes
                k_rows = k_all = self._stored(self._randn(B, H_kv, S, d))
                v_rows = v_all = self._stored(self._randn(B, H_kv, S, d_v))
            k_ref, v_ref = k_all[:, :h].float(), v_all[:, :h].float()  # the checked KV heads, fp32
            del k_all, v_all

            def write(t0: int, t1: int) -> None:
                if packed:  # uint8 rows (B, T, row bytes)
                    cache.write(src.index, t0, k_rows[:, t0:t1], v_rows[:, t0:t1])
                else:
                    cache.write(src.index, t0, k_rows[:, :, t0:t1], v_rows[:, :, t0:t1])

        window = spec.window_of(src.kind) if src.kind == "sliding" else None
        chunk = spec.window_of(src.kind) if src.kind == "chunked" else None
        budget = LOGITS_BUDGET[self.device] // (B * H_q * S * 4)
        first_tensor = next(iter(src.tensors.values()))

        def step(t0: int, t1: int) -> None:
            """Write tokens t0..t1−1, attend with queries at those positions, compare."""
            q = self._randn(B, H_q, t1 - t0, d)
            write(t0, t1)
            if packed:  # rows read from the cache's storage and dequantized
                k, v, pos, read = self._read_packed(layer, t1, B)
            else:
                k, v, pos = cache.read(layer.index, t1)  # a shared layer: views of its source's tensors
                read = k
            if layer is not src:
                self._readback(read.data_ptr() == first_tensor.data_ptr())
            k, v = self._deq(k[:B, :h]), self._deq(v[:B, :h])  # views unless the cache is fp8
            if src.ring:  # one token at a time: the ring holds exactly the window
                m = positional_mask(torch.tensor([t1 - 1], device=self.device), pos, window=window, chunk=chunk)
                out = self._attend(q, k, v, mask=m, causal=False, scale=scale)
            else:
                out = self._attend(q, k, v, causal=True, scale=scale)
            self._compare(out, q, k_ref, v_ref, t1, window, chunk, scale)

        if src.ring:
            first = max(0, P - RING_STEPS)
            if first:
                write(0, first)
            for t in range(first, P):
                step(t, t + 1)
            what = f"{P - first} prompt tokens one by one"
        else:
            C = max(1, min(PREFILL_CHUNK, P, budget))
            if P - C:
                write(0, P - C)
            step(P - C, P)
            what = f"prefill chunk of {C} queries over {P} keys"
        finish = self._decode_guard()
        for t in range(P, S):
            step(t, t + 1)
        finish()
        heads = f"{H_q} of {spec.num_q_heads} query heads on {h} of {H_kv} KV heads"
        extra = ""
        if idx_rows is not None:  # the indexer keys written with every token, read back bit for bit
            got = cache.read_index(src.index, S)[:B]
            same = torch.equal(got.view(torch.uint8), idx_rows.to(got.dtype).view(torch.uint8))
            self._readback(same)
            extra = f", {S} indexer keys of {index_dim} read back {'exactly' if same else 'WRONG'}"
        if packed:
            bound = QUANT_BOUND[cache.kv_dtype.name]
            verdict = f"every value within {bound}" if all(within) else f"values OUTSIDE {bound}"
            extra += f"; {cache.kv_dtype.name} rows quantized with their scales ({verdict}), dequantized for attention"
        reads = f"reads layer {src.index}'s {src.kind} cache, same storage; " if layer is not src else ""
        self.notes.append(
            f"layer {layer.index} {layer.kind} ({reads}{heads}, d {d}, d_v {d_v}, {B} request(s)): {what}, "
            f"{n_dec} decode steps{extra}"
        )

    def _state(self, layer: LayerCache) -> None:
        """State layer (any of :data:`kvplan.specs.STATE_KINDS`): in-place decode updates, read back.

        Generic over the layer's tensors (:meth:`kvplan.specs.StateConfig.tensors`), for the checked
        requests: a random state is written (what a prefill leaves), then each of :data:`DECODE_STEPS`
        decode steps updates every tensor in place: a conv state drops its oldest token and appends a
        new one along its time axis (:data:`CONV_TIME_AXIS`; nothing when d_conv = 1 keeps no token), a
        recurrent state is decayed and added to (``s ← s/2 + x``), a packed state gets new bytes. Each
        update is compared bit for bit with the same update computed out of place.
        """
        B = check_batch(self.cache.batch_size)
        finish = self._decode_guard()
        ok = True
        for whole in layer.tensors.values():
            t = whole.narrow(0, 0, B)
            if t.dtype == torch.uint8:
                t.copy_(self._bytes(*t.shape))
            else:
                t.copy_(self._randn_as(t))  # the state a prefill leaves
        for _ in range(DECODE_STEPS):
            for name, whole in layer.tensors.items():
                t = whole.narrow(0, 0, B)
                before = t.clone()
                if t.dtype == torch.uint8:  # packed state: one row of bytes per request
                    want = self._bytes(*t.shape)
                    t.copy_(want)
                elif name == "conv":
                    axis = CONV_TIME_AXIS
                    n = t.shape[axis]  # d_conv − 1 past tokens
                    if n == 0:  # d_conv = 1 keeps no conv tokens: nothing to shift in
                        want = before
                    else:
                        new = self._randn_as(t.select(axis, 0)).unsqueeze(axis)  # one token
                        if n > 1:
                            t.narrow(axis, 0, n - 1).copy_(t.narrow(axis, 1, n - 1).clone())  # drop the oldest
                        t.narrow(axis, n - 1, 1).copy_(new)
                        want = torch.cat([before.narrow(axis, 1, n - 1), new], dim=axis)
                else:
                    x = self._randn_as(t)
                    t.mul_(0.5).add_(x)  # s ← s/2 + x, in place
                    want = before.mul(0.5).add(x)
                ok = ok and torch.equal(t, want)
        finish()
        self._readback(ok)
        shapes = ", ".join(
            f"{n} {tuple(x.shape)} {str(x.dtype).removeprefix('torch.')}" for n, x in layer.tensors.items()
        )
        self.notes.append(
            f"layer {layer.index} {layer.kind} ({shapes}): {DECODE_STEPS} in-place state updates on {B} request(s), "
            f"read back {'exactly' if ok else 'WRONG'}"
        )

    def _randn_as(self, t: torch.Tensor) -> torch.Tensor:
        """Standard normal values shaped and typed like ``t`` (drawn in fp32, then cast)."""
        x = torch.randn(t.shape, generator=self.gen, device=self.device, dtype=torch.float32)
        return x.to(t.dtype)


# --- verify ------------------------------------------------------------------------------------------


# Layer kinds kvplan's static cache (kvplan.kvcache) allocates nothing for yet: kind -> what they are.
UNALLOCATED_KINDS = {
    "compressed": "DeepSeek-V4 compressed attention",
    "cross": "cross-attention to the encoder's tokens",
    "hidden": "a hidden-state cache (XLNet mems, Reformer)",
}


def _refuse_unallocated_kinds(spec: ModelSpec, n_layers: int) -> None:
    """Refuse a model whose first ``n_layers`` layers include a kind :data:`UNALLOCATED_KINDS` names: its
    allocation could not equal the formula.

    Raises:
        UsageError: naming the model, the kind and what to use instead.
    """
    kinds = {layer.kind for layer in spec.layers[:n_layers]}
    if spec.prefix_tokens:
        raise UsageError(
            f"verify: {spec.name} caches {spec.prefix_tokens} prefix tokens with every request (CPM-Ant's prompt), "
            "which kvplan's static cache does not allocate yet; verify cannot measure them (kvplan estimate gives "
            "their bytes, checked against transformers 5.23)"
        )
    for kind, what in UNALLOCATED_KINDS.items():
        if kind in kinds:
            raise UsageError(
                f"verify: {spec.name} has {kind} layers ({what}), which kvplan's static cache does not allocate yet; "
                "verify cannot measure them (kvplan estimate gives their bytes, checked against transformers 5.23)"
            )


def verify(
    spec: ModelSpec,
    seq_len: int,
    batch_size: int = 1,
    kv_dtype: str | None = None,
    *,
    device: str = "auto",
    layers: int | None = None,
    check_attention: bool = True,
    progress: Progress | None = None,
    fit=None,
) -> VerifyResult:
    """Allocate ``spec``'s cache for ``batch_size × seq_len`` tokens, measure it, check attention on it.

    Args:
        spec: the model.
        seq_len: tokens per request (>= 1).
        batch_size: requests (>= 1).
        kv_dtype: KV dtype name; None / ``auto`` = the model dtype.
        device: ``auto``, ``cuda`` or ``cpu``.
        layers: allocate only the first N layers (the formula is for the same layers).
        check_attention: run the prefill/decode attention check.
        progress: ``callback(stage, done, total)`` for a progress display.
        fit: a :class:`kvplan.fit.FitResult` this verify checks (see :func:`verify_fit`), or None.

    Returns:
        A :class:`VerifyResult`.

    Raises:
        UsageError: bad seq/batch/layers/dtype/device (names the flag), or a layer kind the static cache does
            not allocate (:data:`UNALLOCATED_KINDS`).
        DoesNotFit: the cache (plus the check's scratch) exceeds free device memory; nothing is allocated.
    """
    t_start = time.perf_counter()
    for flag, value in (("--seq", seq_len), ("--batch", batch_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise UsageError(f"{flag}: {value!r} must be an integer >= 1")
    n_layers = spec.num_layers if layers is None else layers
    if isinstance(n_layers, bool) or not isinstance(n_layers, int) or not 1 <= n_layers <= spec.num_layers:
        raise UsageError(f"--layers: {layers!r} must be an integer in 1..{spec.num_layers} ({spec.name})")
    _refuse_unallocated_kinds(spec, n_layers)
    dtype = resolve_kv_dtype(spec, kv_dtype)
    dev = resolve_device(device)
    formula = sum(g.bytes for g in layer_groups(spec, seq_len, dtype, layers=range(n_layers))) * batch_size
    overhead = check_overhead_bytes(spec, seq_len, batch_size, n_layers, dev) if check_attention else 0
    what = f"{spec.name} --seq {seq_len} --batch {batch_size} --kv-dtype {dtype.name}"
    _refuse_if_too_big(formula + overhead, formula, dev, what)

    # Warm up: a one-token cache of the same layout runs every code path once (thread pools, Python
    # objects, allocator bookkeeping, the progress display), so their one-time memory falls before the
    # baseline.
    if dev == "cpu":
        _pin_mmap_threshold()
    if progress:
        for stage, total in (("allocating", n_layers), ("writing pages", 1)):
            progress(stage, 0, total)
    StaticKVCache(spec, 1, 1, dtype, device=dev, layers=n_layers, fill=0)
    torch.empty(8 << 20, dtype=torch.uint8, device=dev).fill_(0)  # big enough to start the worker threads
    torch.randn(64, 64, device=dev).sum().item()
    gc.collect()
    reserved0 = driver0 = None
    if dev == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        base = torch.cuda.memory_allocated()
        reserved0 = torch.cuda.memory_reserved()
        driver0 = torch.cuda.mem_get_info()[0]
    else:
        _malloc_trim()
        base = rss_bytes()

    try:
        cache = StaticKVCache(spec, seq_len, batch_size, dtype, device=dev, layers=n_layers)
    except torch.OutOfMemoryError as e:  # pragma: no cover - refused above unless memory vanished meanwhile
        raise DoesNotFit(f"verify {what}: the device ran out of memory while allocating ({e})") from None
    tensors = cache.tensors()
    if progress:
        progress("allocating", n_layers, n_layers)
    for n, t in enumerate(tensors):
        t.view(torch.uint8).fill_(0)  # write every byte: CPU pages become resident
        if progress and (n % 8 == 7 or n == len(tensors) - 1):
            progress("writing pages", n + 1, len(tensors))

    reserved = driver = None
    if dev == "cuda":
        torch.cuda.synchronize()
        measured = torch.cuda.memory_allocated() - base
        reserved = torch.cuda.memory_reserved() - reserved0
        driver = driver0 - torch.cuda.mem_get_info()[0]
        tol_each, measure = CUDA_ROUNDING, "torch.cuda.memory_allocated delta"
        device_name = torch.cuda.get_device_name()
    else:
        measured = rss_bytes() - base
        tol_each = CPU_PAGES_PER_TENSOR * page_size()
        measure = "RSS delta (/proc/self/statm), every byte written"
        device_name = "cpu"
    allocated = cache.nbytes
    num_tensors = len(tensors)
    tolerance = tol_each * num_tensors

    check = _AttentionCheck(cache, dev, progress)
    if check_attention:
        check.run(_checked_layers(spec, n_layers))
    st, notes = check.st, tuple(check.notes)
    attention_ok = st.ok if st.ran else None
    readback_ok = st.readback_ok if st.readbacks else None
    mismatched = tuple(cache.mismatched_layers())  # every layer's bytes against its own formula
    diff = measured - formula
    ok = (
        abs(diff) <= tolerance
        and attention_ok is not False
        and readback_ok is not False
        and st.decode_alloc == 0
        and allocated == formula
        and not mismatched
    )
    fit_fields: dict = {}
    if fit is not None:
        every_layer = sum(g.bytes for g in layer_groups(spec, seq_len, dtype)) * batch_size
        fit_fields = {
            "fit_gpu": fit.gpu_name,
            "fit_engine": fit.engine,
            "fit_requests": fit.max_concurrent_requests,
            "fit_kv_budget_bytes": fit.kv_budget_bytes,
            "fit_formula_bytes": every_layer,
        }
        ok = ok and every_layer <= fit.kv_budget_bytes
    del cache, tensors, check
    if dev == "cuda":
        gc.collect()
        torch.cuda.empty_cache()
    return VerifyResult(
        model=spec.name,
        device=dev,
        seq_len=seq_len,
        batch_size=batch_size,
        kv_dtype=dtype.name,
        layers=n_layers,
        formula_bytes=formula,
        measured_bytes=measured,
        diff_bytes=diff,
        diff_pct=100.0 * diff / formula if formula else 0.0,
        tolerance_bytes=tolerance,
        attention_max_abs_err=st.max_err if st.ran else None,
        attention_ok=attention_ok,
        decode_alloc_bytes=st.decode_alloc,
        transient_peak_bytes=st.peak,
        ok=ok,
        allocated_bytes=allocated,
        num_tensors=num_tensors,
        reserved_bytes=reserved,
        driver_bytes=driver,
        measure=measure,
        attention_checks=notes,
        device_name=device_name,
        seconds=round(time.perf_counter() - t_start, 3),
        decode_device_alloc_bytes=st.decode_device_alloc if dev == "cuda" else None,
        readback_ok=readback_ok,
        mismatched_layers=mismatched,
        **fit_fields,
    )


def fit_plan(
    spec: ModelSpec,
    seq_len: int,
    kv_dtype: str | None = None,
    *,
    device: str = "auto",
    gpu: str | None = None,
    engine: str = "vllm",
    kv_cache_memory_bytes: int | None = None,
):
    """The :func:`kvplan.fit.require_fit` plan (TP = 1) for requests of ``seq_len`` tokens on ``gpu``.

    ``gpu`` None: on CUDA, this GPU (its ``mem_get_info`` total as a custom GPU); on CPU it is required.

    Raises:
        UsageError: no GPU on CPU, unknown GPU/engine/dtype, or the plan's own usage errors.
        DoesNotFit: not one request fits (the message lists what would).
    """
    from kvplan import fit as fitmod
    from kvplan.gpus import custom_gpu, get_gpu

    dev = resolve_device(device)
    if gpu is None:
        if dev != "cuda":
            raise UsageError("--gpu: --fit on cpu needs --gpu (a catalog GPU such as h200, or a size such as 24GiB)")
        g = custom_gpu(torch.cuda.mem_get_info()[1], torch.cuda.get_device_name())
    else:
        g = get_gpu(gpu)
    from kvplan.api import fit_options

    opts = fit_options(
        engine=engine, max_model_len=seq_len, kv_dtype=kv_dtype, kv_cache_memory_bytes=kv_cache_memory_bytes
    )
    return fitmod.require_fit(spec, g, opts)


def verify_fit(
    spec: ModelSpec,
    seq_len: int,
    kv_dtype: str | None = None,
    *,
    device: str = "auto",
    layers: int | None = None,
    gpu: str | None = None,
    engine: str = "vllm",
    kv_cache_memory_bytes: int | None = None,
    check_attention: bool = True,
    progress: Progress | None = None,
) -> VerifyResult:
    """Verify the cache of as many requests of ``seq_len`` tokens as :mod:`kvplan.fit` says fit on a GPU.

    Allocates ``plan.max_concurrent_requests`` requests (:func:`fit_plan`) and checks them as
    :func:`verify` does; ``ok`` also needs their exact bytes (every layer) within the plan's KV budget.
    The engine's block rounding makes the plan count at least the exact bytes per request.

    Raises:
        UsageError, DoesNotFit: as :func:`fit_plan` and :func:`verify` (a plan bigger than this device's
            free memory is refused before allocating).
    """
    plan = fit_plan(
        spec, seq_len, kv_dtype, device=device, gpu=gpu, engine=engine, kv_cache_memory_bytes=kv_cache_memory_bytes
    )
    return verify(
        spec,
        seq_len,
        plan.max_concurrent_requests,
        kv_dtype,
        device=device,
        layers=layers,
        check_attention=check_attention,
        progress=progress,
        fit=plan,
    )
