"""The GPU catalog: how much memory each GPU has, as the driver reports it and as CUDA sees it.

The catalog is ``kvplan/data/gpus.yaml`` (bundled with the package; its header documents every field
and where the numbers come from). Three totals matter and differ:

- marketed size (``80 GB``): the vendor's round number, for display only;
- the nvidia-smi / rocm-smi total (``81559 MiB`` on an H100 SXM): what people see on the machine;
- the CUDA-visible total (what ``cudaMemGetInfo`` / ``torch.cuda.mem_get_info`` returns, vLLM's
  ``total_gpu_memory``): the smi total less the driver's reserve (about 0.4-0.75 GiB on NVIDIA parts).
  Engines budget from this one, so :attr:`GPU.cuda_total_bytes` is what planning uses: the observed
  value where a log shows it, else ``smi total - reserve_mib``.

``--gpu`` accepts a catalog id or alias (ignoring case, "-", "_" and spaces) or a size with a unit
(``80GB`` = 80 × 10⁹ B, ``80GiB`` = 80 × 2³⁰ B, ``81121MiB``); a size is taken as the CUDA-visible total
(a size equal to a card's nvidia-smi total is planned as given, with a note: :func:`gpu_notes`).
"""

from __future__ import annotations

import difflib
import functools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvplan.errors import UsageError
from kvplan.units import MIB, parse_bytes

VENDORS = ("nvidia", "amd")
STATUSES = ("confirmed", "corroborated", "unconfirmed")

_SIZE_RE = re.compile(r"\s*\d+(?:\.\d+)?\s*[a-zA-Z]+\s*")  # a number with a unit: 80GB, 80GiB, 81559MiB
_ID_RE = re.compile(r"[a-z0-9][a-z0-9-]*")
_SEPARATORS = re.compile(r"[-_\s]+")


def _norm(name: str) -> str:
    """The form names are matched in: lower case, without '-', '_' and spaces (``RTX 4090`` -> ``rtx4090``)."""
    return _SEPARATORS.sub("", name.strip().lower())


class CatalogError(UsageError):
    """The GPU catalog YAML is malformed: the message names the file, the entry id and the field."""


@dataclass(frozen=True, eq=False)
class GPU:
    """One GPU of the catalog, or a custom one made from a size (``--gpu 80GiB``).

    Attributes:
        id: catalog id (``h100-sxm-80gb``); ``custom`` for a GPU given by size.
        name: the name nvidia-smi / rocm-smi prints (``NVIDIA H100 80GB HBM3``).
        vendor: ``nvidia``, ``amd`` (``custom`` for a size).
        marketed_gb: capacity as sold, GB; None for a size.
        smi_total_bytes: the total nvidia-smi / rocm-smi reports, B (a whole number of MiB); None for a
            size (unknown).
        cuda_total_observed_bytes: the CUDA-visible total seen in a log, B, or None.
        reserve_bytes: smi total minus CUDA-visible total, B, used when no observation exists.
        bandwidth_tbs: peak DRAM bandwidth, TB/s (10¹² B/s); None if unknown.
        bf16_dense_tflops: dense BF16 tensor-core peak, TFLOP/s; None without BF16 tensor cores.
        fp8: native FP8 tensor cores.
        price_usd_per_hour: default on-demand price of one GPU, USD/h, or None (pass ``--price``).
        source: where the smi total came from.
        status: ``confirmed``, ``corroborated`` or ``unconfirmed`` (of the smi total).
        aliases: short names accepted by ``--gpu`` (lower case; matched ignoring case, '-', '_', spaces).
        cuda_total_source: where the observed CUDA total came from ("" if none).
        notes: free text.
    """

    id: str
    name: str
    vendor: str
    marketed_gb: float | None
    smi_total_bytes: int | None
    cuda_total_observed_bytes: int | None
    reserve_bytes: int
    bandwidth_tbs: float | None
    bf16_dense_tflops: float | None
    fp8: bool
    price_usd_per_hour: float | None
    source: str
    status: str
    aliases: tuple[str, ...] = ()
    cuda_total_source: str = ""
    notes: str = ""

    @property
    def cuda_total_bytes(self) -> int:
        """CUDA-visible total memory, B: the observed value, else ``smi_total_bytes - reserve_bytes``."""
        if self.cuda_total_observed_bytes is not None:
            return self.cuda_total_observed_bytes
        return self.smi_total_bytes - self.reserve_bytes  # catalog entries always have an smi total

    @property
    def cuda_total_is_observed(self) -> bool:
        """True when :attr:`cuda_total_bytes` was seen in a log (or given as a size), False when estimated."""
        return self.cuda_total_observed_bytes is not None

    @property
    def smi_total_mib(self) -> int | None:
        """The nvidia-smi / rocm-smi total in MiB (2²⁰ B), as the tools print it; None for a size."""
        return None if self.smi_total_bytes is None else self.smi_total_bytes // MIB

    @property
    def reserve_mib(self) -> int:
        """The reserve in MiB (whole MiB in the catalog)."""
        return self.reserve_bytes // MIB

    @property
    def is_custom(self) -> bool:
        """True for a GPU made from a size rather than taken from the catalog."""
        return self.vendor == "custom"

    @property
    def cuda_total_basis(self) -> str:
        """Where :attr:`cuda_total_bytes` comes from, in words: a size given as ``--gpu``, a log, or the
        nvidia-smi / rocm-smi total less the reserve."""
        if self.is_custom:
            return f"--gpu {self.name.removeprefix('custom ')}, taken as the CUDA-visible total"
        if self.cuda_total_is_observed:
            return f"observed: {self.cuda_total_source}"
        smi = "rocm-smi" if self.vendor == "amd" else "nvidia-smi"
        return f"estimated: {smi} {self.smi_total_mib:,} MiB − reserve {self.reserve_mib:,} MiB"


# --- catalog file ---------------------------------------------------------------------------------

_REQUIRED = (  # every entry states each of these (null where unknown), in this order
    "id",
    "name",
    "vendor",
    "marketed_gb",
    "smi_total_mib",
    "cuda_total_bytes",
    "reserve_mib",
    "bandwidth_tbs",
    "bf16_dense_tflops",
    "fp8",
    "price_usd_per_hour",
    "source",
    "status",
    "aliases",
)
_FIELDS = {*_REQUIRED, "cuda_total_source", "notes"}


def catalog_path() -> Path:
    """Path of the bundled catalog, ``kvplan/data/gpus.yaml``."""
    return Path(__file__).resolve().parent / "data" / "gpus.yaml"


def _int(where: str, key: str, value: Any, minimum: int, allow_none: bool = False) -> int | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise CatalogError(f"{where}: {key}={value!r} must be an integer >= {minimum}")
    return value


def _num(where: str, key: str, value: Any, allow_none: bool) -> float | None:
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        null = " or null" if allow_none else ""
        raise CatalogError(f"{where}: {key}={value!r} must be a number > 0{null}")
    return value


def _text(where: str, key: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise CatalogError(f"{where}: {key} must be a non-empty string")
    return value.strip()


def build_gpu(entry: Any, where: str, index: int) -> GPU:
    """Validate one catalog entry and build its :class:`GPU`.

    Args:
        entry: the mapping parsed from YAML.
        where: the file name, for messages.
        index: position in the ``gpus:`` list, named in messages until the id is known.

    Raises:
        CatalogError: not a mapping, unknown or missing fields, wrong types or values.
    """
    if not isinstance(entry, dict):
        raise CatalogError(f"{where}: gpus[{index}] must be a mapping of fields, got {type(entry).__name__}")
    gid = entry.get("id")
    if not isinstance(gid, str) or not _ID_RE.fullmatch(gid):
        raise CatalogError(f"{where}: gpus[{index}]: id={gid!r} must be lower-case letters, digits and '-'")
    at = f"{where}: {gid}"
    unknown = sorted(set(entry) - _FIELDS)
    if unknown:
        close = difflib.get_close_matches(str(unknown[0]), sorted(_FIELDS), n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise CatalogError(f"{at}: unknown field {unknown[0]!r}{hint}; allowed: {', '.join(sorted(_FIELDS))}")
    for key in _REQUIRED:
        if key not in entry:
            raise CatalogError(f"{at}: missing field {key} (write null when unknown, where allowed)")
    vendor = entry["vendor"]
    if vendor not in VENDORS:
        raise CatalogError(f"{at}: vendor={vendor!r}; allowed: {', '.join(VENDORS)}")
    status = entry["status"]
    if status not in STATUSES:
        raise CatalogError(f"{at}: status={status!r}; allowed: {', '.join(STATUSES)}")
    if not isinstance(entry["fp8"], bool):
        raise CatalogError(f"{at}: fp8={entry['fp8']!r} must be true or false")
    smi_mib = _int(at, "smi_total_mib", entry["smi_total_mib"], 1)
    reserve_mib = _int(at, "reserve_mib", entry["reserve_mib"], 0)
    if reserve_mib >= smi_mib:
        raise CatalogError(f"{at}: reserve_mib={reserve_mib} must be below smi_total_mib={smi_mib}")
    observed = _int(at, "cuda_total_bytes", entry["cuda_total_bytes"], 1, allow_none=True)
    cuda_source = entry.get("cuda_total_source")
    if observed is not None:
        if observed > smi_mib * MIB:
            raise CatalogError(
                f"{at}: cuda_total_bytes={observed:,} exceeds smi_total_mib={smi_mib} ({smi_mib * MIB:,} B)"
            )
        cuda_source = _text(at, "cuda_total_source", cuda_source)
    elif cuda_source is not None:
        raise CatalogError(f"{at}: cuda_total_source is given but cuda_total_bytes is null")
    aliases = entry["aliases"]
    if not isinstance(aliases, list):
        raise CatalogError(f"{at}: aliases must be a list of names (may be empty: [])")
    for a in aliases:
        if not isinstance(a, str) or not _ID_RE.fullmatch(a):
            raise CatalogError(f"{at}: alias {a!r} must be lower-case letters, digits and '-' (quote numbers)")
    notes = entry.get("notes")
    return GPU(
        id=gid,
        name=_text(at, "name", entry["name"]),
        vendor=vendor,
        marketed_gb=_num(at, "marketed_gb", entry["marketed_gb"], allow_none=False),
        smi_total_bytes=smi_mib * MIB,
        cuda_total_observed_bytes=observed,
        reserve_bytes=reserve_mib * MIB,
        bandwidth_tbs=_num(at, "bandwidth_tbs", entry["bandwidth_tbs"], allow_none=True),
        bf16_dense_tflops=_num(at, "bf16_dense_tflops", entry["bf16_dense_tflops"], allow_none=True),
        fp8=entry["fp8"],
        price_usd_per_hour=_num(at, "price_usd_per_hour", entry["price_usd_per_hour"], allow_none=True),
        source=_text(at, "source", entry["source"]),
        status=status,
        aliases=tuple(aliases),
        cuda_total_source=cuda_source or "",
        notes="" if notes is None else _text(at, "notes", notes),
    )


def build_catalog(data: Any, where: str) -> list[GPU]:
    """Validate a parsed catalog (``{gpus: [entry, ...]}``) and build its GPUs, in file order.

    Raises:
        CatalogError: a malformed entry, or an id or alias used twice (ids and aliases share one namespace).
    """
    if not isinstance(data, dict) or set(data) != {"gpus"} or not isinstance(data["gpus"], list):
        raise CatalogError(f"{where}: a GPU catalog must be a mapping with one key, gpus: a list of entries")
    gpus = [build_gpu(e, where, i) for i, e in enumerate(data["gpus"])]
    owner: dict[str, str] = {}
    for g in gpus:
        for name in (g.id, *g.aliases):
            key = _norm(name)
            if key in owner:
                raise CatalogError(f"{where}: {g.id}: name {name!r} is already used by {owner[key]}")
            if _SIZE_RE.fullmatch(name):
                raise CatalogError(f"{where}: {g.id}: alias {name!r} reads as a size; choose another")
            owner[key] = g.id
    return gpus


def load_catalog_file(path: str | Path) -> list[GPU]:
    """Load and validate a catalog YAML file (not cached).

    Raises:
        CatalogError: missing or malformed file, or an invalid entry (the message names file, id and field).
    """
    import yaml

    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CatalogError(f"{p}: no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise CatalogError(f"{p}: cannot read ({getattr(e, 'strerror', None) or e})") from None
    from kvplan.textio import yaml_loader  # spec and workload files' loader: no sexagesimal, bounded integers

    try:
        data = yaml.load(text, Loader=yaml_loader())  # noqa: S506 - a safe loader
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise CatalogError(f"{p}: malformed YAML{at}: {getattr(e, 'problem', None) or 'not valid YAML'}") from None
    except (ValueError, OverflowError, RecursionError) as e:
        raise CatalogError(f"{p}: a YAML value kvplan cannot read ({type(e).__name__}: {str(e)[:80]})") from None
    return build_catalog(data, str(p))


@functools.lru_cache(maxsize=1)
def _bundled() -> tuple[GPU, ...]:
    """The bundled catalog, from the module ``scripts/build_gpu_catalog.py`` generates from gpus.yaml (a test
    keeps the two equal): importing it costs ~0.2 ms against ~4 ms for parsing the YAML."""
    from kvplan.data.gpus_catalog import CATALOG

    return tuple(build_catalog(CATALOG, str(catalog_path())))


def load_catalog() -> list[GPU]:
    """Every GPU of the bundled catalog, in catalog order (the file is read once per process).

    Raises:
        CatalogError: the bundled file is invalid (a packaging bug; tests load every entry).
    """
    return list(_bundled())


# Words drivers put before or after the product name that the catalog's ids and aliases leave out:
# nvidia-smi / torch.cuda.get_device_name() print "NVIDIA L4", "NVIDIA GeForce RTX 4090", "Tesla T4";
# rocm-smi and torch on ROCm print "AMD Instinct MI300X" (OAM modules: "... MI300X OAM").
_VENDOR_PREFIXES = ("nvidia", "geforce", "tesla", "amd", "instinct", "radeon")
_FORM_SUFFIXES = ("oam",)
_FORM_WORDS = ("sxm", "pcie")  # form factors: the same product, another board
_GB_WORD = re.compile(r"\d+gb")


def _driver_keys(text: str) -> list[str]:
    """Normalized forms of a driver-printed name to look up: as given, then without vendor words in front
    (``NVIDIA GeForce RTX 4090`` -> ``rtx4090``) and a trailing ``OAM``."""
    words = [w for w in _SEPARATORS.split(text.strip().lower()) if w]
    keys = ["".join(words)]
    while words and words[0] in _VENDOR_PREFIXES:
        words = words[1:]
        keys.append("".join(words))
    if len(words) > 1 and words[-1] in _FORM_SUFFIXES:
        keys.append("".join(words[:-1]))
    return [k for k in keys if k]


@functools.lru_cache(maxsize=1)
def _name_index() -> dict[str, GPU]:
    """Normalized product names (``nvidiah10080gbhbm3``, and ``h10080gbhbm3`` without the vendor words) ->
    GPU, for names no id or alias already holds."""
    ids = _index()
    out: dict[str, GPU] = {}
    for g in _bundled():
        for key in (_norm(g.name), *_driver_keys(g.name)):  # also without the vendor words: "H100 80GB HBM3"
            if key not in ids:
                out.setdefault(key, g)
    return out


def _index() -> dict[str, GPU]:
    return {_norm(name): g for g in _bundled() for name in (g.id, *g.aliases)}


def _tokens(text: str) -> set[str]:
    """Lower-case words of a name, split at separators (``h100-sxm-80gb`` -> {h100, sxm, 80gb})."""
    return {w for w in _SEPARATORS.split(text.strip().lower()) if w}


def _suggest(key: str, n: int = 3, cutoff: float = 0.65) -> list[str]:
    """Up to ``n`` names close to what was typed, one per GPU (its closest id or alias).

    ``key`` is the typed text (``h100-80gb``). Ranked first by how many of its words a GPU's id, aliases
    and product name share (``h100`` and ``80gb`` rank ``h100-sxm-80gb`` above ``a100-80gb``), then by
    difflib ratio of the normalized forms, then by closeness in length. Beyond the best match, only names
    that start like ``key`` are offered (typos seldom hit the first character), so ``h1000`` suggests
    ``h100, h200, h100-nvl`` rather than every ``?100``.
    """
    typed = _tokens(key) - set(_VENDOR_PREFIXES)
    forms = _driver_keys(key) or [_norm(key)]
    norm_key = forms[-1]  # without vendor words: "NVIDIA H100 94GB" is compared as "h10094gb"
    scored = []
    for order, g in enumerate(_bundled()):
        words = set().union(*(_tokens(x) for x in (g.id, *g.aliases, g.name))) - set(_VENDOR_PREFIXES)
        shared = len(typed & words)
        best = None
        for name in (g.id, *g.aliases):
            norm = _norm(name)
            ratio = max(difflib.SequenceMatcher(None, k, norm).ratio() for k in forms)
            cand = (shared, ratio, -abs(len(norm) - len(norm_key)), norm[:1] == norm_key[:1], -order, name)
            if best is None or cand[:3] > best[:3]:
                best = cand
        if best is not None and (best[1] >= cutoff or best[0] >= 2):  # two words in common: a likely match
            scored.append(best)
    scored.sort(reverse=True)
    return [c[5] for i, c in enumerate(scored) if i == 0 or c[3]][:n]


def custom_gpu(size_bytes: int, label: str) -> GPU:
    """A GPU known only by its memory: ``size_bytes`` is taken as the CUDA-visible total, B."""
    return GPU(
        id=f"custom-{label}",
        name=f"custom {label}",
        vendor="custom",
        marketed_gb=None,
        smi_total_bytes=None,
        cuda_total_observed_bytes=size_bytes,
        reserve_bytes=0,
        bandwidth_tbs=None,
        bf16_dense_tflops=None,
        fp8=False,
        price_usd_per_hour=None,
        source="given on the command line",
        status="confirmed",
    )


def gpu_notes(text: str, gpu: GPU, flag: str = "--gpu") -> tuple[str, ...]:
    """What to tell a user about the GPU ``text`` resolved to (:func:`get_gpu`), one line each:

    - a short alias that also names cards of another memory size (``a100`` is the SXM 80 GB; the 40 GB
      cards carry the same words, and differ only in size and form factor): which card and total were
      used, and the other ids;
    - a size equal to a catalog card's nvidia-smi / rocm-smi total (``81559MiB``, the H100's): CUDA sees
      less than the driver's total (the reserve), so name the card or give the CUDA-visible total.

    Empty when neither applies (an id, a product name, an unambiguous alias, any other size).
    """
    if gpu.is_custom:
        same = [g for g in _bundled() if g.smi_total_bytes == gpu.cuda_total_bytes != g.cuda_total_bytes]
        if not same:
            return ()
        first = same[0]
        smi = "rocm-smi" if first.vendor == "amd" else "nvidia-smi"
        card = f"{flag} {first.id}" if len(same) == 1 else f"one of {', '.join(g.id for g in same)}"
        return (
            f"{flag} {str(text).strip()} is the {smi} total of {', '.join(g.id for g in same)}, but CUDA sees less "
            f"(the driver's reserve): {first.cuda_total_bytes / 2**30:,.2f} GiB on {first.id} "
            f"({first.cuda_total_basis.split(':')[0]}); planned with {gpu.cuda_total_bytes / 2**30:,.2f} GiB as "
            f"given; give the card's id ({card}) or the CUDA-visible total (torch.cuda.mem_get_info()[1])",
        )
    key = _norm(str(text))
    if key == _norm(gpu.id) or key not in {_norm(a) for a in gpu.aliases}:
        return ()
    words = _tokens(str(text))
    others = [
        g
        for g in _bundled()
        if g is not gpu
        and g.marketed_gb != gpu.marketed_gb
        and words <= _tokens(g.id)
        and all(w in _FORM_WORDS or _GB_WORD.fullmatch(w) for w in _tokens(g.id) - words)
    ]
    if not others:
        return ()
    sizes = sorted({g.marketed_gb for g in others})
    what = " and ".join(f"{x:g} GB" for x in sizes)
    return (
        f"{flag} {str(text).strip()} is the {gpu.name} ({gpu.id}, CUDA total {gpu.cuda_total_bytes / 2**30:,.2f} "
        f"GiB, {gpu.cuda_total_basis.split(':')[0]}); the {what} {'card is' if len(others) == 1 else 'cards are'} "
        f"{', '.join(g.id for g in others)}: give that id if yours is one",
    )


def get_gpu(text: str, flag: str = "--gpu") -> GPU:
    """Resolve what a user typed for a GPU: a catalog id or alias, or a size.

    Names match ignoring case, '-', '_' and spaces (``H100``, ``RTX 4090``, ``rtx-pro-6000``), and so do
    the product names drivers print: nvidia-smi, rocm-smi and ``torch.cuda.get_device_name()``
    (``NVIDIA H100 80GB HBM3``, ``NVIDIA L4``, ``AMD Instinct MI300X``), with or without the vendor words.

    A size needs a unit (``80GB`` = 80 × 10⁹ B, ``80GiB`` = 80 × 2³⁰ B, ``81559MiB`` = 81,559 × 2²⁰ B) and
    is taken as the CUDA-visible total (what ``torch.cuda.mem_get_info`` reports), so no reserve is
    subtracted from it.

    Raises:
        UsageError: unknown name (close names suggested) or a malformed size; the message names ``flag``.
    """
    key = _norm(str(text))
    index = _index()
    if key in index:
        return index[key]
    names = _name_index()
    if key in names:
        return names[key]
    if _SIZE_RE.fullmatch(str(text)):
        return custom_gpu(parse_bytes(text, flag), str(text).strip())
    for k in _driver_keys(str(text)):
        if k in index:
            return index[k]
        if k in names:
            return names[k]
    close = _suggest(str(text))
    hint = f"did you mean {', '.join(close)}? " if close else "run 'kvplan gpus' for the list "
    raise UsageError(f"{flag}: unknown GPU {text!r}; {hint}(or give the CUDA-visible total, like 80GB or 79.2GiB)")
