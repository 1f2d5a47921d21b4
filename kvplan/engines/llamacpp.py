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
    unplanned_kinds = {
        "compressed": "llama.cpp's deepseek4 architecture (src/llama-arch.cpp LLM_ARCH_DEEPSEEK4) keeps a cache "
        "kvplan does not model",
        "rglru": "llama.cpp has no RecurrentGemma architecture (src/llama-arch.cpp)",
    }
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
