"""llama.cpp's KV-cache rules as ``kvplan fit --engine llamacpp`` applies them.

One rule set, not tied to a release: llama.cpp ``llama-kv-cache`` as described in
``../shared/reference/ENGINES.md``: n_ctx cells padded to 256 per parallel slot, and for interleaved-SWA models
a second cache of ``min(n_ctx, pad(n_swa + n_ubatch, 256))`` cells (``--swa-full``: n_ctx). llama.cpp releases
are build numbers (``b5000``); ollama's versions (``0.6.8``) are accepted too (``--engine ollama``). Any
version that parses gets this set: kvplan knows of no release boundary to warn about.

Pure Python: no numpy or torch.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kvplan.engines import parse_version
from kvplan.engines.base import PY, EngineRules, Settings, token_plan
from kvplan.errors import UsageError
from kvplan.options import Engine, FitOptions
from kvplan.specs import ModelSpec
from kvplan.units import GIB

RULES_VERSION = ""  # no numbered rule set
DESCRIPTION = "llama.cpp llama-kv-cache (n_ctx padded to 256, SWA cache of pad(n_swa + n_ubatch, 256) cells)"


@dataclass(frozen=True)
class LlamacppRules:
    """llama.cpp's one rule set (no version number)."""

    version: str
    description: str


RULE_SETS = (LlamacppRules(RULES_VERSION, DESCRIPTION),)
PAD = 256  # cells are padded to 256 (kvplan's block size for llama.cpp)
COMPUTE_BYTES = GIB // 2  # compute buffer default (kvplan.fit's calibration)


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


def older_than_oldest(version: str | None) -> bool:
    """Always False: the one rule set has no oldest release."""
    return False


class LlamacppEngine(EngineRules):
    """llama.cpp: no memory fraction; the cache is n_ctx cells (padded to 256) per slot; interleaved-SWA
    models get a second cache of ``min(n_ctx, pad(n_swa + n_ubatch, 256))`` cells (``--swa-full``: n_ctx);
    budget = total − weights − compute buffer − overhead."""

    engine = Engine.llamacpp
    display_name = "llama.cpp"
    block_size = PAD
    utilization = 1.0
    max_num_batched_tokens = 512
    quantized_kv = "q8_0"
    gguf_weights = True

    def resolve_rules(self, version: str | None) -> LlamacppRules:
        return resolve_rules(version)

    def activation_bytes(self, spec: ModelSpec, settings: Settings, tp: int) -> int:
        return COMPUTE_BYTES

    def usable_and_budget(self, total: int, util: float, weights: int, activation: int, overhead: int):
        usable = int(total * util)
        return usable, usable - weights - activation - overhead

    def plan(self, spec: ModelSpec, kv_dtype, opts: FitOptions, settings: Settings, max_len: int):
        ubatch = settings.max_num_batched_tokens

        def cells(kind: str, window: int, seq, block: int, xp=PY):
            full = xp.cdiv(seq, block) * block
            return xp.minimum(full, xp.cdiv(window + ubatch, PAD) * PAD)

        return token_plan(
            spec, kv_dtype, opts, settings.block_size, max_len, window_rule=cells, windows_full=opts.swa_full,
            in_flight=ubatch,
        )  # fmt: skip


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
    ``llama_kv_cache_unified::get_padding``; the later commit of ``../shared/reference`` pads to 256 always)."""
    if swa_full:
        return n_ctx
    pad = 256 if flash_attn else 32
    return min(n_ctx, -(-(n_swa * n_seq + n_ubatch) // pad) * pad)
