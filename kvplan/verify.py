"""Allocate a real KV cache, measure it, and compare with kvplan's formula (``kvplan verify``).

Steps (:func:`verify`):

1. Validate the flags and compute the formula (:func:`kvplan.calc.layer_groups` for the layers allocated).
2. Refuse, before allocating anything, a cache larger than the memory available: on CUDA the driver's free
   memory (``torch.cuda.mem_get_info``) minus a margin; on CPU ``MemAvailable`` (/proc/meminfo) minus a
   margin. Raises :class:`~kvplan.errors.DoesNotFit`, so a verify never runs a machine or a GPU out of memory.
3. Measure, allocate :class:`~kvplan.kvcache.StaticKVCache`, write every byte, measure again. CUDA: the
   ``torch.cuda.memory_allocated`` delta (also reserved and the driver's view). CPU: the resident-set delta
   from /proc/self/statm after the pages are written (freed heap pages are returned with ``malloc_trim``
   first, so reused memory is counted).
4. Run a chunked prefill and a few decode steps through :func:`kvplan.attention.grouped_query_attention`
   on the first layers of each attention kind, writing into and reading from the cache, and compare the
   outputs with ``torch.nn.functional.scaled_dot_product_attention`` in fp32 over the full token history
   with an explicit mask. Check decode allocates no cache memory (storage addresses and the cache's bytes
   unchanged; on CUDA the device-wide ``memory_allocated`` growth is reported too).
5. Agree when ``|measured − formula| <= tolerance``: the allocator's rounding per tensor, 512 B on CUDA
   (PyTorch's caching allocator rounds each block to 512 B), two pages per tensor on CPU (glibc's
   mmap'd blocks: a chunk header in front of the data, and the data rounded up to whole pages).

Limits, stated so a mismatch can be read:

- CUDA: a block over 1 MiB is split off its segment only when more than 1 MiB would remain
  (``CUDACachingAllocator`` ``should_split``), so a tensor whose rounded size leaves 1 MiB or less of its
  segment counts the rest as allocated too. Sizes that are whole multiples of 2 MiB (every run of
  ``scripts/gpu_check.sh``) are exact; odd sizes can measure up to 1 MiB more per tensor.
- CPU: glibc's mmap threshold is pinned at 128 KiB (:func:`_pin_mmap_threshold`) so every large tensor
  gets fresh pages; the process's own bookkeeping while allocating adds a page or so.
- The attention check covers the first :data:`CHECK_LAYERS_PER_KIND` layers of each kind, the first
  :data:`CHECK_REQUESTS` requests, and as many heads as :data:`REF_BUDGET` allows (:func:`check_heads`);
  every byte of the cache is still allocated and written. Sliding/chunked rings hold exactly
  ``min(S, window)`` tokens (the formula's count), so their prompt is fed one token at a time.
  Packed dtypes (q8_0, nvfp4, int8 with scales) are written as raw rows; no attention runs on them.

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
from kvplan.kvcache import KV_KINDS, LayerCache, StaticKVCache, torch_dtype_of
from kvplan.specs import ModelSpec
from kvplan.units import GIB, fmt_gib

DEVICES = ("auto", "cuda", "cpu")
CUDA_ROUNDING = 512  # PyTorch CUDACachingAllocator: every block is a multiple of 512 B (kMinBlockSize)
DECODE_STEPS = 4  # decode steps checked per attention layer
PREFILL_CHUNK = 32  # query tokens of the checked prefill chunk (fewer when the logits budget says so)
RING_STEPS = 8  # prompt tokens fed one at a time into a sliding/chunked ring before the decode steps
CHECK_LAYERS_PER_KIND = 2  # attention layers checked per attention kind
CHECK_REQUESTS = 2  # requests (batch rows) the attention check writes and reads; the rest stay filled
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
        ok: diff within tolerance, attention_ok not False, decode_alloc_bytes == 0.
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

    def to_json(self) -> dict:
        """Plain JSON object (the keys of the dataclass, in order)."""
        d = asdict(self)
        d["attention_checks"] = list(self.attention_checks)
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
    """Dtype the attention check computes in: the cache's own float type, else the model's (fp8 caches)."""
    if cache_dtype in RTOL:
        return cache_dtype
    if cache_dtype is None:
        return None  # packed rows: no attention check
    model = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
    return model.get(spec.dtype, torch.bfloat16)


def _checked_layers(spec: ModelSpec, n_layers: int) -> list[int]:
    """The first :data:`CHECK_LAYERS_PER_KIND` layers of each attention kind (and the first Mamba layer)."""
    picked: list[int] = []
    counts: dict[str, int] = {}
    for i in range(n_layers):
        kind = spec.layer_kinds[i]
        limit = 1 if kind == "mamba" else CHECK_LAYERS_PER_KIND
        if kind in (*KV_KINDS, "mla", "mamba") and counts.get(kind, 0) < limit:
            counts[kind] = counts.get(kind, 0) + 1
            picked.append(i)
    return picked


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
    ``b·S·(576 + 512)·(e + 4)`` for MLA, e <= 4), the reference's per-head expansion
    (:data:`REF_BUDGET`), and three logits budgets (ours, SDPA's, the probabilities).
    """
    e = 4  # bound: fp32
    batch_size = check_batch(batch_size)
    widths = []
    for i in _checked_layers(spec, n_layers):
        kind = spec.layer_kinds[i]
        if kind in KV_KINDS:
            widths.append(spec.num_kv_heads * (spec.head_dim + spec.v_dim))
        elif kind == "mla" and spec.mla is not None:
            widths.append(spec.mla.latent_dim + spec.mla.kv_lora_rank)
    history = max(widths, default=0) * seq_len * batch_size * (e + 4)
    return history + REF_BUDGET[device] + 3 * LOGITS_BUDGET[device]


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
    if need > usable:
        raise DoesNotFit(
            f"verify {what}: the cache needs {formula:,} B ({fmt_gib(formula)}) and its check "
            f"{need - formula:,} B more, above the {fmt_gib(max(usable, 0))} usable on {where}; "
            "nothing was allocated; lower --seq or --batch, or allocate fewer layers with --layers N"
        )


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


class _AttentionCheck:
    """Runs prefill + decode on chosen layers of a cache against fp32 SDPA (see module docstring)."""

    def __init__(self, cache: StaticKVCache, device: str, progress: Progress | None) -> None:
        self.cache = cache
        self.device = device
        self.progress = progress
        self.spec = cache.spec
        self.cache_dt = torch_dtype_of(cache.kv_dtype)
        self.compute_dt = _compute_dtype(cache.spec, self.cache_dt)
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
        self.st.max_err = max(self.st.max_err, err)
        self.st.ok = self.st.ok and err <= bound and math.isfinite(err)
        self.st.ran += 1

    # the check of one layer ---------------------------------------------------------------------------
    def run(self, layers: list[int]) -> None:
        for n, i in enumerate(layers):
            if self.progress:
                self.progress("attention check", n, len(layers))
            layer = self.cache.layers[i]
            if layer.kind == "mamba":
                self._mamba(layer)
            elif layer.packed:
                self._packed(layer)
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

    def _attention(self, layer: LayerCache) -> None:
        spec, cache, S = self.spec, self.cache, self.cache.seq_len
        B = check_batch(cache.batch_size)  # requests 0..B−1 are checked
        n_dec = min(DECODE_STEPS, S - 1)
        P = S - n_dec  # prompt tokens; positions P..S−1 are decoded
        if layer.kind == "mla":
            assert spec.mla is not None
            H_kv, d, d_v = 1, spec.mla.latent_dim, spec.mla.kv_lora_rank
            scale = 1.0 / math.sqrt(spec.head_dim)  # qk_nope_head_dim + qk_rope_head_dim (192)
        else:
            H_kv, d, d_v = spec.num_kv_heads, spec.head_dim, spec.v_dim
            scale = 1.0 / math.sqrt(d)
        G = spec.num_q_heads // H_kv if layer.kind != "mla" else spec.num_q_heads
        h, g = check_heads(B, S, H_kv, G, d, d_v, self.device)  # KV heads and queries per KV head checked
        H_q = h * g

        if layer.kind == "mla":
            hist = self._stored(self._randn(B, S, d))  # (B, S, 576)
            k_ref = hist.unsqueeze(1).float()  # (B, 1, S, 576)
            v_ref = k_ref[..., :d_v]  # (B, 1, S, 512)

            def write(t0: int, t1: int) -> None:
                cache.write(layer.index, t0, hist[:, t0:t1])

        else:
            hist_k = self._stored(self._randn(B, H_kv, S, d))  # (B, H_kv, S, d)
            hist_v = self._stored(self._randn(B, H_kv, S, d_v))  # (B, H_kv, S, d_v)
            k_ref, v_ref = hist_k[:, :h].float(), hist_v[:, :h].float()  # the checked KV heads, fp32

            def write(t0: int, t1: int) -> None:
                cache.write(layer.index, t0, hist_k[:, :, t0:t1], hist_v[:, :, t0:t1])

        window = spec.sliding_window if layer.kind == "sliding" else None
        chunk = spec.attention_chunk_size if layer.kind == "chunked" else None
        budget = LOGITS_BUDGET[self.device] // (B * H_q * S * 4)

        def step(t0: int, t1: int) -> None:
            """Write tokens t0..t1−1, attend with queries at those positions, compare."""
            q = self._randn(B, H_q, t1 - t0, d)
            write(t0, t1)
            k, v, pos = cache.read(layer.index, t1)
            k, v = self._deq(k[:B, :h]), self._deq(v[:B, :h])  # views unless the cache is fp8
            if layer.ring:  # one token at a time: the ring holds exactly the window
                m = positional_mask(torch.tensor([t1 - 1], device=self.device), pos, window=window, chunk=chunk)
                out = self._attend(q, k, v, mask=m, causal=False, scale=scale)
            else:
                out = self._attend(q, k, v, causal=True, scale=scale)
            self._compare(out, q, k_ref, v_ref, t1, window, chunk, scale)

        if layer.ring:
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
        self.notes.append(
            f"layer {layer.index} {layer.kind} ({heads}, d {d}, d_v {d_v}, {B} request(s)): {what}, "
            f"{n_dec} decode steps"
        )

    def _packed(self, layer: LayerCache) -> None:
        """Packed (uint8-row) storage: write random rows for prefill and decode; no attention math."""
        cache, S = self.cache, self.cache.seq_len
        B = check_batch(cache.batch_size)
        names = ("latent",) if layer.kind == "mla" else ("k", "v")
        rows = [layer.tensors[n].shape[-1] for n in names]
        n_dec = min(DECODE_STEPS, S - 1)
        P = S - n_dec
        cache.write(layer.index, 0, *[self._bytes(B, P, r) for r in rows])
        finish = self._decode_guard()
        for t in range(P, S):
            cache.write(layer.index, t, *[self._bytes(B, 1, r) for r in rows])
        finish()
        self.notes.append(f"layer {layer.index} {layer.kind}: packed {cache.kv_dtype.name} rows, {n_dec} decode writes")

    def _mamba(self, layer: LayerCache) -> None:
        """Mamba state: in-place state updates per decode step (shift the conv window, decay the ssm)."""
        finish = self._decode_guard()
        for _ in range(DECODE_STEPS):
            if "conv" in layer.tensors:
                conv, ssm = layer.tensors["conv"], layer.tensors["ssm"]
                if conv.shape[-1] > 1:
                    conv[..., :-1].copy_(conv[..., 1:].clone())  # (B, d_inner, d_conv − 1): drop the oldest
                if conv.shape[-1] > 0:  # d_conv = 1 keeps no conv columns: nothing to shift in
                    conv[..., -1].copy_(torch.randn(conv.shape[:-1], generator=self.gen, device=self.device))
                ssm.mul_(0.5).add_(torch.randn(ssm.shape, generator=self.gen, device=self.device).to(ssm.dtype))
            else:
                st = layer.tensors["state"]
                st.copy_(self._bytes(*st.shape))
        finish()
        self.notes.append(f"layer {layer.index} mamba: {DECODE_STEPS} in-place state updates")


# --- verify ------------------------------------------------------------------------------------------


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
        UsageError: bad seq/batch/layers/dtype/device (names the flag).
        DoesNotFit: the cache (plus the check's scratch) exceeds free device memory; nothing is allocated.
    """
    t_start = time.perf_counter()
    for flag, value in (("--seq", seq_len), ("--batch", batch_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise UsageError(f"{flag}: {value!r} must be an integer >= 1")
    n_layers = spec.num_layers if layers is None else layers
    if isinstance(n_layers, bool) or not isinstance(n_layers, int) or not 1 <= n_layers <= spec.num_layers:
        raise UsageError(f"--layers: {layers!r} must be an integer in 1..{spec.num_layers} ({spec.name})")
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
    diff = measured - formula
    ok = abs(diff) <= tolerance and attention_ok is not False and st.decode_alloc == 0 and allocated == formula
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
    opts = fitmod.FitOptions(
        engine=fitmod.get_engine(engine),
        max_model_len=seq_len,
        kv_dtype=kv_dtype,
        kv_cache_memory_bytes=kv_cache_memory_bytes,
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
