"""Hugging Face Hub repo ids as MODEL: ``org/name`` or ``org/name@revision``.

A repo id resolves, in this order, to:

1. a bundled spec whose ``hf_repo`` is the id (compared case-insensitively; only without ``@revision``);
   a known instruct/chat tune of one (:data:`TUNES`) when its own config.json can be neither found in the
   cache nor downloaded (offline, no route, gated): the base's geometry, with a warning saying so;
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
from kvplan.textio import json_object_hook

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


# Instruct/chat tunes of bundled base models: repo id -> (bundled base, settings that differ, how it is known).
# Used only when the tune's config.json is neither cached nor downloadable (offline, no route to the Hub,
# gated). "checked": tests/fixtures/hf_configs holds the tune's own config.json and tests/test_cmdline.py
# reads it as kvplan reads any config.json and compares the geometry (layers, heads, head_dim, layer kinds,
# windows, max context, KV bytes) with the bundled base's. "unchecked": no copy of the tune's config.json
# here; the tune is the base's architecture post-trained, with the base's config (as the model cards say)
# except where listed (Qwen2.5's instruct configs: max_position_embeddings 32768, bundled qwen2.5-7b's own
# notes and /work/shared reference/model_architectures.yaml, from maxtext's qwen25_7b_config).
TUNES: dict[str, tuple[str, dict, str]] = {
    "google/gemma-2-9b-it": ("gemma2-9b", {}, "checked"),
    "tiiuae/falcon-40b-instruct": ("falcon-40b", {}, "checked"),
    "meta-llama/Llama-4-Scout-17B-16E-Instruct": ("llama4-scout", {}, "checked"),
    "meta-llama/Llama-3.1-8B-Instruct": ("llama3.1-8b", {}, "unchecked"),
    "meta-llama/Meta-Llama-3.1-8B-Instruct": ("llama3.1-8b", {}, "unchecked"),
    "meta-llama/Llama-3.1-70B-Instruct": ("llama3.1-70b", {}, "unchecked"),
    "meta-llama/Meta-Llama-3.1-70B-Instruct": ("llama3.1-70b", {}, "unchecked"),
    "meta-llama/Llama-3.1-405B-Instruct": ("llama3.1-405b", {}, "unchecked"),
    "meta-llama/Meta-Llama-3.1-405B-Instruct": ("llama3.1-405b", {}, "unchecked"),
    "meta-llama/Meta-Llama-3-8B-Instruct": ("llama3-8b", {}, "unchecked"),
    "meta-llama/Meta-Llama-3-70B-Instruct": ("llama3-70b", {}, "unchecked"),
    "meta-llama/Llama-3.2-1B-Instruct": ("llama3.2-1b", {}, "unchecked"),
    "meta-llama/Llama-3.2-3B-Instruct": ("llama3.2-3b", {}, "unchecked"),
    "meta-llama/Llama-2-7b-chat-hf": ("llama2-7b", {}, "unchecked"),
    "meta-llama/Llama-2-13b-chat-hf": ("llama2-13b", {}, "unchecked"),
    "meta-llama/Llama-2-70b-chat-hf": ("llama2-70b", {}, "unchecked"),
    "Qwen/Qwen2.5-7B-Instruct": ("qwen2.5-7b", {"max_model_len": 32768}, "unchecked"),
    "Qwen/Qwen2.5-14B-Instruct": ("qwen2.5-14b", {"max_model_len": 32768}, "unchecked"),
    "Qwen/Qwen2.5-32B-Instruct": ("qwen2.5-32b", {"max_model_len": 32768}, "unchecked"),
    "Qwen/Qwen2.5-72B-Instruct": ("qwen2.5-72b", {"max_model_len": 32768}, "unchecked"),
    "google/gemma-2-27b-it": ("gemma2-27b", {}, "unchecked"),
    "mistralai/Mistral-7B-Instruct-v0.1": ("mistral-7b-v0.1", {}, "unchecked"),
    "mistralai/Mistral-7B-Instruct-v0.3": ("mistral-7b-v0.3", {}, "unchecked"),
    "mistralai/Mixtral-8x7B-Instruct-v0.1": ("mixtral-8x7b", {}, "unchecked"),
    # bundled qwen3-next-80b-a3b is read from the Thinking release's config.json (model_specs/qwen3-next-80b-a3b.yaml
    # source:); Instruct and Thinking are the two post-trained releases of Qwen3-Next-80B-A3B-Base, one architecture
    # (transformers docs/source/en/model_doc/qwen3_next.md; the model cards)
    "Qwen/Qwen3-Next-80B-A3B-Instruct": ("qwen3-next-80b-a3b", {}, "unchecked"),
}
_TUNES_LOWER = {k.lower(): (k, *v) for k, v in TUNES.items()}
# How a tune's config.json relates to the bundled spec's, where the bundled spec is not the base model's (the
# warning says so); every other tune: "an instruct tune has the base model's config.json".
TUNE_RELATION = {
    "Qwen/Qwen3-Next-80B-A3B-Instruct": (
        "bundled from the Thinking release's config.json; the Instruct and Thinking releases are post-trains of one "
        "base, with its config.json"
    ),
}


def tune_base(ref: str) -> tuple[str, dict, str] | None:
    """(bundled base, settings that differ, ``checked``/``unchecked``) of a known instruct/chat tune's repo id
    (no revision; case-insensitive), or None (:data:`TUNES`)."""
    repo, revision = parse_repo_id(ref)
    hit = _TUNES_LOWER.get(repo.lower()) if revision is None else None
    return None if hit is None else hit[1:]


def _tune_spec(ref: str, why: str, load_bundled):
    """The bundled base's spec (``load_bundled(name)``) for a known tune whose config.json cannot be read,
    named after the repo id and saying so in its warnings."""
    base, differ, status = tune_base(ref)
    repo, _ = parse_repo_id(ref)
    relation = TUNE_RELATION.get(_TUNES_LOWER[repo.lower()][0], "an instruct tune has the base model's config.json")
    spec = load_bundled(base)
    spec = replace(spec, name=repo, hf_repo=repo, **differ)
    extra = " with " + ", ".join(f"{k} {v:,}" for k, v in differ.items()) if differ else ""
    checked = "checked against its config.json" if status == "checked" else "its own config.json not checked here"
    but = " but for that" if differ else ""
    note = f"{repo}: the geometry of bundled {base}{extra} ({relation}{but}; {checked}; {why})"
    return replace(spec, warnings=(*spec.warnings, note))


def load_repo(ref: str, load_bundled=None):
    """Resolve a repo id ``org/name[@revision]`` to a :class:`~kvplan.specs.ModelSpec` (see the module docstring).

    ``load_bundled(name)`` loads a bundled spec (:func:`kvplan.loader.load_bundled`): for a known tune of a
    bundled base (:data:`TUNES`) whose config.json cannot be read; without it such a tune is read as any repo.

    Raises:
        SpecError: offline (HF_HUB_OFFLINE) and not cached, a gated/missing repo, no config.json, or an
            invalid config; each message says how to get the config (``hf download org/name config.json``)
            and lists close bundled models.
    """
    repo, revision = parse_repo_id(ref)
    path = _cached(repo, "config.json", revision)
    if path is None and load_bundled is not None and tune_base(ref) is not None:  # its base's geometry, said so
        if hub_offline():
            return _tune_spec(ref, "HF_HUB_OFFLINE is set", load_bundled)
        if not hub_reachable():
            return _tune_spec(ref, "the Hub cannot be reached", load_bundled)
        try:
            path = _download(repo, "config.json", revision)
        except SpecError as e:
            if "is gated" not in str(e) and "cannot be reached" not in str(e):
                raise
            why = "gated: no HF_TOKEN with access" if "is gated" in str(e) else "the Hub cannot be reached"
            return _tune_spec(ref, why, load_bundled)
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
    config = _read_json(path, where, constants=True)  # as a local config.json (kvplan.specs.load_hf_config)
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


def with_weights(spec, weights: CheckpointWeights | str | None, config: Any):
    """``spec`` with the checkpoint's weight bytes and, where they tell it, its parameter count; with a
    string (why the checkpoint found does not tell them), the spec's ``weights_note``.

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
    if isinstance(weights, str):  # a checkpoint was found but does not tell its weights: fit says why
        if spec.param_count is not None:  # counted from config.json: fit sizes the weights from that count
            note = f"{spec.name}: {weights}; the weights are sized from the param_count counted from config.json"
            return replace(spec, weights_note=weights, warnings=(*spec.warnings, note))
        return replace(spec, weights_note=weights)
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

# Bits per element of each safetensors dtype (safetensors' Dtype, safetensors/src/tensor.rs ``bitsize``).
SAFETENSORS_DTYPE_BITS = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
    "I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "C64": 64, "I64": 64, "U64": 64,
    "F64": 64,
}  # fmt: skip
MAX_ELEMENTS = 1 << 64  # safetensors counts elements in a usize: more is its ValidationOverflow
MAX_PARAMS = 1 << 50  # as a spec's param_count (kvplan.specs.build_spec)
MAX_CHECKPOINT_BYTES = 1 << 53  # 8 PiB: 2^50 parameters of 8 bytes


def _json_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def _load_json(text: str | bytes, where: str, constants: bool = False) -> Any:
    """JSON with NaN and Infinity refused (``parse_constant``; with ``constants``, accepted as Python's json
    accepts them, as for a config.json read from a local path), nesting and digits bounded by Python's
    parser (a RecursionError, a 4,300-digit int), each a one-line :class:`SpecError` naming ``where``."""
    try:
        hook = json_object_hook(where)
        if constants:
            return json.loads(text, object_pairs_hook=hook)
        return json.loads(text, parse_constant=_json_constant, object_pairs_hook=hook)
    except json.JSONDecodeError as e:
        raise SpecError(f"{where}: malformed JSON at line {e.lineno}, column {e.colno}: {e.msg}") from None
    except (ValueError, RecursionError) as e:  # 5,000-digit numbers, NaN, objects nested 100,000 deep
        raise SpecError(f"{where}: JSON kvplan cannot read ({type(e).__name__}: {str(e)[:80]})") from None


def _read_json(path: Path, where: str, constants: bool = False) -> Any:
    from kvplan.textio import read_text as _read_text

    return _load_json(_read_text(path), where, constants)


def read_safetensors(path: Path) -> tuple[dict[str, Any], int]:
    """(the JSON header, bytes of tensor data after it) of a safetensors file: its first 8 + N bytes are read,
    the data is not.

    Raises:
        SpecError: not a safetensors file (shorter than 8 bytes, a header longer than the file or over 100 MiB,
            not a JSON object).
    """
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            head = f.read(8)
            if len(head) != 8:
                raise SpecError(f"{path}: not a safetensors file (shorter than 8 bytes)")
            n = int.from_bytes(head, "little")
            if n > MAX_HEADER_BYTES:
                raise SpecError(f"{path}: safetensors header of {n:,} B is larger than {MAX_HEADER_BYTES >> 20} MiB")
            if n > size - 8:
                raise SpecError(f"{path}: safetensors header of {n:,} B is longer than the file ({size:,} B)")
            raw = f.read(n)
    except OSError as e:
        raise SpecError(f"{path}: cannot read its safetensors header ({type(e).__name__})") from None
    header = _load_json(raw, f"{path}: safetensors header")
    if not isinstance(header, dict):
        raise SpecError(f"{path}: the safetensors header is not a JSON object")
    return header, size - 8 - n


def safetensors_header(path: Path) -> dict[str, Any]:
    """The JSON header of a safetensors file (:func:`read_safetensors` without the data size)."""
    return read_safetensors(path)[0]


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def tensor_size(name: str, t: Any, where: str) -> tuple[str, int, int, int]:
    """(dtype, elements, begin, end) of one safetensors tensor entry, checked as safetensors checks it.

    Raises:
        SpecError: no dtype, shape or data_offsets; not integers; a dtype safetensors does not know; a negative
            dimension or offset; more than 2^64 elements; data_offsets whose span is not the shape's bytes
            (safetensors' TensorInvalidInfo).
    """
    if not isinstance(t, dict) or not all(k in t for k in ("dtype", "shape", "data_offsets")):
        raise SpecError(f"{where}: tensor {name!r} lacks dtype, shape or data_offsets")
    dtype, shape, offsets = t["dtype"], t["shape"], t["data_offsets"]
    if not isinstance(shape, list) or not isinstance(offsets, list) or len(offsets) != 2:
        raise SpecError(f"{where}: tensor {name!r} lacks dtype, shape or data_offsets")
    if not all(_is_int(x) for x in (*shape, *offsets)):
        raise SpecError(f"{where}: tensor {name!r}: shape and data_offsets must be integers")
    bits = SAFETENSORS_DTYPE_BITS.get(dtype) if isinstance(dtype, str) else None
    if bits is None:
        raise SpecError(
            f"{where}: tensor {name!r} has dtype {str(dtype)[:40]!r}; safetensors dtypes: "
            f"{', '.join(SAFETENSORS_DTYPE_BITS)}"
        )
    begin, end = offsets
    if not 0 <= begin <= end or any(d < 0 for d in shape):
        raise SpecError(
            f"{where}: tensor {name!r} has data_offsets {[begin, end]} and shape {shape[:8]}; "
            "allowed: 0 <= begin <= end and no negative dimension"
        )
    count = 1
    for d in shape:
        count *= d
        if count >= MAX_ELEMENTS:
            raise SpecError(f"{where}: tensor {name!r} has 2^64 elements or more (shape of {len(shape)} dimensions)")
    nbytes, rest = divmod(count * bits, 8)
    if rest:
        raise SpecError(f"{where}: tensor {name!r} is {dtype} of shape {shape[:8]}: {count * bits:,} bits, not bytes")
    if end - begin != nbytes:
        raise SpecError(
            f"{where}: tensor {name!r} is {dtype} of shape {shape[:8]}: {nbytes:,} B, but its data_offsets "
            f"{[begin, end]} span {end - begin:,} B (safetensors: TensorInvalidInfo)"
        )
    return dtype, count, begin, end


def header_sizes(
    header: dict[str, Any], where: str, data_bytes: int | None = None
) -> tuple[dict[str, int], dict[str, int]]:
    """(bytes per dtype, elements per dtype) of one safetensors header, checked as the safetensors library
    checks a file before it loads one (``Metadata::validate``, ``SafeTensors::deserialize``): each tensor as
    :func:`tensor_size`; sorted by offset, the tensors tile the data from byte 0 with no gap and no overlap
    (``InvalidOffset``); with ``data_bytes`` (the file's bytes after the header), they end exactly there
    (``MetadataIncompleteBuffer``). So every byte of data is counted once.

    Raises:
        SpecError: as :func:`tensor_size`; tensors that overlap, leave a gap, or do not cover the data.
    """
    nbytes: dict[str, int] = {}
    elems: dict[str, int] = {}
    spans = []
    for name, t in header.items():
        if name == "__metadata__":
            continue
        dtype, count, begin, end = tensor_size(name, t, where)
        spans.append((begin, end, name))
        nbytes[dtype] = nbytes.get(dtype, 0) + (end - begin)
        elems[dtype] = elems.get(dtype, 0) + count
    spans.sort()
    at = 0
    for begin, end, name in spans:
        if begin != at:
            what = "overlaps the tensor before it" if begin < at else "leaves a gap after the tensor before it"
            raise SpecError(
                f"{where}: tensor {name!r} starts at data byte {begin:,}, expected {at:,}: it {what} "
                "(safetensors: InvalidOffset)"
            )
        at = end
    if data_bytes is not None and at != data_bytes:
        raise SpecError(
            f"{where}: the tensors cover {at:,} B of data but the file holds {data_bytes:,} B after its header "
            "(safetensors: MetadataIncompleteBuffer; a truncated or padded file?)"
        )
    return nbytes, elems


def _file_sizes(path: Path) -> tuple[dict[str, int], dict[str, int]]:
    header, data_bytes = read_safetensors(path)
    return header_sizes(header, str(path), data_bytes)


def _total(by_dtype: tuple[dict[str, int], dict[str, int]], where: str) -> tuple[int, int | None]:
    """(bytes, parameters or None when integer-packed tensors make element counts not parameters).

    Raises:
        SpecError: more than :data:`MAX_CHECKPOINT_BYTES` or :data:`MAX_PARAMS`.
    """
    nbytes, elems = by_dtype
    total = sum(nbytes.values())
    params = sum(elems.values()) if set(elems) <= _FLOAT_DTYPES else None
    _check_total(where, "the tensors' bytes", total, MAX_CHECKPOINT_BYTES)
    if params is not None:
        _check_total(where, "the tensors' elements (parameters)", params, MAX_PARAMS)
    return total, params


def _check_total(where: str, what: str, n: int, bound: int) -> int:
    """``n``, or a SpecError naming ``where`` and ``what`` when it is above ``bound``."""
    if n > bound:
        digits = len(str(n))
        shown = f"{n:,}" if digits <= 24 else f"a {digits:,}-digit number"
        raise SpecError(f"{where}: {what} is {shown}, beyond kvplan's bound of {bound:,}")
    return n


def _count(value: Any, where: str, key: str, bound: int) -> int | None:
    """A positive int from JSON (not a bool) within ``bound``, else None (absent or not a count).

    Raises:
        SpecError: an int above ``bound``.
    """
    if not _is_int(value) or value <= 0:
        return None
    return _check_total(where, f"metadata.{key}", value, bound)


def _shard_name(name: Any, index_path: Path) -> str:
    """A weight_map shard name that stays inside the checkpoint (no absolute path, no ``..``).

    Raises:
        SpecError: an empty, absolute or escaping name.
    """
    from pathlib import PurePosixPath, PureWindowsPath

    text = str(name)
    parts = PurePosixPath(text.replace("\\", "/")).parts
    if not text or PurePosixPath(text).is_absolute() or PureWindowsPath(text).is_absolute() or ".." in parts:
        raise SpecError(
            f"{index_path}: weight_map names the shard {text[:120]!r}, which is not a file inside the checkpoint; "
            "shard names are file names beside the index"
        )
    return text


def _index_weights(index_path: Path, shard_path) -> CheckpointWeights | str:
    """The weights of a sharded checkpoint: from every shard's header when ``shard_path(name)`` finds them
    all, else from the index's metadata; when neither tells, the reason (a string).

    Raises:
        SpecError: an unreadable index, a shard name outside the checkpoint, a bad shard header, a tensor in
            two shards, or counts beyond kvplan's bounds.
    """
    index = _read_json(index_path, str(index_path))
    if not isinstance(index, dict):
        return f"{index_path} is not a JSON object (weight_map and metadata)"
    meta = index.get("metadata") if isinstance(index.get("metadata"), dict) else {}
    weight_map = index.get("weight_map") if isinstance(index.get("weight_map"), dict) else {}
    shards = sorted({_shard_name(s, index_path) for s in weight_map.values()})
    paths = [shard_path(s) for s in shards]
    if shards and all(p is not None for p in paths):
        nbytes: dict[str, int] = {}
        elems: dict[str, int] = {}
        seen: dict[str, str] = {}
        for s, p in zip(shards, paths, strict=True):
            header, data_bytes = read_safetensors(p)
            for name in header:
                if name != "__metadata__" and seen.setdefault(name, s) != s:
                    raise SpecError(f"{p}: tensor {name!r} is in {seen[name]} too; each tensor is in one shard")
            b, e = header_sizes(header, str(p), data_bytes)
            for k, v in b.items():
                nbytes[k] = nbytes.get(k, 0) + v
            for k, v in e.items():
                elems[k] = elems.get(k, 0) + v
        return CheckpointWeights(*_total((nbytes, elems), str(index_path)))
    total = _count(meta.get("total_size"), str(index_path), "total_size", MAX_CHECKPOINT_BYTES)
    params = _count(meta.get("total_parameters"), str(index_path), "total_parameters", MAX_PARAMS)
    if total is None:
        missing = "it names no shard" if not shards else "its shards are not all beside it"
        return f"{index_path} has no metadata.total_size and {missing}"
    return CheckpointWeights(total, None, params, False)


def folder_weight_bytes(folder: Path) -> CheckpointWeights | str | None:
    """As :func:`repo_weight_bytes` for a local checkpoint folder: ``model.safetensors``'s header, else
    ``model.safetensors.index.json`` with the shards' headers beside it, else the index's metadata; None
    when the folder has neither file, the reason (a string) when the index does not tell the weights."""
    single = folder / "model.safetensors"
    if single.is_file():
        return CheckpointWeights(*_total(_file_sizes(single), str(single)))
    index_path = folder / "model.safetensors.index.json"
    if not index_path.is_file():
        return None

    def shard(name: str) -> Path | None:
        p = folder / name
        return p if "/" not in name and "\\" not in name and p.is_file() else None

    return _index_weights(index_path, shard)


def repo_weight_bytes(repo: str, revision: str | None) -> CheckpointWeights | str | None:
    """The weights of a Hub repo's safetensors (:class:`CheckpointWeights`), None when unknown, or the reason
    (a string) when a cached or downloaded index does not tell them.

    Never raises for a missing file or no network: the weights are then unknown.

    Raises:
        SpecError: a cached file that is not what it claims (see :func:`header_sizes`, :func:`_index_weights`).
    """
    index_path = _cached(repo, "model.safetensors.index.json", revision)
    single = _cached(repo, "model.safetensors", revision)
    if single is not None:
        return CheckpointWeights(*_total(_file_sizes(single), str(single)))
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
    nbytes: dict[str, int] = {}
    elems: dict[str, int] = {}
    where = f"{_HF_URL}/{repo} (safetensors header)"
    for fmeta in meta.files_metadata.values():
        header = {
            name: {"dtype": t.dtype, "shape": list(t.shape), "data_offsets": list(t.data_offsets)}
            for name, t in fmeta.tensors.items()
        }
        b, e = header_sizes(header, where)  # the data's size is not known here: offsets are checked, not the end
        for k, v in b.items():
            nbytes[k] = nbytes.get(k, 0) + v
        for k, v in e.items():
            elems[k] = elems.get(k, 0) + v
    return CheckpointWeights(*_total((nbytes, elems), where)) if nbytes else None
