"""SGLang's KV pool split for hybrid sliding-window models: what ``kvplan fit --engine sglang`` applies.

Source: SGLang 0.5.23 (``pip download --no-deps sglang==0.5.23``, read, not installed; its modules do not import
on a CPU machine without its CUDA packages: flashinfer-python[cu13], sglang-kernel, torch 2.14.1):

- ``srt/configs/model_config.py is_hybrid_swa_model``: the architectures whose sliding layers get their own
  pool (GptOssForCausalLM, Llama4ForConditionalGeneration, Gemma4*, MiMoV2*, Step3p5*, ...). Every other
  model keeps one pool in which sliding layers hold all tokens, as full ones.
- ``srt/model_executor/pool_configurator.py HybridSWAPoolConfigurator`` (the default:
  ``--enable-unified-memory`` off, no ``--max-running-requests`` cap with the radix cache disabled): bytes
  per token of the full pool ``F`` (every full layer) and of the SWA pool ``W`` (every sliding layer);
  ``cell = F + r × W`` with ``r = --swa-full-tokens-ratio`` (default 0.8, ``arg_groups/fields/schedule.py``);
  ``full_tokens = int(available // cell)`` aligned down to the page, ``swa_tokens = int(full_tokens × r)``
  aligned down ("Use sliding window memory pool. full_layer_tokens=..., swa_layer_tokens=...").
- ``compute_swa_request_cap``: a running request holds at most ``window + SGLANG_SWA_EVICTION_INTERVAL
  (128) × draft tokens (1) + page_size`` SWA slots, plus ``page_size`` for its decode step.

kvplan applies the split to the architectures of that list it can plan, by the spec's ``architecture``
(config.json's ``architectures[0]``): gpt-oss and Llama 4 (chunked layers are SGLang's SWA layers, window
``attention_chunk_size``). Not modelled: Gemma 4 / MiMo-V2 / Step-3.5 (their full and sliding geometries differ per
layer; not checked against SGLang's ``ModelConfig``), the request-cap configurator, unified memory,
speculative decoding, and SGLang's Mamba pools (hybrid state models: a unified pool split dynamically,
``mem_cache/kv_cache_configurator.py _init_unified_mamba_pools``).
"""

from __future__ import annotations

from kvplan.engines import parse_version
from kvplan.errors import UsageError
from kvplan.specs import ModelSpec

RULES_VERSION = "0.5.23"  # the one rule set: the SGLang release read (see the module docstring)
DESCRIPTION = "SGLang 0.5.23 (model_runner mem_fraction_static, pool_configurator.py)"

DEFAULT_SWA_FULL_TOKENS_RATIO = 0.8  # srt/arg_groups/fields/schedule.py swa_full_tokens_ratio fallback
SWA_EVICTION_INTERVAL = 128  # srt/environ.py SGLANG_SWA_EVICTION_INTERVAL
PAGE_SIZE = 1  # --page-size default on CUDA (kvplan's SGLang block size)
# srt/configs/model_config.py is_hybrid_swa_model: the architectures with an SWA pool (those kvplan can plan)
HYBRID_SWA_ARCHITECTURES = frozenset(
    {
        "GptOssForCausalLM",
        "Llama4ForConditionalGeneration",
        "GraniteSWAForCausalLM",
        "GraniteMoeSWAForCausalLM",
    }
)


def is_hybrid_swa(spec: ModelSpec) -> bool:
    """True when SGLang gives the model's sliding (or chunked) layers their own pool: an architecture in
    SGLang's list (the spec's ``architecture``, config.json's ``architectures[0]``) with both full and
    windowed layers. A spec without an architecture keeps one pool (SGLang's default)."""
    kinds = set(spec.layer_kinds)
    if not (kinds & {"sliding", "chunked"}) or "full" not in kinds:
        return False
    return spec.architecture in HYBRID_SWA_ARCHITECTURES


def window(spec: ModelSpec) -> int:
    """The SWA window SGLang uses: the sliding window, else the attention chunk (Llama 4)."""
    return spec.sliding_window or spec.attention_chunk_size or 0


def pool_split(budget: int, full_per_token: int, swa_per_token: int, ratio: float = DEFAULT_SWA_FULL_TOKENS_RATIO,
               page_size: int = PAGE_SIZE) -> tuple[int, int]:  # fmt: skip
    """(full_layer_tokens, swa_layer_tokens) for ``budget`` bytes (``HybridSWAPoolConfigurator``)."""
    cell = full_per_token + ratio * swa_per_token
    full = int(budget // cell) if cell > 0 else 0
    full = full // page_size * page_size
    swa = int(full * ratio) // page_size * page_size
    return full, swa


def swa_tokens_per_request(seq_len: int, win: int, page_size: int = PAGE_SIZE) -> int:
    """SWA slots one running request of ``seq_len`` tokens holds at most (``compute_swa_request_cap``'s
    per request, without speculative decoding): ``min(S, window + 128 + page) + page``, never above S."""
    return min(seq_len, win + SWA_EVICTION_INTERVAL + 2 * page_size)


def requests(full_tokens: int, swa_tokens: int, seq_len: int, win: int) -> int:
    """Whole requests of ``seq_len`` tokens both pools hold."""
    if seq_len <= 0:
        return 0
    return min(full_tokens // seq_len, swa_tokens // swa_tokens_per_request(seq_len, win))


def longest_request(full_tokens: int, swa_tokens: int, win: int) -> int:
    """The longest single request: it needs S full slots and :func:`swa_tokens_per_request` SWA slots."""
    if swa_tokens >= swa_tokens_per_request(full_tokens, win):
        return full_tokens
    return min(full_tokens, swa_tokens)


def log_line(full_tokens: int, swa_tokens: int) -> str:
    """SGLang's start-up line for the split (``_solve_pool_sizes``)."""
    return f"Use sliding window memory pool. full_layer_tokens={full_tokens}, swa_layer_tokens={swa_tokens}"


def resolve_rules(version: str | None) -> str:
    """The rule set for an SGLang version: kvplan has one (:data:`RULES_VERSION`); a version is accepted when it
    parses (one older than the set gets it with a warning, :func:`older_than_oldest`).

    Raises:
        UsageError: not a version number.
    """
    if version is None or str(version).strip().lower() in ("", "latest", "current"):
        return RULES_VERSION
    if parse_version(version) is None:
        raise UsageError(
            f"--engine-version: {version!r} is not a version number (e.g. 0.5.23); SGLang rule sets: {RULES_VERSION}"
        )
    return RULES_VERSION


def older_than_oldest(version: str | None) -> bool:
    """True when ``version`` parses and is older than :data:`RULES_VERSION`."""
    asked = None if version is None else parse_version(version)
    return asked is not None and asked < parse_version(RULES_VERSION)
