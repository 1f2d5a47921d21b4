"""Hugging Face Hub repo ids as MODEL: ``org/name`` or ``org/name@revision``.

A repo id resolves, in this order, to:

1. a bundled spec whose ``hf_repo`` is the id (compared case-insensitively; only without ``@revision``);
2. the repo's ``config.json`` in the local Hugging Face cache (``huggingface_hub.try_to_load_from_cache``;
   the cache folder is ``HF_HUB_CACHE``, else ``HF_HOME/hub``, else ``~/.cache/huggingface/hub``, read
   when the model is loaded);
3. unless ``HF_HUB_OFFLINE`` is set, ``config.json`` alone downloaded with ``hf_hub_download``
   (``HF_TOKEN`` for gated and private repos).

The config is read by :func:`kvplan.readers.spec_from_hf_config`; the spec is named after the repo id and
its source is the config's URL on the Hub.

Weights for ``kvplan fit`` (:attr:`~kvplan.specs.ModelSpec.weights_bytes`): from the safetensors headers
when every shard's header is in the cache (the first 8 + N bytes of each file; no tensor data read), else
from ``model.safetensors.index.json``'s ``metadata.total_size`` (cached, or downloaded when online), else,
online, from the single ``model.safetensors`` header through ``get_safetensors_metadata`` (HTTP range
reads). Without any of them the spec has no weights and ``fit`` asks for ``--weights-gib``. A local folder
given as MODEL (or its ``config.json``) reads the same files beside the config (:func:`folder_weight_bytes`).

The parameter count (for ``--weights-dtype``, which re-sizes the weights from it) comes with the weights:
the elements of every floating-point tensor in the headers (none when integer-packed tensors hold several
weights each); with only the index, its ``metadata.total_parameters`` (transformers writes it) for an
unquantized checkpoint, else ``total_size`` / the bytes of the config's dtype (``torch_dtype`` / ``dtype``:
bf16 and fp16 2 B, fp32 4 B) when the config has no ``quantization_config`` (every tensor then in that
dtype; noted in the spec's notes). See :func:`with_weights`.

huggingface_hub is imported only when a repo id is neither bundled nor a path.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple

from kvplan.errors import SpecError

# org/name[@revision]: the Hub's repo name rules (letters, digits, '-', '_', '.'; at most 96 characters each)
_REPO_RE = re.compile(
    r"(?P<repo>[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9._-]{1,96})(?:@(?P<revision>[A-Za-z0-9._/-]{1,255}))?"
)
_FILE_SUFFIXES = (".json", ".yaml", ".yml", ".gguf")
_HF_URL = "https://huggingface.co"
MAX_HEADER_BYTES = 100 << 20  # a safetensors header larger than this is refused (safetensors' own limit)
_FLOAT_DTYPES = {"F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2", "F8_E8M0"}


def is_repo_id(ref: str) -> bool:
    """True when ``ref`` reads as ``org/name[@revision]`` (and not as a file name like ``dir/config.json``)."""
    m = _REPO_RE.fullmatch(str(ref).strip())
    if m is None:
        return False
    repo = m["repo"]
    if ".." in repo or "--" in repo or repo.lower().endswith(_FILE_SUFFIXES):
        return False
    return not repo.split("/")[1].startswith((".", "-"))


def parse_repo_id(ref: str) -> tuple[str, str | None]:
    """(repo id, revision or None) of ``org/name[@revision]``.

    Raises:
        SpecError: ``ref`` is not a repo id.
    """
    m = _REPO_RE.fullmatch(str(ref).strip())
    if m is None or not is_repo_id(ref):
        raise SpecError(f"{ref!r}: not a Hugging Face repo id (org/name or org/name@revision)")
    return m["repo"], m["revision"]


def hub_cache_dir() -> Path:
    """The Hugging Face cache folder as huggingface_hub computes it, from the environment now."""
    for var in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        if os.environ.get(var):
            return Path(os.environ[var]).expanduser()
    home = os.environ.get("HF_HOME")
    if not home:
        xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        home = os.path.join(xdg, "huggingface")
    return Path(home).expanduser() / "hub"


def hub_offline() -> bool:
    """True when ``HF_HUB_OFFLINE`` is set to a true value (1, ON, YES, TRUE)."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in ("1", "ON", "YES", "TRUE")


def bundled_repos() -> dict[str, tuple[str, str]]:
    """Lower-cased ``hf_repo`` -> (the repo id as written, bundled model name), from the bundled YAMLs'
    ``hf_repo:`` lines (read as text: parsing 43 YAMLs would cost start-up time)."""
    from kvplan.data import bundled_specs_dir

    out: dict[str, tuple[str, str]] = {}
    line = re.compile(r"^hf_repo:\s*['\"]?([^'\"\s#]+)", re.MULTILINE)
    for path in sorted(bundled_specs_dir().glob("*.yaml")):
        m = line.search(path.read_text(encoding="utf-8"))
        if m:
            out[m.group(1).lower()] = (m.group(1), path.stem)
    return out


def bundled_name(ref: str) -> str | None:
    """The bundled model whose ``hf_repo`` is ``ref`` (no revision given; case-insensitive), or None."""
    repo, revision = parse_repo_id(ref)
    hit = bundled_repos().get(repo.lower()) if revision is None else None
    return None if hit is None else hit[1]


def close_bundled(repo: str, n: int = 3) -> list[str]:
    """Bundled ``hf_repo`` ids close to ``repo`` as ``id (bundled as name)``, closest first."""
    import difflib

    repos = bundled_repos()
    close = difflib.get_close_matches(repo.lower(), list(repos), n=n, cutoff=0.6)
    return [f"{repos[c][0]} (bundled as {repos[c][1]})" for c in close]


def _suggest(repo: str) -> str:
    close = close_bundled(repo)
    return f"; close bundled models: {', '.join(close)}" if close else ""


def _check_endpoint() -> None:
    """Raise SpecError unless ``HF_ENDPOINT`` (when set) is a parsable http(s) URL (huggingface_hub parses
    it at import and would fail with a traceback)."""
    from urllib.parse import urlsplit

    endpoint = os.environ.get("HF_ENDPOINT")
    if not endpoint:
        return
    try:
        url = urlsplit(endpoint)
        url.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError as e:
        raise SpecError(f"HF_ENDPOINT: {endpoint!r} is not a valid URL ({e}); e.g. https://huggingface.co") from None
    if url.scheme not in ("http", "https") or not url.hostname:
        raise SpecError(f"HF_ENDPOINT: {endpoint!r} is not an http(s) URL with a host; e.g. https://huggingface.co")


def _hub():
    _check_endpoint()
    try:
        import huggingface_hub
    except ImportError:
        raise SpecError(
            "reading a Hugging Face repo id needs huggingface_hub (a kvplan dependency): pip install huggingface_hub"
        ) from None
    return huggingface_hub


def _cached(repo: str, filename: str, revision: str | None) -> Path | None:
    """The cached file's path, or None when it is not in the cache."""
    found = _hub().try_to_load_from_cache(repo, filename, cache_dir=str(hub_cache_dir()), revision=revision)
    return Path(found) if isinstance(found, str) else None


def _error_kind(e: BaseException) -> str:
    names = {c.__name__ for c in type(e).__mro__}
    for kind in (
        "GatedRepoError",
        "RepositoryNotFoundError",
        "RevisionNotFoundError",
        "LocalEntryNotFoundError",
        "EntryNotFoundError",
        "OfflineModeIsEnabled",
        "HfHubHTTPError",
    ):
        if kind in names:
            return kind
    return type(e).__name__


def _download_hint(repo: str, revision: str | None, filename: str = "config.json") -> str:
    rev = f" --revision {revision}" if revision else ""
    return f"hf download {repo} {filename}{rev}"


def hub_reachable() -> bool:
    """True when the Hub's host name resolves (``HF_ENDPOINT`` or huggingface.co), or a proxy is set.
    Without a resolvable host huggingface_hub retries for ~25 s, logging each try, before it gives up."""
    import socket
    from urllib.parse import urlsplit

    if any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY")):
        return True  # behind a proxy the host need not resolve here: let huggingface_hub try
    _check_endpoint()
    url = urlsplit(os.environ.get("HF_ENDPOINT") or _HF_URL)
    try:
        socket.getaddrinfo(url.hostname or "huggingface.co", url.port or 443)
    except (OSError, UnicodeError):
        return False
    return True


class _Quiet:
    """huggingface_hub's retry warnings and progress bars off while kvplan calls it (restored after)."""

    def __enter__(self):
        import logging

        self.logger = logging.getLogger("huggingface_hub")
        self.level = self.logger.level
        self.logger.setLevel(logging.ERROR)
        self.bars = None
        try:
            from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars

            self.bars = not are_progress_bars_disabled()
            disable_progress_bars()
        except ImportError:
            pass
        return self

    def __exit__(self, *exc):
        self.logger.setLevel(self.level)
        if self.bars:
            from huggingface_hub.utils import enable_progress_bars

            enable_progress_bars()
        return False


def _download(repo: str, filename: str, revision: str | None) -> Path:
    """``hf_hub_download`` of one file into the cache (HF_TOKEN for gated repos).

    Raises:
        SpecError: gated, missing or private repo, missing revision or file, or no network.
    """
    hub = _hub()
    token = os.environ.get("HF_TOKEN") or None
    at = f"{repo}@{revision}" if revision else repo
    if not hub_reachable():
        raise SpecError(
            f"{at}: {filename} is not in the Hugging Face cache ({hub_cache_dir()}) and the Hub cannot be reached "
            f"(no name resolution); download it with: {_download_hint(repo, revision, filename)}{_suggest(repo)}"
        )
    try:
        with _Quiet():
            return Path(
                hub.hf_hub_download(repo, filename, revision=revision, cache_dir=str(hub_cache_dir()), token=token)
            )
    except Exception as e:  # huggingface_hub's errors change between versions: classified by name
        kind = _error_kind(e)
        if kind == "GatedRepoError":
            msg = f"{at} is gated: accept its license on {_HF_URL}/{repo} and set HF_TOKEN to a token of yours"
        elif kind == "RepositoryNotFoundError":
            msg = f"{at}: no such repo on the Hugging Face Hub (or it is private: set HF_TOKEN){_suggest(repo)}"
        elif kind == "RevisionNotFoundError":
            msg = f"{at}: the repo has no revision {revision!r}"
        elif kind == "EntryNotFoundError" and filename == "config.json":
            msg = (
                f"{at} has no config.json (a GGUF-only repo? download the .gguf file and give its path; "
                "or write a spec YAML)"
            )
        elif kind in ("LocalEntryNotFoundError", "OfflineModeIsEnabled") or isinstance(e, (OSError, ConnectionError)):
            msg = (
                f"{at}: {filename} is not in the Hugging Face cache ({hub_cache_dir()}) and the Hub cannot be "
                f"reached ({type(e).__name__}); download it with: {_download_hint(repo, revision, filename)}"
            )
        else:
            msg = f"{at}: downloading {filename} failed ({type(e).__name__}: {str(e)[:160]})"
        raise SpecError(msg) from None


def _read_json(path: Path, where: str) -> Any:
    from kvplan.textio import read_text

    try:
        return json.loads(read_text(path))
    except json.JSONDecodeError as e:
        raise SpecError(f"{where}: malformed JSON at line {e.lineno}, column {e.colno}: {e.msg}") from None
    except (ValueError, RecursionError) as e:
        raise SpecError(f"{where}: JSON kvplan cannot read ({type(e).__name__}: {str(e)[:80]})") from None


def load_repo(ref: str):
    """Resolve a repo id ``org/name[@revision]`` to a :class:`~kvplan.specs.ModelSpec` (see the module docstring).

    Raises:
        SpecError: offline (HF_HUB_OFFLINE) and not cached, a gated/missing repo, no config.json, or an
            invalid config; each message says how to get the config (``hf download org/name config.json``)
            and lists close bundled models.
    """
    repo, revision = parse_repo_id(ref)
    path = _cached(repo, "config.json", revision)
    if path is None:
        if hub_offline():
            raise SpecError(
                f"{ref}: not a bundled model, and its config.json is not in the Hugging Face cache "
                f"({hub_cache_dir()}) while HF_HUB_OFFLINE is set; download it with: "
                f"{_download_hint(repo, revision)}{_suggest(repo)}"
            )
        path = _download(repo, "config.json", revision)
    from kvplan.readers import spec_from_hf_config

    where = f"{_HF_URL}/{repo}/blob/{revision or 'main'}/config.json"
    name = f"{repo}@{revision}" if revision else repo
    config = _read_json(path, where)
    spec = spec_from_hf_config(config, where, name=name)
    spec = replace(spec, hf_repo=repo)
    return with_weights(spec, repo_weight_bytes(repo, revision), config)


# --- a cache folder given as a path ----------------------------------------------------------------

_CACHE_PREFIX = "models--"
_COMMIT_RE = re.compile(r"[0-9a-f]{40}")


def cache_repo_id(folder: Path) -> str | None:
    """``org/name`` of a Hugging Face cache repo folder (``models--org--name``), else None."""
    name = folder.name
    if not name.startswith(_CACHE_PREFIX) or "--" not in name[len(_CACHE_PREFIX) :]:
        return None
    repo = name[len(_CACHE_PREFIX) :].replace("--", "/", 1)
    return repo if is_repo_id(repo) else None


def cache_snapshot(folder: Path) -> Path | None:
    """The snapshot folder a cache repo folder (``models--org--name``, holding ``refs/`` and ``snapshots/``)
    stands for: the commit ``refs/main`` names, as huggingface_hub resolves a revision-less id; without
    ``refs/main``, the only snapshot there is. None when ``folder`` is not a cache repo folder.

    Raises:
        SpecError: ``refs/main`` names a snapshot that is not there, or there is no ``refs/main`` and not
            exactly one snapshot (the message lists them).
    """
    snapshots = folder / "snapshots"
    if cache_repo_id(folder) is None or not snapshots.is_dir():
        return None
    ref = folder / "refs" / "main"
    if ref.is_file():
        commit = ref.read_text(encoding="utf-8", errors="replace").strip()
        target = snapshots / commit
        if not _COMMIT_RE.fullmatch(commit) or not target.is_dir():
            raise SpecError(f"{ref}: names snapshot {commit[:64]!r}, which is not in {snapshots}")
        return target
    found = sorted(p.name for p in snapshots.iterdir() if p.is_dir())
    if len(found) == 1:
        return snapshots / found[0]
    listed = ", ".join(found[:5]) + (" ..." if len(found) > 5 else "") if found else "none"
    raise SpecError(
        f"{folder}: a Hugging Face cache folder without refs/main and with {len(found)} snapshots ({listed}); "
        "give the snapshot folder (snapshots/<commit>)"
    )


def cache_snapshot_name(folder: Path) -> str | None:
    """The name of a cache snapshot folder (``models--org--name/snapshots/<commit>``): ``org/name`` when the
    commit is the one ``refs/main`` names (or the only ref is absent), else ``org/name@<commit>``; None for
    any other folder."""
    if folder.parent.name != "snapshots":
        return None
    repo_folder = folder.parent.parent
    repo = cache_repo_id(repo_folder)
    if repo is None:
        return None
    ref = repo_folder / "refs" / "main"
    try:
        main = ref.read_text(encoding="utf-8", errors="replace").strip() if ref.is_file() else None
    except OSError:
        main = None
    return repo if main in (None, folder.name) else f"{repo}@{folder.name}"


_DTYPE_BYTES = {"float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2}


def _unquantized_dtype_bytes(config: Any) -> tuple[str, int] | None:
    """(dtype name, bytes per parameter) of a config.json without ``quantization_config`` that names a
    16/32-bit float dtype (``torch_dtype`` or ``dtype``, top level or ``text_config``); else None."""
    if not isinstance(config, dict):
        return None
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
    if config.get("quantization_config") is not None or text.get("quantization_config") is not None:
        return None
    for d in (config, text):
        for key in ("torch_dtype", "dtype"):
            name = str(d.get(key) or "").lower().removeprefix("torch.")
            if name in _DTYPE_BYTES:
                return name, _DTYPE_BYTES[name]
    return None


def _quant_method(config: Any) -> str | None:
    """``quantization_config.quant_method`` of a config.json (top level or ``text_config``), ``"set"`` when
    the block has no method, None when the config has no quantization_config."""
    if not isinstance(config, dict):
        return None
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
    block = config.get("quantization_config") or text.get("quantization_config")
    if block is None:
        return None
    method = block.get("quant_method") if isinstance(block, dict) else None
    return str(method)[:40] if method else "set"


class CheckpointWeights(NamedTuple):
    """What a checkpoint's safetensors files tell of its weights.

    Attributes:
        nbytes: bytes of every tensor (before TP/PP).
        params: elements of the float tensors, from the headers; None when integer-packed tensors hold
            several weights each, or when only the index was read.
        index_params: the index's ``metadata.total_parameters`` (only the index read), or None.
        from_headers: the tensor headers were read (not only the index's metadata).
    """

    nbytes: int
    params: int | None
    index_params: int | None = None
    from_headers: bool = True


def with_weights(spec, weights: CheckpointWeights | None, config: Any):
    """``spec`` with the checkpoint's weight bytes and, where they tell it, its parameter count.

    Parameters come from the headers' float tensors; with only the index read, for a config without
    ``quantization_config``, from the index's ``total_parameters``, else from ``total_size`` / the config
    dtype's bytes (when it divides; every tensor is then in that dtype). A spec that already has a
    param_count (counted from config.json, :mod:`kvplan.readers.params`) keeps it when none of these
    applies; its ``param_count_unquantized`` (the embedding and lm_head) is dropped when the checkpoint
    holds fewer parameters than the config's model.

    Without weights, a quantized config (``quantization_config``) with a counted param_count gets a
    warning: kvplan sizes those parameters at the model dtype unless ``--weights-dtype`` says otherwise.
    """
    if weights is None:
        method = _quant_method(config)
        if method is None or spec.param_count is None or spec.weights_dtype is not None:
            return spec
        note = (
            f"{spec.name}: no safetensors weights found; param_count {spec.param_count:,} is counted from "
            f"config.json, but its quantization_config ({method}) is not applied to it: fit sizes the weights "
            f"at {spec.dtype} unless --weights-dtype or --weights-gib says otherwise"
        )
        return replace(spec, warnings=(*spec.warnings, note))
    total, params, index_params, from_headers = weights
    note = ""
    unquantized = _unquantized_dtype_bytes(config)
    if params is None and unquantized is not None and not from_headers:
        if index_params is not None:
            params = index_params
            note = f"param_count {params:,} from model.safetensors.index.json metadata.total_parameters."
        elif total % unquantized[1] == 0:
            params = total // unquantized[1]
            note = (
                f"param_count {params:,} derived from model.safetensors.index.json total_size {total:,} B / "
                f"{unquantized[1]} B ({unquantized[0]}, the config's dtype; no quantization_config)."
            )
    kept = spec.param_count_unquantized
    if params is not None and spec.param_count is not None and params < spec.param_count:
        kept = 0  # the config's embedding count belongs to a model the checkpoint's tensors do not hold
    spec = replace(
        spec,
        weights_bytes=total,
        param_count=params if params is not None else spec.param_count,
        param_count_unquantized=kept,
    )
    if note:
        spec = replace(spec, notes=f"{spec.notes} {note}".strip())
    return spec


# --- weights --------------------------------------------------------------------------------------


def safetensors_header(path: Path) -> dict[str, Any]:
    """The JSON header of a safetensors file (its first 8 + N bytes; tensor data is not read).

    Raises:
        SpecError: not a safetensors file, or a header over 100 MiB.
    """
    try:
        with path.open("rb") as f:
            head = f.read(8)
            if len(head) != 8:
                raise SpecError(f"{path}: not a safetensors file (shorter than 8 bytes)")
            n = int.from_bytes(head, "little")
            if n > MAX_HEADER_BYTES:
                raise SpecError(f"{path}: safetensors header of {n:,} B is larger than {MAX_HEADER_BYTES >> 20} MiB")
            header = json.loads(f.read(n))
    except (OSError, ValueError) as e:
        raise SpecError(f"{path}: cannot read its safetensors header ({type(e).__name__})") from None
    if not isinstance(header, dict):
        raise SpecError(f"{path}: the safetensors header is not a JSON object")
    return header


def header_sizes(header: dict[str, Any], where: str) -> tuple[dict[str, int], dict[str, int]]:
    """(bytes per dtype, elements per dtype) of one safetensors header.

    Raises:
        SpecError: a tensor entry without dtype, shape or data_offsets, with data_offsets that end before
            they begin (negative bytes) or begin below 0, or with a negative dimension.
    """
    nbytes: dict[str, int] = {}
    elems: dict[str, int] = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype = str(t["dtype"])
            begin, end = (int(x) for x in t["data_offsets"])
            count = 1
            for d in t["shape"]:
                count *= int(d)
        except (KeyError, TypeError, ValueError):
            raise SpecError(f"{where}: tensor {name!r} lacks dtype, shape or data_offsets") from None
        if not 0 <= begin <= end or any(int(d) < 0 for d in t["shape"]):
            raise SpecError(
                f"{where}: tensor {name!r} has data_offsets {[begin, end]} and shape {list(t['shape'])}; "
                "allowed: 0 <= begin <= end and no negative dimension"
            )
        nbytes[dtype] = nbytes.get(dtype, 0) + (end - begin)
        elems[dtype] = elems.get(dtype, 0) + count
    return nbytes, elems


def _total(by_dtype: tuple[dict[str, int], dict[str, int]]) -> tuple[int, int | None]:
    """(bytes, parameters or None when integer-packed tensors make element counts not parameters)."""
    nbytes, elems = by_dtype
    params = sum(elems.values()) if set(elems) <= _FLOAT_DTYPES else None
    return sum(nbytes.values()), params


def _count(value: Any) -> int | None:
    """A positive int from JSON (not a bool), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _index_weights(index_path: Path, shard_path) -> CheckpointWeights | None:
    """The weights of a sharded checkpoint: from every shard's header when ``shard_path(name)`` finds them
    all, else from the index's metadata (None without a total_size)."""
    index = _read_json(index_path, str(index_path))
    if not isinstance(index, dict):
        return None
    meta = index.get("metadata") if isinstance(index.get("metadata"), dict) else {}
    weight_map = index.get("weight_map") if isinstance(index.get("weight_map"), dict) else {}
    shards = sorted({str(s) for s in weight_map.values()})
    paths = [shard_path(s) for s in shards]
    if shards and all(p is not None for p in paths):
        nbytes: dict[str, int] = {}
        elems: dict[str, int] = {}
        for p in paths:
            b, e = header_sizes(safetensors_header(p), str(p))
            for k, v in b.items():
                nbytes[k] = nbytes.get(k, 0) + v
            for k, v in e.items():
                elems[k] = elems.get(k, 0) + v
        return CheckpointWeights(*_total((nbytes, elems)))
    total = _count(meta.get("total_size"))
    return None if total is None else CheckpointWeights(total, None, _count(meta.get("total_parameters")), False)


def folder_weight_bytes(folder: Path) -> CheckpointWeights | None:
    """As :func:`repo_weight_bytes` for a local checkpoint folder: ``model.safetensors``'s header, else
    ``model.safetensors.index.json`` with the shards' headers beside it, else the index's metadata; None
    when the folder has neither file."""
    single = folder / "model.safetensors"
    if single.is_file():
        return CheckpointWeights(*_total(header_sizes(safetensors_header(single), str(single))))
    index_path = folder / "model.safetensors.index.json"
    if not index_path.is_file():
        return None

    def shard(name: str) -> Path | None:
        p = folder / name
        return p if "/" not in name and "\\" not in name and p.is_file() else None

    return _index_weights(index_path, shard)


def repo_weight_bytes(repo: str, revision: str | None) -> CheckpointWeights | None:
    """The weights of a Hub repo's safetensors (:class:`CheckpointWeights`), or None when unknown.

    Never raises for a missing file or no network: the weights are then unknown.
    """
    index_path = _cached(repo, "model.safetensors.index.json", revision)
    single = _cached(repo, "model.safetensors", revision)
    if single is not None:
        return CheckpointWeights(*_total(header_sizes(safetensors_header(single), str(single))))
    if index_path is None and not hub_offline():
        try:
            index_path = _download(repo, "model.safetensors.index.json", revision)
        except SpecError:
            index_path = None
    if index_path is not None:
        return _index_weights(index_path, lambda s: _cached(repo, s, revision))
    if hub_offline():
        return None
    try:  # one safetensors file: its header through HTTP range reads
        with _Quiet():
            meta = _hub().get_safetensors_metadata(repo, revision=revision, token=os.environ.get("HF_TOKEN") or None)
    except Exception:  # no safetensors (a .bin repo), no network: weights unknown
        return None
    nbytes = {}
    elems = {}
    for fmeta in meta.files_metadata.values():
        for t in fmeta.tensors.values():
            nbytes[t.dtype] = nbytes.get(t.dtype, 0) + (t.data_offsets[1] - t.data_offsets[0])
            count = 1
            for d in t.shape:
                count *= d
            elems[t.dtype] = elems.get(t.dtype, 0) + count
    return CheckpointWeights(*_total((nbytes, elems))) if nbytes else None
