"""Reading a serving engine's start-up log: which engine and version, which model and GPU, the settings it
states, and every KV-cache figure it printed (``kvplan fit --from-log FILE``).

:func:`read_log` detects the engine (:func:`detect_engine`) and hands the lines to that engine's parser
(:mod:`kvplan.logs.vllm`, :mod:`kvplan.logs.sglang`, :mod:`kvplan.logs.trtllm`, :mod:`kvplan.logs.llamacpp`),
which returns a :class:`LogReading`. The parsers are regular expressions over the exact formats each engine
prints (the formats and the releases that print them are cited beside each pattern); they never compute a
plan, never print, and import nothing but :mod:`re`, :mod:`ast`, this package and :func:`kvplan.units.shorten`.
Every number they read goes through :func:`num` (or :func:`check_value`), bounded below :data:`MAX_LOG_NUMBER`.
What a plan needs and the log does not state is listed in :attr:`LogReading.missing`, so the caller can say so.

Figures keep the names of the engine-log corpus (``tests/fixtures/engine_logs/*.yaml`` ``printed``): GiB
values as printed (floats), token and block counts as ints. A figure printed once per worker is kept in
:attr:`LogReading.per_worker` in log order; ``printed`` holds the first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from kvplan.units import shorten

__all__ = ["LogReading", "detect_engine", "read_log", "ENGINES", "NotALog", "LogNumberError", "MAX_LOG_NUMBER"]

ENGINES = ("vllm", "sglang", "trtllm", "llamacpp")

# No figure a start-up log prints reaches 10^18 (bytes: an exabyte; tokens, blocks, GiB, MiB, ratios far
# below): a number at or above it, or written in more than MAX_NUMBER_CHARS characters, is no engine's.
MAX_LOG_NUMBER = 10**18
MAX_NUMBER_CHARS = 64


class NotALog(ValueError):
    """The text is no start-up log of an engine kvplan reads (the message names what was looked for)."""


class LogNumberError(ValueError):
    """A number in a log that no engine prints (at or above :data:`MAX_LOG_NUMBER`, not finite, or longer than
    :data:`MAX_NUMBER_CHARS` characters). ``text`` is the number as the log wrote it (found again by
    :func:`read_log`, which names the line); ``key`` is the figure or setting it was read as, when known."""

    def __init__(self, text: str, key: str = "", line: int | None = None):
        self.text, self.key, self.line = text, key, line
        where = f"line {line}: " if line else ""
        what = f"{key} = " if key else "the number "
        super().__init__(f"{where}{what}{shorten(text)} is beyond any figure an engine prints (below 10^18)")


@dataclass
class LogReading:
    """What one start-up log says.

    Attributes:
        engine: ``vllm``, ``sglang``, ``trtllm`` or ``llamacpp``.
        generation: vLLM's engine, ``v0`` or ``v1`` (None for the others, or when the lines do not tell).
        version: the release as printed (``0.10.2``), or as inferred (see ``version_source``); None when unknown.
        version_source: how the version was found: ``printed: '...'``, ``fingerprint: [file.py:LINE] ...``
            (vLLM's logger prefixes, :mod:`kvplan.logs.vllm_fingerprints`), ``format: ...`` (the line formats
            narrow it to a range; ``version`` is then that range's first release), or "".
        versions: the releases the fingerprints match (vLLM), oldest first; empty when not by fingerprint.
        model_id: the model as the log names it (a Hugging Face id or a local path), or None.
        architecture: the model class the log names (SGLang ``type=LlamaForCausalLM``), or None.
        gpu_name: the device name as printed, or None.
        gpu_total_bytes: the device's total memory as printed (bytes of the rounded figure), or None.
        gpu_total_source: which figure gave it (``total_gpu_memory=23.58GiB``).
        tp, pp: tensor- and pipeline-parallel sizes the log states, or None.
        min_tp: the smallest TP the rank prefixes allow (``Worker_TP3`` → 4; 1 when none shows).
        settings: the settings the log states, by the engine's own names (vLLM ``max_model_len``, SGLang
            ``mem_fraction_static``, llama.cpp ``n_ctx``...).
        printed: every figure the engine printed (first occurrence), corpus names.
        per_worker: figures printed once per worker or device, in log order (``kv_tokens``: [...]).
        lines: lines read (non-empty).
        matched: lines that matched a known format.
        missing: what a plan needs that the log does not state (``tensor_parallel_size``, ``model`` ...).
        notes: what the parser noticed (an error line, a budget at or below zero ...).
    """

    engine: str
    generation: str | None = None
    version: str | None = None
    version_source: str = ""
    versions: tuple[str, ...] = ()
    model_id: str | None = None
    architecture: str | None = None
    gpu_name: str | None = None
    gpu_total_bytes: int | None = None
    gpu_total_source: str = ""
    tp: int | None = None
    pp: int | None = None
    min_tp: int = 1
    settings: dict = field(default_factory=dict)
    printed: dict = field(default_factory=dict)
    per_worker: dict = field(default_factory=dict)
    lines: int = 0
    matched: int = 0
    missing: list = field(default_factory=list)
    notes: list = field(default_factory=list)

    def put(self, key: str, value) -> None:
        """Record a printed figure: the first occurrence in ``printed``, every occurrence in ``per_worker``.

        Raises:
            LogNumberError: a number no engine prints (:func:`check_value`).
        """
        check_value(key, value)
        self.printed.setdefault(key, value)
        self.per_worker.setdefault(key, []).append(value)

    def setting(self, key: str, value) -> None:
        """Record a stated setting (the first statement wins).

        Raises:
            LogNumberError: a number no engine prints (:func:`check_value`).
        """
        check_value(key, value)
        self.settings.setdefault(key, value)


# --- detection ------------------------------------------------------------------------------------------

# Phrases only one engine prints (each engine's module cites where); a log is the engine with most hits.
_MARKERS: dict[str, tuple[str, ...]] = {
    "vllm": (
        r"GPU KV cache size:",
        r"# (?:GPU|CUDA|cuda|%s|\w+) blocks: \d+",
        r"GPU blocks: \d+, # CPU blocks",
        r"Maximum concurrency for [\d,]+ tokens per request",
        r"Available KV cache memory:",
        r"Model loading took",
        r"Loading model weights took",
        r"Memory profiling (?:results|takes)",
        r"the current vLLM instance can use",
        r"vLLM API server version",
        r"Initializing a V1 LLM engine",
        r"num_gpu_blocks is:",
        r"maximum number of tokens that can be stored in KV cache",
        r"To serve at least one request with the models's max seq len",
        r"No available memory for the cache blocks",
        r"non-default args:",
        r"Free memory on device \(",
        r"from vllm import",
        r"kv_cache_utils\.py",
        r"gpu_worker\.py",
        r"VllmWorkerProcess",
        r"\bvllm\b",
    ),
    "sglang": (
        r"KV Cache is allocated\.",
        r"Load weight (?:begin|end)\.",
        r"max_total_num_tokens=",
        r"Memory pool end\.",
        r"Capture cuda graph (?:begin|end)",
        r"Use sliding window memory pool",
        r"Mamba Cache is allocated",
        r"exceeds the maximum allowed length",
        r"is larger than the profiled value",
        r"Init torch distributed ends",
        r"\bsglang\b",
        r"\[\d{4}-\d\d-\d\d [\d:]+ (?:DP\d+ )?TP\d+\]",
    ),
    "trtllm": (
        r"\[TensorRT-LLM\]",
        r"\[TRT-LLM\]",
        r"paged [Kk][Vv] cache",
        r"Loaded engine size:",
        r"IExecutionContext",
        r"KV cache primary pool",
        r"Number of tokens per block:",
        r"for k/v cache\.",
        r"Max KV cache (?:blocks|pages) per",
        r"GPU memory for (?:runtime buffers|decoder)",
        r"free_gpu_memory_fraction",
    ),
    "llamacpp": (
        r"\bllama_(?:kv_cache|context|new_context_with_model|model_load)",
        r"\bload_tensors:",
        r"\bprint_info:",
        r"\bllm_load_",
        r"KV self size",
        r"compute buffer size =",
        r"KV buffer size =",
        r"\bggml_",
    ),
}
_MARKER_RE = {e: [re.compile(p) for p in ps] for e, ps in _MARKERS.items()}


def detect_engine(text: str) -> str | None:
    """The engine whose start-up lines ``text`` holds (``vllm``, ``sglang``, ``trtllm``, ``llamacpp``), by the
    number of lines matching its own phrases; None when no line matches any."""
    score = dict.fromkeys(ENGINES, 0)
    for line in text.splitlines():
        for engine, pats in _MARKER_RE.items():
            if any(p.search(line) for p in pats):
                score[engine] += 1
    best = max(ENGINES, key=lambda e: score[e])
    return best if score[best] else None


def read_log(text: str, engine: str | None = None) -> LogReading:
    """Read an engine's start-up log.

    Args:
        text: the log (any part of it; lines in any order are read in order).
        engine: the engine, when known (else :func:`detect_engine`).

    Returns:
        A :class:`LogReading`.

    Raises:
        NotALog: no line of any engine kvplan reads (the message lists what it looked for).
        LogNumberError: a number no engine prints; the message names its line (``line 12: …``).
    """
    engine = engine or detect_engine(text)
    if engine is None:
        raise NotALog(
            "no start-up line of vLLM ('GPU KV cache size', '# GPU blocks', 'Available KV cache memory'), SGLang "
            "('KV Cache is allocated', 'max_total_num_tokens='), TensorRT-LLM ('[TensorRT-LLM]', 'paged KV cache') "
            "or llama.cpp ('llama_kv_cache', 'KV self size', 'load_tensors:')"
        )
    from importlib import import_module

    parser = import_module(f"kvplan.logs.{engine}")
    lines = [ln.rstrip("\r\n") for ln in text.splitlines() if ln.strip()]
    try:
        return parser.parse(lines)
    except LogNumberError as e:
        at = next((i for i, ln in enumerate(text.splitlines(), 1) if e.text in clean(ln)), None)
        if at is None:
            raise
        raise LogNumberError(e.text, e.key, at) from None


# --- helpers the parsers share ----------------------------------------------------------------------------

ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def clean(line: str) -> str:
    """A log line without terminal colour codes."""
    return ANSI.sub("", line)


def num(text: str) -> int | float:
    """``"1,037,152"`` → 1037152, ``"10.68"`` → 10.68, ``"-0.03"`` → -0.03. Every number the parsers read
    from a line's text goes through here.

    Raises:
        LogNumberError: longer than :data:`MAX_NUMBER_CHARS` characters, not finite, or at or above
            :data:`MAX_LOG_NUMBER` in size (no engine prints it; ``int()`` of 4,300+ digits would fail).
    """
    t = text.replace(",", "")
    if len(t) > MAX_NUMBER_CHARS:
        raise LogNumberError(text)
    value = float(t) if ("." in t or "e" in t.lower()) else int(t)
    if not abs(value) < MAX_LOG_NUMBER:  # also NaN
        raise LogNumberError(text)
    return value


def integer(text: str) -> int:
    """A count the log prints (``\\d+`` in the patterns) as an int, bounded as :func:`num` bounds it.

    Raises:
        LogNumberError: as :func:`num`.
    """
    return int(num(text))


def check_value(key: str, value) -> None:
    """Check a value before it is recorded as a figure or setting (numbers parsed by ``ast.literal_eval``
    from a settings line reach here without :func:`num`): ints and floats below :data:`MAX_LOG_NUMBER` and
    finite, number-like text no longer than :data:`MAX_NUMBER_CHARS`; lists, tuples and dicts item by item.

    Raises:
        LogNumberError: naming ``key``.
    """
    if isinstance(value, bool) or value is None:
        return
    if isinstance(value, (int, float)):
        if not abs(value) < MAX_LOG_NUMBER:
            try:
                text = str(value)
            except ValueError:  # an int over Python's 4,300-digit limit on str()
                text = f"an integer of {value.bit_length():,} bits"
            raise LogNumberError(text, key)
    elif isinstance(value, str):
        if len(value) > MAX_NUMBER_CHARS and re.fullmatch(r"[-+]?[\d_,.]+(?:[eE][-+]?\d+)?", value):
            raise LogNumberError(value, key)
    elif isinstance(value, dict):
        for k, v in value.items():
            check_value(f"{key}.{k}", v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            check_value(key, v)


def gib_bytes(value: float) -> int:
    """Bytes of a GiB figure as printed (``23.58`` → 25,318,915,604): the value, not its rounding interval."""
    return int(round(value * (1 << 30)))
