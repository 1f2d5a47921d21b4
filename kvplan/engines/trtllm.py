"""TensorRT-LLM's KV-cache sizing rules, by version: what ``kvplan fit --engine trtllm [--engine-version V]``
applies.

Rule sets (``--engine-version`` picks the newest set not newer than the version given; an older version gets
the oldest set with a warning, and the output names the set applied):

==========  ==============================================================================================
``1.2``     (default) 1.2.0rc4 onward: as 1.0, but the pool holds ``int(max_tokens // tokens_per_block)``
            blocks (the floor, ``resource_manager.py calculate_max_num_blocks``; PR #9093)
``1.0``     the PyTorch backend of TensorRT-LLM 1.0 and 1.1 (and 1.2.0rc0-rc2), ``tensorrt_llm/_torch/pyexecutor/
            resource_manager.py KVCacheManager`` (read at NVIDIA/TensorRT-LLM commit b35ac1b6, and checked
            on a TensorRT-LLM 1.1.0rc3 start-up log of gpt-oss-120b):

            - without ``kv_cache_config.max_attention_window`` the window of every layer is
              ``max_seq_len`` (``max_attention_window_vec = [max_seq_len]``): sliding layers are sized like
              full ones ("kv size is 73728" per token for gpt-oss-120b: 36 layers × 2 × 8 × 64 × 2 B);
            - ``max_tokens = kv memory // bytes per token`` (``_util.py`` ``_cal_max_tokens``), and the pool
              holds ``ceil(max_tokens / tokens_per_block)`` blocks (``calculate_max_num_blocks``);
            - ``max_seq_len`` is cut to what the pool holds for one sequence,
              ``blocks × tokens_per_block`` (beam 1, no sink tokens: ``get_max_atten_window_upper_bound``),
              logging "Attention window size S exceeds upper bound B for available blocks. Reducing to B."
==========  ==============================================================================================

The floor (``1.2``) costs one block when the tokens do not fill the last block. Its first release is bracketed
from TensorRT-LLM's stored sources and PyPI's dates, not read at a tag (the repository is too large to fetch
here): see ``tests/fixtures/trtllm_rules.yaml``, which tests/test_trtllm.py holds this table to.
``scripts/trtllm_source_rules.py`` reads the same facts at each release tag of a TensorRT-LLM clone
(``git show TAG:tensorrt_llm/_torch/pyexecutor/resource_manager.py`` ...) into
``tests/fixtures/trtllm_source_rules.yaml``, which the tests check too once it exists.

Both sets, in every code version read: MLA layers are one K-only head of ``kv_lora_rank + qk_rope_head_dim``
(``_util.py`` ``create_kv_cache_manager``: ``CacheType.SELFKONLY``, ``num_kv_heads=1``), not divided by TP;
KV heads per rank are ``ceil(H_kv / TP)`` (``KVCacheManager.__init__``); only Gemma 4 hybrids get their sliding
windows filled from ``layer_types`` (newest main ``_util.py``), so gpt-oss's sliding layers are full ones.

Not modelled: variable sliding windows (``max_attention_window`` given: ``calculate_max_num_blocks_from_cpp``
splits the memory per window size), beam search, sink tokens, the host (secondary) pool.

Pure Python: no numpy or torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvplan.calc import cdiv
from kvplan.engines import is_older_than, pick_rules
from kvplan.engines.base import PY, EngineRules, Settings, token_plan, window_as_blocks
from kvplan.options import Engine, FitOptions
from kvplan.specs import ModelSpec
from kvplan.units import GIB, MIB, plural


@dataclass(frozen=True)
class TrtllmRules:
    """One version's KV-cache conventions.

    Attributes:
        version: the rule set (``1.0``).
        windows_as_full: every attention layer is cached for max_seq_len tokens (no max_attention_window).
        ceil_blocks: the pool holds ``ceil(max_tokens / tokens_per_block)`` blocks (else floor).
        clamp_max_seq_len: max_seq_len is cut to ``blocks × tokens_per_block`` when larger.
        description: one line for the output.
    """

    version: str
    windows_as_full: bool
    ceil_blocks: bool
    clamp_max_seq_len: bool
    description: str


RULE_SETS = (
    TrtllmRules(
        "1.2",
        True,
        False,
        True,
        "TensorRT-LLM 1.2+ PyTorch backend: blocks = int(max_tokens // tokens_per_block) (resource_manager.py "
        "calculate_max_num_blocks, with PR #9093's dry-run branch)",
    ),
    TrtllmRules("1.0", True, True, True, "TensorRT-LLM 1.0-1.1 PyTorch backend (resource_manager.py KVCacheManager)"),
)
# The floor shipped inside 1.2.0's release candidates: 1.2.0rc2 (2025-11-07) predates PR #9093 (opened 2025-11-12)
# and rounds up; rc4 (2025-11-25) is the first candidate that floors (tests/fixtures/trtllm_rules.yaml: inferred from
# the stored versions of resource_manager.py and PyPI's upload dates; 1.1.0rc3's log confirms the ceil).
FIRST_FLOOR_RC = 4
LATEST = RULE_SETS[0]


def resolve_rules(version: str | None) -> TrtllmRules:
    """The rule set for a TensorRT-LLM version (None, ``latest``: the newest): the newest set not newer than it,
    else the oldest (:func:`kvplan.engines.pick_rules`); 1.2.0's release candidates before rc4 round up
    (:data:`FIRST_FLOOR_RC`).

    Raises:
        UsageError: not a version number.
    """
    import re

    rules = pick_rules(RULE_SETS, version, "1.2")
    m = re.fullmatch(r"v?1\.2\.0rc(\d+)(?:\.post\d+)?", str(version or "").strip().lower())
    if rules.version == "1.2" and m and int(m.group(1)) < FIRST_FLOOR_RC:
        return RULE_SETS[1]
    return rules


def older_than_oldest(version: str | None) -> bool:
    """True when ``version`` parses and is older than the oldest rule set (the CLI warns)."""
    return is_older_than(RULE_SETS, version)


def pool_blocks(budget, bytes_per_token: int, tokens_per_block: int, rules: TrtllmRules, xp=PY):
    """Blocks of the primary pool for ``budget`` bytes of KV memory.

    ``max_tokens = budget // bytes_per_token`` (``_util.py _cal_max_tokens``: ``int(available_kv_mem //
    kv_size_per_token)``), then ``ceil(max_tokens / tokens_per_block)`` (``resource_manager.py
    calculate_max_num_blocks``, 1.0-1.1) or the floor. 0 when nothing is cached per token.
    """
    if bytes_per_token <= 0:
        return xp.full(budget, 0)
    max_tokens = budget // bytes_per_token
    return xp.cdiv(max_tokens, tokens_per_block) if rules.ceil_blocks else max_tokens // tokens_per_block


def max_seq_len_upper_bound(blocks: int, tokens_per_block: int) -> int:
    """The longest sequence the pool holds (``get_max_atten_window_upper_bound`` with beam 1 and no sink
    tokens): ``blocks × tokens_per_block``."""
    return blocks * tokens_per_block


def log_lines(max_seq_len: int, blocks: int, tokens_per_block: int, bytes_per_token: int) -> str:
    """What the start-up log prints about the pool: the window cut when max_seq_len is beyond the pool
    (``_validate_and_adjust_attention_windows``), then the allocation (C++ ``KVCacheManager``:
    "[MemUsageChange] Allocated X GiB for max tokens in paged KV cache (N)")."""
    bound = max_seq_len_upper_bound(blocks, tokens_per_block)
    tokens = blocks * tokens_per_block
    alloc = f"Allocated {tokens * bytes_per_token / (1 << 30):.2f} GiB for max tokens in paged KV cache ({tokens})"
    if blocks and max_seq_len > bound:
        cut = (
            f"Attention window size {max_seq_len} exceeds upper bound {bound} for available blocks. "
            f"Reducing to {bound}."
        )
        return f"{cut} {alloc}"
    return alloc


ACTIVATION_BASE_BYTES = 1 * GIB
ACTIVATION_BYTES_PER_TOKEN_PER_HIDDEN = 14  # 2 projections × 3.5 × hidden × 2 B (kvplan.fit's calibration)
BYTES_PER_SEQUENCE = 2 * MIB  # runtime buffers per sequence of max_batch_size (one log: RTX 5090, 2048)


class TrtllmEngine(EngineRules):
    """TensorRT-LLM: ``free_gpu_memory_fraction`` of the memory still free after weights and activations,
    32-token blocks, every attention layer sized for max_seq_len (:data:`RULE_SETS`), ``max_batch_size``
    capping the running requests."""

    engine = Engine.trtllm
    display_name = "TensorRT-LLM"
    unplanned_kinds = {
        "compressed": "kvplan has no TensorRT-LLM rule for DeepSeek-V4's compressed attention (its source not read)",
        "rglru": "kvplan has no TensorRT-LLM rule for RecurrentGemma's recurrent state (its source not read)",
        "rwkv4": "kvplan has no TensorRT-LLM rule for RWKV-4's state (its source not read)",
        "mlstm": "kvplan has no TensorRT-LLM rule for xLSTM's state (its source not read)",
        "cca": "kvplan has no TensorRT-LLM rule for ZAYA's CCA state (its source not read)",
        "sconv": "kvplan has no TensorRT-LLM rule for Inkling's short-conv states (its source not read)",
        "hidden": "kvplan has no TensorRT-LLM rule for a hidden-state cache (XLNet, Reformer; its source not read)",
        "prefix_tokens": "kvplan has no TensorRT-LLM rule for CPM-Ant's prompt tokens (its source not read)",
    }
    block_size = 32
    utilization = 0.9
    max_num_batched_tokens = 8192
    max_batch_size = 2048
    # tensorrt_llm/_torch/pyexecutor/model_loader.py _VALID_KV_CACHE_DTYPES = ("fp8", "nvfp4", "auto") (1.0-1.2;
    # validate_and_set_kv_cache_quant refuses any other kv_cache_config.dtype): FP8 is E4M3 (QuantAlgo.FP8); with
    # auto the cache is the model dtype (LLM(dtype=...): float16, bfloat16, float32)
    # KVCacheManager.__init__ (_torch/pyexecutor/resource_manager.py): (num_kv_heads + tp_size - 1) // tp_size heads
    # per rank; an MLA layer one K-only head of kv_lora_rank + qk_rope_head_dim on every rank (_util.py
    # create_kv_cache_manager: CacheType.SELFKONLY, num_kv_heads=1): tests/fixtures/trtllm_rules.yaml
    kv_split_source = (
        "TensorRT-LLM KVCacheManager, _torch/pyexecutor/resource_manager.py",
        "TensorRT-LLM create_kv_cache_manager: CacheType.SELFKONLY, num_kv_heads=1, _torch/pyexecutor/_util.py",
        "ceil(H_kv / TP)",
    )
    kv_cache_dtypes = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32", "fp8": "fp8_e4m3", "nvfp4": "nvfp4"}
    kv_cache_dtypes_source = (
        "TensorRT-LLM 1.x _torch/pyexecutor/model_loader.py _VALID_KV_CACHE_DTYPES; the 16/32-bit ones are the model "
        "dtype with the auto cache"
    )

    def resolve_rules(self, version: str | None) -> TrtllmRules:
        return resolve_rules(version)

    def older_than_oldest(self, version: str | None) -> bool:
        return older_than_oldest(version)

    def settings(self, spec: ModelSpec, gpu, opts: FitOptions) -> Settings:
        util, block, mnbt, max_batch = self.common_settings(opts)
        # max_batch_size caps the requests the scheduler runs at once (--max-num-seqs overrides it)
        seqs = max_batch if opts.max_num_seqs is None else opts.max_num_seqs
        return Settings(resolve_rules(opts.engine_version), util, block, mnbt, max_batch, seqs)

    def activation_bytes(self, spec: ModelSpec, settings: Settings, opts: FitOptions) -> int:
        """``1 GiB + max_num_tokens × 14 × hidden / TP`` (as vLLM's calibration) plus 2 MiB per sequence of
        ``max_batch_size`` (runtime buffers)."""
        hidden = spec.hidden_size or spec.num_q_heads * spec.head_dim
        act = ACTIVATION_BASE_BYTES + cdiv(
            settings.max_num_batched_tokens * ACTIVATION_BYTES_PER_TOKEN_PER_HIDDEN * hidden, opts.tensor_parallel_size
        )
        return act + settings.max_batch_size * BYTES_PER_SEQUENCE

    def usable_and_budget(self, total: int, util: float, terms: dict[str, int], settings: Settings):
        """``usable = total − weights − activation − overhead``; budget = ``int(usable × fraction)``."""
        usable = total - terms["weights"] - terms.get("activation", 0) - terms["non_torch"]
        return usable, int(usable * util)

    def plan(self, spec: ModelSpec, kv_dtype, opts: FitOptions, settings: Settings, max_len: int):
        rules = settings.rules

        def blocks(budget, per_token, block, xp=PY):
            return pool_blocks(budget, per_token, block, rules, xp)

        def log(m: dict, seq: int, pools: tuple) -> str:
            return log_lines(seq, m["num_blocks"], m["block_size"], plan.kv_bytes_per_token)

        plan = token_plan(
            spec, kv_dtype, opts, settings.block_size, max_len, window_rule=window_as_blocks,
            windows_full=opts.swa_full or rules.windows_as_full, in_flight=settings.max_num_batched_tokens,
            blocks_rule=blocks, pool_is_blocks=True, log=log,
        )  # fmt: skip
        return plan

    def does_not_fit_note(self, r) -> str:
        if r.engine_version and r.num_blocks:  # it starts, with a shorter max_seq_len
            return (
                f"; TensorRT-LLM {r.engine_version} would cut max_seq_len to {r.num_blocks * r.block_size:,} "
                f"({plural(r.num_blocks, 'block')} of {r.block_size})"
            )
        return ""


ENGINE = TrtllmEngine()
