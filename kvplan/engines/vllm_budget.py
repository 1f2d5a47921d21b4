"""vLLM's KV-cache memory budget, version by version: each term a small function citing vLLM's code.

What vLLM gives the KV cache (``determine_available_memory`` of the worker; the engine takes the minimum over
workers)::

    KV budget = requested − weights − activation peak − non-torch memory − CUDA-graph estimate

- ``requested``: ``total × gpu_memory_utilization``, rounded up from 0.14 (``v1/worker/utils.py
  request_memory``: ``math.ceil``), a float before (:func:`requested_bytes`);
- weights: the growth of torch's allocated bytes over ``load_model()`` (:mod:`kvplan.weights` sizes the
  checkpoint);
- the activation peak of the profile run (:func:`activation_bytes`): a dummy forward of
  ``max_num_batched_tokens`` tokens, then the sampler on ``min(max_num_batched_tokens, max_num_seqs)``
  rows over the whole vocabulary; V0 profiled ``max(max_model_len, 2048)`` tokens without chunked prefill;
- non-torch memory (:func:`non_torch_bytes`): measured, never computed by vLLM: the growth of memory outside
  torch's allocator between vLLM's baseline snapshot and the end of the profile run; up to 0.10 the
  snapshot precedes NCCL's initialisation, so its communicators count when TP > 1; from 0.11 they do not;
- CUDA graphs (:func:`cudagraph_bytes`): captured after the KV cache until 0.17 (then they come out of the
  ``1 − gpu_memory_utilization`` headroom); estimated before it and subtracted from 0.20
  (``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS``, default 1 from 0.20.0, opt-in in 0.18–0.19).

The version boundaries and each term's source line are in :data:`BUDGET_RULES` (read from vLLM's release
wheels 0.5.5 … 0.33.0; the machine-readable summary is ``tests/fixtures/vllm_budget_rules.yaml``, which a
test checks this table against). The activation peak, non-torch memory and the CUDA-graph estimate are
*modelled*: vLLM measures them on the GPU. Their coefficients below are calibrated on the public start-up logs
in ``tests/fixtures/engine_logs/`` (``scripts/budget_table.py``), and ``kvplan fit`` prints the budget as a
range from the residuals measured there (:mod:`kvplan.data.budget_residuals`), never as a bare integer.

Pure Python: no numpy or torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvplan.calc import cdiv
from kvplan.engines import parse_version, pick_rules
from kvplan.specs import ModelSpec

GIB = 1 << 30
MIB = 1 << 20


@dataclass(frozen=True)
class BudgetRules:
    """How one range of vLLM versions sizes its KV budget.

    Attributes:
        version: the first release of the range (``0.20``).
        generation: ``v0`` (the V0 engine: default through 0.7) or ``v1``.
        requested_ceil: ``requested = ceil(total × U)`` (0.14+) rather than the float product.
        nccl_counted: NCCL's communicators and the custom all-reduce buffers made at start-up count as
            non-torch memory (the baseline snapshot precedes ``init_worker_distributed_environment``: V0, V1
            up to 0.10); from 0.11 the snapshot follows it.
        cudagraph_subtracted: the CUDA-graph estimate is taken from the budget by default (0.20+).
        sampler_bytes: bytes per (row, vocab) element the profile's sampler holds at its peak: V0's top-k /
            top-p sort on the driver rank (~40), V1's PyTorch sort path (0.8–0.16, ~27), the Triton top-k/top-p
            kernel (0.17–0.21 and 0.33's second run, ~14), FlashInfer's sampler (0.22–0.32 default, ~10).
        description: one line, with the source.
    """

    version: str
    generation: str
    requested_ceil: bool
    nccl_counted: bool
    cudagraph_subtracted: bool
    sampler_bytes: int
    description: str


BUDGET_RULES = (
    BudgetRules(
        "0.33",
        "v1",
        True,
        False,
        True,
        14,
        "0.33: total consumed + transient peak + CUDA-graph estimate (v1/worker/gpu_worker.py:641-757); "
        "the sampler profiled twice, the second on the Triton path (gpu_model_runner.py:5866)",
    ),
    BudgetRules(
        "0.27",
        "v1",
        True,
        False,
        True,
        10,
        "0.27-0.32: requested - (free drop + transient peak) - CUDA-graph estimate (utils/mem_utils.py "
        "MemoryProfilingResult.total_consumed); FlashInfer sampler",
    ),
    BudgetRules(
        "0.22",
        "v1",
        True,
        False,
        True,
        10,
        "0.22-0.26: CUDA-graph estimate subtracted (envs.py VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1); "
        "FlashInfer sampler by default (flashinfer-python a dependency)",
    ),
    BudgetRules(
        "0.20",
        "v1",
        True,
        False,
        True,
        14,
        "0.20-0.21: CUDA-graph estimate subtracted by default (0.20.0 envs.py:1725); Triton top-k/top-p",
    ),
    BudgetRules(
        "0.17",
        "v1",
        True,
        False,
        False,
        14,
        "0.17-0.19: the CUDA-graph estimate opt-in (0.18.0 envs.py:1636 default 0); Triton top-k/top-p "
        "sampler (topk_topp_triton.py)",
    ),
    BudgetRules(
        "0.14", "v1", True, False, False, 27, "0.14-0.16: requested = ceil(total x U) (0.14.1 v1/worker/utils.py:258)"
    ),
    BudgetRules(
        "0.12",
        "v1",
        False,
        False,
        False,
        27,
        "0.12-0.13: the FlashInfer sampler opt-in (VLLM_USE_FLASHINFER_SAMPLER): PyTorch sort path",
    ),
    BudgetRules(
        "0.11",
        "v1",
        False,
        False,
        False,
        27,
        "0.11: snapshot after NCCL init (0.11.0 v1/worker/gpu_worker.py:169 vs 182): its buffers outside "
        "the budget; the PyTorch sort sampler of a pip install (FlashInfer's, ~10 B, where installed)",
    ),
    BudgetRules(
        "0.9",
        "v1",
        False,
        True,
        False,
        27,
        "0.9-0.10: requested - (weights + peak increase + non-torch increase), snapshot before NCCL init "
        "(0.9.2 v1/worker/gpu_worker.py:140-158, utils/__init__.py:2477); the PyTorch sort sampler of a "
        "pip install (the official images ship FlashInfer's, ~10 B)",
    ),
    BudgetRules(
        "0.8",
        "v1",
        False,
        True,
        False,
        27,
        "0.8: total x U - absolute torch peak - (used - allocated) (0.8.5 v1/worker/gpu_worker.py:165-212)",
    ),
    BudgetRules(
        "0.5",
        "v0",
        False,
        True,
        False,
        40,
        "V0 0.5-0.10: profile of max(max_model_len, 2048) tokens (no chunked prefill) over max_num_seqs "
        "prompts; sampler on the driver rank (worker/model_runner.py profile_run, worker/worker.py)",
    ),
)


def resolve(version: str | None) -> BudgetRules:
    """The budget rules of a vLLM version (None: the newest); versions older than 0.5 get the V0 rules.

    Raises:
        UsageError: not a version number.
    """
    return pick_rules(BUDGET_RULES, version, "0.33")


def is_v0(version: str | None) -> bool:
    """True for a version whose default engine is V0 (through 0.7; ``--engine-version 0.6``)."""
    v = parse_version(version) if version is not None else None
    return v is not None and v < (0, 8, 0)


def default_utilization(rules: BudgetRules) -> float:
    """``gpu_memory_utilization``'s default: 0.92 from 0.20 (``0.20.0 config/cache.py:66``,
    ``0.33.0 config/cache.py:215``), 0.9 before (``0.19.1 config/cache.py:41``)."""
    from kvplan.engines import parse_version

    return 0.92 if parse_version(rules.version) >= (0, 20, 0) else 0.9


def requested_bytes(total: int, utilization: float, rules: BudgetRules) -> int:
    """What vLLM may use of the GPU: ``ceil(total × U)`` from 0.14 (``v1/worker/utils.py request_memory``),
    ``int(total × U)`` before (the float product, truncated with the final ``int()``)."""
    exact = total * utilization
    if rules.requested_ceil:
        return -(-int(total * utilization * 10**6) // 10**6)
    return int(exact)


# --- the profile run --------------------------------------------------------------------------------------


def profile_tokens(rules: BudgetRules, max_num_batched_tokens: int, max_model_len: int, given: bool) -> int:
    """Tokens of the profile's dummy forward: V1 ``max_num_batched_tokens``; V0 without chunked prefill
    ``max(max_model_len, 2048)`` (``0.5.5 config.py:909``; chunked prefill, on for max_model_len > 32,768 on
    text models, profiles ``max_num_batched_tokens``), unless ``--max-num-batched-tokens`` is given."""
    if rules.generation == "v1" or given or max_model_len > 32768:
        return max_num_batched_tokens
    return max(max_model_len, 2048)


def _dtype_bytes(spec: ModelSpec) -> int:
    return 4 if spec.dtype == "fp32" else 2


def _hidden(spec: ModelSpec) -> int:
    return spec.hidden_size or spec.num_q_heads * spec.head_dim


def mlp_width(spec: ModelSpec) -> int:
    """The dense MLP's intermediate width: config.json's ``intermediate_size``, else ``4 × hidden`` (GPT-2,
    Falcon, GPT-J: ``n_inner`` / ``ffn_hidden_size`` default to four times the width)."""
    return spec.intermediate_size or 4 * _hidden(spec)


def forward_peak_bytes(spec: ModelSpec, tokens: int, tp: int) -> int:
    """Live tensors of the dummy forward at its widest layer, per GPU, for ``tokens`` tokens.

    Dense MLP: the hidden state and residual (``2 × hidden``), the fused gate/up output and the activation
    (``3 × intermediate / TP``), in the model dtype (vLLM ``LlamaMLP``: ``MergedColumnParallelLinear`` →
    ``SiluAndMul`` → ``RowParallelLinear``). MoE (the Triton fused-MoE path, ``fused_moe.py``, chunks of
    ``M = min(T, 32768)``): ``M × k × (max(2 × I_e / TP, hidden) + I_e / TP)`` plus fp32 router logits
    ``T × E × 4``. Attention is skipped in V1's profile (no metadata); its outputs are within ``2 × hidden``.
    """
    b = _dtype_bytes(spec)
    h = _hidden(spec)
    dense = tokens * (2 * h + 3 * cdiv(mlp_width(spec), tp)) * b
    moe = spec.moe
    if moe is None:
        return dense
    inter = max(1, moe.expert_param_count // (3 * h))
    m = min(tokens, 32768)
    k = moe.experts_per_token + moe.num_shared_experts
    experts = m * k * (max(2 * cdiv(inter, tp), h) + cdiv(inter, tp)) * b + tokens * moe.num_experts * 4
    return max(experts + tokens * 2 * h * b, dense if moe.num_moe_layers < spec.num_layers else 0)


def padded_vocab(spec: ModelSpec) -> int:
    """The LM head's rows: the vocabulary padded to a multiple of 64
    (``ParallelLMHead``, ``DEFAULT_VOCAB_PADDING_SIZE``).
    A spec without ``vocab_size`` counts 32,000 (the smallest common vocabulary): its activation is then low."""
    v = spec.vocab_size or 32000
    return cdiv(v, 64) * 64


SAMPLER_BYTES = {"flashinfer": 10, "pytorch": 27, "triton": 14}
"""Bytes per (row, vocab) element at the peak of each V1 top-k/top-p sampler path (``--vllm-sampler``), as
:attr:`BudgetRules.sampler_bytes` gives them per release: FlashInfer's rejection sampler (the log says "Using
FlashInfer for top-p & top-k sampling.", ``v1/sample/ops/topk_topp_sampler.py``), the PyTorch sort path, the
Triton kernel (``topk_topp_triton.py``)."""


def sampler_peak_bytes(spec: ModelSpec, rows: int, rules: BudgetRules, sampler: str | None = None) -> int:
    """The sampler's peak in the profile run: ``rows × vocab × bytes per element`` (logits in the model dtype
    and fp32, the top-k/top-p buffers, probabilities, noise; :attr:`BudgetRules.sampler_bytes`, or
    :data:`SAMPLER_BYTES` of ``sampler`` when the run's sampler is known). V1 gathers the logits to every TP rank
    (``use_all_gather``), so this does not shrink with TP."""
    per = rules.sampler_bytes if sampler is None else SAMPLER_BYTES[sampler]
    return rows * padded_vocab(spec) * per


def activation_bytes(
    spec: ModelSpec, rules: BudgetRules, tokens: int, max_num_seqs: int, tp: int, sampler: str | None = None
) -> int:
    """The activation peak vLLM's profile run measures, modelled: the larger of the forward's live tensors
    (:func:`forward_peak_bytes`) and the sampler's peak over ``min(tokens, max_num_seqs)`` rows with the
    final hidden states still alive (``tokens × hidden``; ``sampler``: the run's sampler path, None: the
    version's default), plus :data:`WORKSPACE_BYTES` of kernel workspaces
    (cuBLAS, attention backends; calibrated).

    Sources: V1 ``v1/worker/gpu_model_runner.py profile_run`` → ``_dummy_run(max_num_batched_tokens,
    is_profile=True)`` and ``_dummy_sampler_run`` (``R = min(max_num_batched_tokens, max_num_seqs)`` rows);
    V0 ``worker/model_runner.py profile_run`` (``max_num_seqs`` prompts of ``tokens // max_num_seqs``).
    """
    rows = min(tokens, max_num_seqs)
    hidden_left = tokens * _hidden(spec) * _dtype_bytes(spec)
    peak = sampler_peak_bytes(spec, rows, rules, sampler) + hidden_left
    return max(forward_peak_bytes(spec, tokens, tp), peak) + WORKSPACE_BYTES


WORKSPACE_BYTES = 128 * MIB  # kernel workspaces the profile run also holds (calibrated on the corpus logs)


# --- memory outside torch ----------------------------------------------------------------------------------


def non_torch_bytes(rules: BudgetRules, tp: int, pp: int) -> int:
    """Non-torch memory the budget subtracts, modelled: :data:`NON_TORCH_BASE_BYTES` per GPU (cuBLAS handles,
    allocator slack outside torch), plus, while NCCL's start-up counts (V0; V1 ≤ 0.10,
    :attr:`BudgetRules.nccl_counted`), :data:`NON_TORCH_NCCL_BYTES` with several GPUs (communicators and the
    custom all-reduce IPC buffers, ``distributed/device_communicators/custom_all_reduce.py``)."""
    extra = NON_TORCH_NCCL_BYTES if rules.nccl_counted and tp * pp > 1 else NON_TORCH_TP_BYTES if tp * pp > 1 else 0
    return NON_TORCH_BASE_BYTES + extra


NON_TORCH_BASE_BYTES = 200 * MIB  # one GPU (logs: 0.03-0.35 GiB)
NON_TORCH_NCCL_BYTES = 384 * MIB  # NCCL communicators counted (logs with TP > 1: 0.1-1.4 GiB, 3.58 on one V0 run)
NON_TORCH_TP_BYTES = 100 * MIB  # lazy NCCL buffers after the snapshot (0.11+)


# --- CUDA graphs --------------------------------------------------------------------------------------------


def capture_sizes(max_num_seqs: int, max_num_batched_tokens: int) -> list[int]:
    """Batch sizes vLLM captures (0.12+ ``config/vllm.py``): ``[1, 2, 4] + range(8, 256, 8) + range(256,
    max + 1, 16)`` with ``max = min(2 × max_num_seqs, 512)``, capped at max_num_batched_tokens."""
    top = min(2 * max_num_seqs, 512, max_num_batched_tokens)
    sizes = [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, top + 1, 16))
    return [s for s in sizes if s <= top]


def cudagraph_bytes(spec: ModelSpec, max_num_seqs: int, max_num_batched_tokens: int, tp: int) -> int:
    """The CUDA-graph memory, modelled from the captures vLLM logs ("Graph capturing finished ... took X GiB",
    0.21-3.45 GiB in the corpus): a fixed pool plus a per-layer, per-capture cost that doubles with TP > 1
    (all-reduce buffers captured in each graph). Subtracted from 0.20 (the estimate,
    ``gpu_model_runner.py profile_cudagraph_memory``); earlier graphs use the headroom."""
    n = len(capture_sizes(max_num_seqs, max_num_batched_tokens))
    per = CUDAGRAPH_BYTES_PER_LAYER_CAPTURE * (2 if tp > 1 else 1)
    return CUDAGRAPH_BASE_BYTES + spec.num_layers * n * per


CUDAGRAPH_BASE_BYTES = 128 * MIB
CUDAGRAPH_BYTES_PER_LAYER_CAPTURE = 96 * 1024  # calibrated on the corpus's capture figures


# --- weights vLLM lays out differently from the checkpoint -------------------------------------------------


def _round_up(x: int, m: int) -> int:
    return cdiv(x, m) * m


def mxfp4_weights_bytes(spec: ModelSpec, tp: int, pp: int, family: str) -> int | None:
    """Weights per GPU of an MXFP4 MoE checkpoint (gpt-oss) as vLLM allocates them, or None for another model.

    The experts' weights are packed 2 per byte with one E8M0 scale per 32 and bf16 biases, each expert's
    intermediate size sliced over TP and padded for the kernel: Marlin (no FlashInfer / triton_kernels backend
    installed, the pip install on Hopper and Ampere) rounds the slice up to 128 and the hidden size to 256,
    FlashInfer on Blackwell both to 256 (``0.10.1.1 model_executor/layers/quantization/mxfp4.py:154-188``;
    0.33 ``fused_moe/oracle/mxfp4.py mxfp4_round_up_hidden_size_and_intermediate_size``). Everything else
    (embeddings, attention, routers: ``param_count_unquantized``) stays in the model dtype, split over TP.
    gpt-oss-120b on one H100: 65.89 GiB (vLLM 0.10.1.1 printed "Model loading took 65.97 GiB"); TP 4 on A100:
    17.17 GiB per GPU (printed 17.22).
    """
    moe = spec.moe
    if moe is None or spec.param_count is None:
        return None
    h = _hidden(spec)
    inter = round(moe.expert_param_count / (3 * h))
    step = 256 if family == "sm100" else 128
    i_p = _round_up(cdiv(inter, tp), step)
    h_p = _round_up(h, 256)
    w13 = 2 * i_p * h_p // 2 + 2 * i_p * (h_p // 32) + 2 * i_p * 2
    w2 = h_p * i_p // 2 + h_p * (i_p // 32) + h_p * 2
    experts = cdiv(moe.num_moe_layers * moe.num_experts * (w13 + w2), pp)
    kept = spec.param_count_unquantized or max(0, spec.param_count - moe.routed_param_count)
    return experts + cdiv(kept * _dtype_bytes(spec), tp * pp)
