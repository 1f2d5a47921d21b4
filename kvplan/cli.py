"""The ``kvplan`` command line: parse flags, call the core, hand results to :mod:`kvplan.render`.

No arithmetic here. Errors from the core (:class:`kvplan.errors.KvplanError`) and from flag parsing
become one line on stderr: exit 2 for bad input, 1 for a plan that does not fit.
"""

import os
import sys
from typing import List, Optional

import typer

from kvplan import __version__
from kvplan.errors import KvplanError

app = typer.Typer(
    name="kvplan",
    help="Exact KV-cache memory planning for LLM serving: bytes, requests per GPU, GPUs per fleet.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)

MODEL_HELP = (
    "Bundled model name (see 'kvplan models'), a Hugging Face repo id (org/name[@revision]), a GGUF file, "
    "a spec YAML, or a config.json (or its folder)."
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"kvplan {__version__}")
        raise typer.Exit()


def _gib(text: str | None, flag: str) -> int | None:
    """A size flag whose bare number means GiB (``--weights-gib 16``, ``--activation-gib 2GB``), in bytes."""
    from kvplan.units import parse_size_default_gib

    return None if text is None else parse_size_default_gib(text, flag)


DP_HELP = (
    "Attention data-parallel ranks per replica, each with its own requests' KV (vLLM: D engine ranks of TP GPUs; "
    "SGLang's attention DP size: D groups within --tp). Engine spellings accepted (see kvplan.aliases)."
)
EP_HELP = "Split the routed experts over the GPUs of a stage (vLLM; SGLang: --ep-size = --tp)."
EP_SIZE_HELP = "SGLang's EP size: GPUs the routed experts are split over (divides --tp)."
DPA_HELP = "SGLang's spelling, accepted: kvplan's --data-parallel-size is attention data parallelism."


def _load_model(ref: str):
    """:func:`kvplan.loader.load_model`, its warnings printed on stderr (the core returns them, never prints)."""
    from kvplan import render
    from kvplan.loader import load_model

    spec = load_model(ref)
    for note in spec.warnings:
        render.warn(note)
    return spec


LLAMA_HELP = {
    "ctx_size": "llama.cpp -c: the context of all slots together (0 = the model's; default: the model's, lowered "
    "by llama.cpp's -fit to what fits). Other engines: tokens per request.",
    "parallel": "llama.cpp -np: slots (default: llama-server 4, unified; llama-cli 1).",
    "kv_unified": "llama.cpp -kvu / -no-kvu: one cache shared by all slots (default: on only without --parallel).",
    "cache_type_k": "llama.cpp -ctk: K cache type (f16, bf16, f32, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl; "
    "default --kv-dtype, auto = f16).",
    "cache_type_v": "llama.cpp -ctv: V cache type (as -ctk; a quantized V needs flash attention).",
    "flash_attn": "llama.cpp -fa: on, off or auto (default auto = on).",
    "batch_size": "llama.cpp -b (default 2048); -ub / --ubatch-size is --max-num-batched-tokens (default 512).",
    "llama_tool": "Whose llama.cpp defaults apply: server (llama-server, default) or cli (llama-cli).",
}


def _llama_settings(ctx_size, n_parallel, kv_unified, cache_type_k, cache_type_v, flash_attn, n_batch, llama_tool):
    """The llama.cpp keywords of :func:`kvplan.api.fit_options` (None: the tool's defaults)."""
    return dict(
        ctx_size=ctx_size, n_parallel=n_parallel, kv_unified=kv_unified, cache_type_k=cache_type_k,
        cache_type_v=cache_type_v, flash_attn=flash_attn, n_batch=n_batch, llama_tool=llama_tool,
    )  # fmt: skip


def _llama_options():
    """Fresh typer options of llama.cpp's settings (one set per command)."""
    return dict(
        ctx_size=typer.Option(None, "--ctx-size", help=LLAMA_HELP["ctx_size"]),
        n_parallel=typer.Option(None, "--parallel", help=LLAMA_HELP["parallel"]),
        kv_unified=typer.Option(None, "--kv-unified/--no-kv-unified", help=LLAMA_HELP["kv_unified"]),
        cache_type_k=typer.Option(None, "--cache-type-k", help=LLAMA_HELP["cache_type_k"]),
        cache_type_v=typer.Option(None, "--cache-type-v", help=LLAMA_HELP["cache_type_v"]),
        flash_attn=typer.Option(None, "--flash-attn", help=LLAMA_HELP["flash_attn"]),
        n_batch=typer.Option(None, "--batch-size", help=LLAMA_HELP["batch_size"]),
        llama_tool=typer.Option(None, "--llama-tool", help=LLAMA_HELP["llama_tool"]),
        swa_full=typer.Option(False, "--swa-full", help="llama.cpp: size sliding-window layers at n_ctx too."),
    )


_LO = _llama_options


def _get_gpu(text: str, flag: str = "--gpu"):
    """:func:`kvplan.gpus.get_gpu` and its notes (:func:`kvplan.gpus.gpu_notes`), printed on stderr."""
    from kvplan import render
    from kvplan.gpus import get_gpu, gpu_notes

    gpu = get_gpu(text, flag)
    notes = gpu_notes(text, gpu, flag)
    for note in notes:
        render.warn(note)
    return gpu, notes


# --- SGLang's settings (fit, fleet, sweep) ------------------------------------------------------------


def _opt_swa_ratio():
    return typer.Option(
        None, "--swa-full-tokens-ratio", help="SGLang: SWA-pool tokens per full-pool token of hybrid-SWA models "
        "(default 0.8)."
    )  # fmt: skip


def _opt_mamba_ratio():
    return typer.Option(
        None, "--mamba-full-memory-ratio", help="SGLang: hybrids' state memory per KV memory (default 0.9)."
    )


def _opt_mamba_slots():
    return typer.Option(None, "--max-mamba-cache-size", help="SGLang: hybrids' state slots (default: by the ratio).")


def _opt_radix():
    return typer.Option(
        False, "--disable-radix-cache", help="SGLang: no prefix cache (1 state slot per request; with "
        "max_running_requests given (--max-num-seqs) it sizes the state and SWA pools)."
    )  # fmt: skip


def _opt_max_total_tokens():
    return typer.Option(None, "--max-total-tokens", help="SGLang: cap on the token pool (tokens; 50k = 50000).")


def _opt_ssm_dtype():
    return typer.Option(
        None, "--mamba-ssm-dtype", help="SGLang: hybrids' SSM state dtype: float32 (default), bfloat16, float16."
    )


def _sglang_settings(swa_full_tokens_ratio, mamba_full_memory_ratio, max_mamba_cache_size, disable_radix_cache,
                     max_total_tokens, mamba_ssm_dtype) -> dict:  # fmt: skip
    """The SGLang flags as :func:`kvplan.api.fit_options` keywords."""
    return dict(
        swa_full_tokens_ratio=swa_full_tokens_ratio, mamba_full_memory_ratio=mamba_full_memory_ratio,
        max_mamba_cache_size=max_mamba_cache_size, disable_radix_cache=disable_radix_cache,
        max_total_tokens=max_total_tokens, mamba_ssm_dtype=mamba_ssm_dtype,
    )  # fmt: skip


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    """Exact KV-cache memory planning for LLM serving."""


# --- estimate -----------------------------------------------------------------------------------


@app.command()
def estimate(
    model: List[str] = typer.Argument(
        ..., metavar="MODEL...", help=MODEL_HELP + " Several: one summary table, side by side."
    ),
    seq: List[str] = typer.Option(..., "--seq", "-s", help="Tokens per request; repeat for several. 128k = 131072."),
    batch: int = typer.Option(1, "--batch", "-b", min=1, help="Concurrent requests."),
    kv_dtype: str = typer.Option(
        "auto", "--kv-dtype", help="KV dtype: auto (model dtype), fp16, bf16, fp8, int8, q8_0, q4_0, nvfp4, ..."
    ),
    block_size: Optional[int] = typer.Option(
        None, "--block-size", min=1, help="Round each request up to whole blocks of N tokens (paged engines)."
    ),
    tp: int = typer.Option(1, "--tp", min=1, help="Tensor-parallel size: report bytes per GPU."),
    summary: bool = typer.Option(
        False, "--summary", help="One line per model and --seq (the default for several models)."
    ),
    json_out: bool = typer.Option(
        False, "--json", help="Print JSON: one object per model and --seq value (a list for several)."
    ),
) -> None:
    """KV-cache bytes of each MODEL for requests of --seq tokens: per layer kind, per request, per batch."""
    from kvplan import calc, render
    from kvplan.units import parse_tokens

    specs = [_load_model(m) for m in model]
    seqs = [parse_tokens(s) for s in seq]
    results = [(spec, calc.estimate(spec, s, batch, kv_dtype, block_size, tp)) for spec in specs for s in seqs]
    for spec, r in results:
        if r.exceeds_max_model_len:
            render.warn(
                f"--seq {r.seq_len:,} is beyond {spec.name}'s max context of {spec.max_model_len:,} tokens "
                "(computed anyway: rope scaling may allow it)"
            )
    if json_out:
        objs = [render.estimate_json(r) | ({"reader": spec.reader} if spec.reader else {}) for spec, r in results]
        render.print_json(objs[0] if len(objs) == 1 else objs)
        return
    con = render.console()
    if summary or len(specs) > 1:
        render.estimate_summary_table([r for _, r in results], con)
        for spec in specs:
            if spec.reader:
                con.print(f"{spec.name} read by: {spec.reader}", style="dim", highlight=False)
        return
    for _, r in results:
        render.estimate_table(r, con)
    if specs[0].reader:  # which reader built the spec (a wrapper's text model, or transformers' fallback)
        con.print(f"read by: {specs[0].reader}", style="dim", highlight=False)


# --- models ---------------------------------------------------------------------------------------


@app.command()
def models(
    json_out: bool = typer.Option(False, "--json", help="Print JSON (bytes at 4096 and 131072 tokens)."),
) -> None:
    """List the bundled models with their KV geometry and bytes per token at bf16."""
    from kvplan import calc, render
    from kvplan.loader import load_all_bundled

    rows = [calc.model_summary(s) for s in load_all_bundled()]
    if json_out:
        render.print_json(rows)
    else:
        render.models_table(rows, render.console())


# --- compare -------------------------------------------------------------------------------------


@app.command()
def compare(
    model: str = typer.Argument(..., metavar="MODEL", help=MODEL_HELP),
    seq: str = typer.Option(..., "--seq", "-s", help="Tokens per request (128k = 131072)."),
    batch: int = typer.Option(1, "--batch", "-b", min=1, help="Concurrent requests."),
    kv_dtype: Optional[str] = typer.Option(None, "--kv-dtype", help="KV dtype (default auto = model dtype)."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """MHA vs the model vs MQA: the same geometry with H_kv = H_q, the model's H_kv, and H_kv = 1."""
    from kvplan import calc, render
    from kvplan.units import parse_tokens

    spec = _load_model(model)
    s = parse_tokens(seq)
    rows = calc.compare_topologies(spec, s, batch, kv_dtype)
    dtype = calc.resolve_kv_dtype(spec, kv_dtype).name
    if json_out:
        render.print_json(render.compare_json(spec.name, s, dtype, rows))
    else:
        render.compare_table(spec.name, s, dtype, rows, render.console())


# --- gpus ---------------------------------------------------------------------------------------


@app.command()
def gpus(
    json_out: bool = typer.Option(False, "--json", help="Print JSON: one object per GPU, bytes as integers."),
) -> None:
    """List the GPU catalog: nvidia-smi and CUDA-visible memory, bandwidth, BF16 TFLOP/s, FP8, aliases."""
    from kvplan import render
    from kvplan.gpus import load_catalog

    catalog = load_catalog()
    if json_out:
        render.print_json([render.gpu_json(g) for g in catalog])
    else:
        render.gpus_table(catalog, render.console())


# --- fit ----------------------------------------------------------------------------------------


@app.command()
def fit(
    model: Optional[str] = typer.Argument(
        None,
        metavar="[MODEL]",
        help=MODEL_HELP + " Optional with --from-log (the log's model) or after '--' (the engine command's model).",
    ),
    gpu: Optional[str] = typer.Option(
        None,
        "--gpu",
        "-g",
        help="Catalog GPU (h100, h200, a100-sxm-40gb, l4, mi300x, ...; 'kvplan gpus') or the CUDA-visible total as a "
        "size: 80GB, 79.2GiB (torch.cuda.mem_get_info()[1], less than nvidia-smi's total); required without "
        "--from-log.",
    ),
    from_log: Optional[str] = typer.Option(
        None,
        "--from-log",
        help="An engine's start-up log (vLLM, SGLang, TensorRT-LLM, llama.cpp): reproduce its figures and plan the "
        "other flags as what-ifs on its KV budget (docs/from-log.md).",
    ),
    tp: Optional[int] = typer.Option(None, "--tp", help="tensor_parallel_size (default 1)."),
    pp: Optional[int] = typer.Option(
        None, "--pp", help="pipeline_parallel_size (layers split into stages; default 1)."
    ),
    max_model_len: Optional[str] = typer.Option(
        None, "--max-model-len", help="Tokens per request (default: the model's max context). 32k = 32768."
    ),
    kv_dtype: Optional[str] = typer.Option(None, "--kv-dtype", help="KV dtype (default auto = model dtype)."),
    weights_dtype: Optional[str] = typer.Option(
        None,
        "--weights-dtype",
        help="bf16, fp16, fp8, int8, int4 (AWQ/GPTQ g128), mxfp4, nvfp4 (default: model dtype).",
    ),
    gpu_memory_utilization: Optional[float] = typer.Option(
        None,
        "--gpu-memory-utilization",
        help="Memory fraction (vLLM 0.92; SGLang mem_fraction_static: its default per GPU and settings, 0.83 on one "
        "H100; TRT-LLM free fraction 0.9).",
    ),
    block_size: Optional[int] = typer.Option(None, "--block-size", help="Tokens per KV block (engine default)."),
    max_num_batched_tokens: Optional[int] = typer.Option(
        None, "--max-num-batched-tokens", help="Tokens per forward step (engine default 8192; llama.cpp n_ubatch 512)."
    ),
    max_batch_size: Optional[int] = typer.Option(
        None, "--max-batch-size", help="TRT-LLM max_batch_size (runtime buffers)."
    ),
    engine: Optional[str] = typer.Option(
        None, "--engine", "-e", help="Convention: vllm (default), sglang, trtllm, llamacpp; with --from-log the log's."
    ),
    activation_gib: Optional[str] = typer.Option(
        None, "--activation-gib", help="Activation peak per GPU (GiB, or a size with unit)."
    ),
    overhead_gib: Optional[str] = typer.Option(
        None, "--overhead-gib", help="Non-torch memory per GPU (GiB, or a size with unit)."
    ),
    weights_gib: Optional[str] = typer.Option(
        None, "--weights-gib", help="Weights per GPU (GiB, or a size with unit), instead of param_count."
    ),
    kv_cache_memory: Optional[str] = typer.Option(
        None,
        "--kv-cache-memory",
        help="KV budget per GPU, bypassing the memory model (bytes, or 16GiB ...), as vLLM's --kv-cache-memory-bytes.",
    ),
    shared_prefix: str = typer.Option(
        "0",
        "--shared-prefix",
        help="Prompt tokens shared by every request, cached once per replica (full/MLA layers); 2k = 2048.",
    ),
    swa_full: bool = _LO()["swa_full"],
    ctx_size: Optional[str] = _LO()["ctx_size"],
    n_parallel: Optional[int] = _LO()["n_parallel"],
    kv_unified: Optional[bool] = _LO()["kv_unified"],
    cache_type_k: Optional[str] = _LO()["cache_type_k"],
    cache_type_v: Optional[str] = _LO()["cache_type_v"],
    flash_attn: Optional[str] = _LO()["flash_attn"],
    n_batch: Optional[int] = _LO()["n_batch"],
    llama_tool: Optional[str] = _LO()["llama_tool"],
    engine_version: Optional[str] = typer.Option(
        None,
        "--engine-version",
        help="Engine rules of this version: vLLM 0.33 (default), 0.11, 0.6 (older logs); TensorRT-LLM 1.0 (1.0-1.1); "
        "SGLang 0.5.23; llama.cpp one set (any build). The newest set not newer applies; older than the oldest: "
        "the oldest, with a warning.",
    ),
    max_num_seqs: Optional[int] = typer.Option(
        None,
        "--max-num-seqs",
        help="vLLM max_num_seqs: cap on running requests (default per GPU: 1024 on ≥ 70 GiB, 256 below and on A100); "
        "TRT-LLM: default max_batch_size; SGLang max_running_requests (default from its pools).",
    ),
    async_scheduling: Optional[bool] = typer.Option(
        None,
        "--async-scheduling/--no-async-scheduling",
        help="vLLM async scheduling (default on in 0.33): 2 batches in flight held by sliding/chunked layers.",
    ),
    enable_prefix_caching: Optional[bool] = typer.Option(
        None,
        "--enable-prefix-caching/--no-enable-prefix-caching",
        help="vLLM prefix caching (default on; hybrids then keep 2 Mamba pages per layer).",
    ),
    hybrid_kv_cache_manager: Optional[bool] = typer.Option(
        None,
        "--enable-hybrid-kv-cache-manager/--disable-hybrid-kv-cache-manager",
        help=(
            "vLLM hybrid KV cache manager (default on; off for chunked attention with EAGLE/MTP): "
            "off caches local layers as full."
        ),
    ),
    vllm_sampler: Optional[str] = typer.Option(
        None,
        "--vllm-sampler",
        help="The sampler vLLM's profile run uses: flashinfer (its log says 'Using FlashInfer for top-p & top-k "
        "sampling'), pytorch or triton (default: the version's).",
    ),
    pp_layer_partition: Optional[str] = typer.Option(
        None, "--pp-layer-partition", help="Layers per PP stage, e.g. 41,39 (vLLM VLLM_PP_LAYER_PARTITION)."
    ),
    num_speculative_tokens: int = typer.Option(
        0, "--num-speculative-tokens", help="vLLM speculative decoding: draft tokens per step (Mamba states grow)."
    ),
    speculative_model: Optional[str] = typer.Option(
        None, "--speculative-model", help="vLLM: draft model or EAGLE head (a model ref): its KV joins the pool."
    ),
    num_mtp_layers: int = typer.Option(
        0, "--num-mtp-layers", help="vLLM: MTP modules (DeepSeek-V3: 1), each a layer like the target's last one."
    ),
    data_parallel_size: int = typer.Option(1, "--data-parallel-size", help=DP_HELP),
    enable_expert_parallel: bool = typer.Option(False, "--enable-expert-parallel", help=EP_HELP),
    ep_size: Optional[int] = typer.Option(None, "--ep-size", help=EP_SIZE_HELP),
    enable_dp_attention: bool = typer.Option(False, "--enable-dp-attention", help=DPA_HELP),
    enforce_eager: bool = typer.Option(
        False, "--enforce-eager", help="vLLM --enforce-eager: no CUDA graphs (none estimated or taken from the budget)."
    ),
    concurrency: Optional[int] = typer.Option(
        None, "--concurrency", help="Speed: requests decoding together in one group (default: the most that fit)."
    ),
    context: Optional[str] = typer.Option(
        None, "--context", help="Speed bound: tokens cached per request while decoding (default: max_model_len)."
    ),
    prompt_len: Optional[str] = typer.Option(
        None, "--prompt-len", help="TTFT bound: prompt tokens (default: --context)."
    ),
    mbu: Optional[float] = typer.Option(
        None, "--mbu", help="The estimate's fraction of peak memory bandwidth (default: calibrated; the limit is 1)."
    ),
    mfu: Optional[float] = typer.Option(
        None, "--mfu", help="The estimate's fraction of peak FLOP/s (default: calibrated; the limit is 1)."
    ),
    swa_full_tokens_ratio: Optional[float] = _opt_swa_ratio(),
    mamba_full_memory_ratio: Optional[float] = _opt_mamba_ratio(),
    max_mamba_cache_size: Optional[int] = _opt_mamba_slots(),
    disable_radix_cache: bool = _opt_radix(),
    max_total_tokens: Optional[str] = _opt_max_total_tokens(),
    mamba_ssm_dtype: Optional[str] = _opt_ssm_dtype(),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """How many requests of --max-model-len fit on one GPU of a replica, as the engine would count them, and how
    fast they decode: the physical limit and the calibrated estimate (--concurrency, --context, --prompt-len,
    --mbu, --mfu: see kvplan.perf)."""
    from kvplan import api, render
    from kvplan import fit as fitmod
    from kvplan.errors import DoesNotFit, UsageError
    from kvplan.units import parse_bytes, parse_tokens

    if from_log is not None:
        not_with = [flag for flag, v in (
            ("--kv-cache-memory", kv_cache_memory), ("--activation-gib", activation_gib),
            ("--overhead-gib", overhead_gib),
            ("--weights-gib", weights_gib), ("--speculative-model", speculative_model), ("--concurrency", concurrency),
            ("--context", context), ("--prompt-len", prompt_len), ("--mbu", mbu), ("--mfu", mfu),
        ) if v is not None]  # fmt: skip
        if shared_prefix not in ("0", 0) or num_speculative_tokens or num_mtp_layers:
            not_with.append("--shared-prefix / --num-speculative-tokens / --num-mtp-layers")
        if not_with:
            raise UsageError(
                f"{not_with[0]}: not with --from-log (the KV budget and the fixed memory come from the log); the "
                "what-ifs it takes: --max-model-len, --kv-dtype, --max-num-seqs, --tp, --gpu-memory-utilization, "
                "--max-num-batched-tokens, --block-size"
            )
        _fit_from_log(
            from_log, model, gpu, json_out, engine, tp=tp, pp=pp,
            max_model_len=None if max_model_len is None else parse_tokens(max_model_len, "--max-model-len"),
            kv_dtype=kv_dtype, max_num_seqs=max_num_seqs, gpu_memory_utilization=gpu_memory_utilization,
            max_num_batched_tokens=max_num_batched_tokens, block_size=block_size, engine_version=engine_version,
            weights_dtype=weights_dtype,
        )  # fmt: skip
        return
    if model is None:
        raise UsageError("MODEL: missing; give a model (see 'kvplan models'), or an engine's log with --from-log FILE")
    if gpu is None:
        raise UsageError("--gpu: missing; give a catalog GPU (h100, l4, ...) or a size (80GiB), or --from-log FILE")
    engine = "vllm" if engine is None else engine
    tp = 1 if tp is None else tp
    pp = 1 if pp is None else pp
    kv_dtype = "auto" if kv_dtype is None else kv_dtype
    spec = _load_model(model)
    opts = api.fit_options(
        engine=engine, tp=tp, pp=pp, max_model_len=max_model_len, kv_dtype=kv_dtype, weights_dtype=weights_dtype,
        gpu_memory_utilization=gpu_memory_utilization, block_size=block_size,
        max_num_batched_tokens=max_num_batched_tokens, max_batch_size=max_batch_size,
        activation_bytes=_gib(activation_gib, "--activation-gib"), overhead_bytes=_gib(overhead_gib, "--overhead-gib"),
        weights_bytes=_gib(weights_gib, "--weights-gib"),
        kv_cache_memory_bytes=None if kv_cache_memory is None else parse_bytes(kv_cache_memory, "--kv-cache-memory"),
        shared_prefix=parse_tokens(shared_prefix, "--shared-prefix", allow_zero=True), swa_full=swa_full,
        engine_version=engine_version, max_num_seqs=max_num_seqs, async_scheduling=async_scheduling,
        enable_prefix_caching=enable_prefix_caching, hybrid_kv_cache_manager=hybrid_kv_cache_manager,
        vllm_sampler=vllm_sampler, pp_layer_partition=pp_layer_partition, num_speculative_tokens=num_speculative_tokens,
        speculative_model=None if speculative_model is None else _load_model(speculative_model),
        num_mtp_layers=num_mtp_layers, dp=data_parallel_size, enable_expert_parallel=enable_expert_parallel,
        ep_size=ep_size,
        enforce_eager=enforce_eager,
        **_llama_settings(
            ctx_size, n_parallel, kv_unified, cache_type_k, cache_type_v, flash_attn, n_batch, llama_tool
        ),
        **_sglang_settings(swa_full_tokens_ratio, mamba_full_memory_ratio, max_mamba_cache_size, disable_radix_cache,
                           max_total_tokens, mamba_ssm_dtype),
    )  # fmt: skip
    _check_pasted(spec, [opts.tensor_parallel_size])
    g, gpu_notes = _get_gpu(gpu)
    old = fitmod.engine_version_warning(opts.engine, engine_version)
    if old:
        render.warn(old)
    try:
        result = fitmod.require_fit(spec, g, opts)
    except DoesNotFit as e:
        if json_out:
            render.print_json(
                render.fit_json(e.result, reason=e.reason, suggestions=e.suggestions, gpu_notes=gpu_notes)
            )
        raise
    for note in (*result.load_notes, *result.engine_warnings):
        render.warn(note)
    if result.max_model_len > spec.max_model_len:
        render.warn(
            f"--max-model-len {result.max_model_len:,} is beyond {spec.name}'s max context of "
            f"{spec.max_model_len:,} tokens (computed anyway)"
        )
    asked = any(x is not None for x in (concurrency, context, prompt_len, mbu, mfu))
    speed = None
    if asked or json_out:  # the table shows the speed bound only when asked; JSON always carries its keys
        from kvplan import perf

        speed, notes = perf.fit_speed(
            spec, g, result, opts, concurrency, None if context is None else parse_tokens(context, "--context"),
            None if prompt_len is None else parse_tokens(prompt_len, "--prompt-len"), mbu, mfu,
        )  # fmt: skip
        for note in notes:
            render.warn(note)
    shown = speed if asked else None
    if json_out:
        render.print_json(render.fit_json(result, speed, gpu_notes=gpu_notes))
    else:
        exact = None
        if result.pipeline_parallel_size == 1 and not result.drafter_layers:  # the same layers as estimate's
            from kvplan import calc

            exact = calc.estimate(spec, result.max_model_len, 1, result.kv_dtype, None, tp).bytes_per_request
        windowed = any(layer.kind in ("sliding", "chunked") or layer.state is not None for layer in spec.layers)
        render.fit_table(result, render.console(), shown, exact, windowed)


def _fit_from_log(path: str, model: str | None, gpu: str | None, json_out: bool, engine: str | None, **given) -> None:
    """``kvplan fit [MODEL] --from-log FILE``: read the log, reproduce its figures, plan the what-ifs."""
    from kvplan import fromlog, render

    spec = None if model is None else _load_model(model)
    text = fromlog.read_log_file(path)
    rep = fromlog.reproduce(text, model=spec, given=given, source=path, gpu=gpu, engine=engine)
    if spec is None:  # the log's model, resolved as MODEL is: its warnings as _load_model prints them
        for note in rep.spec.warnings:
            render.warn(note)
    if json_out:
        render.print_json(render.from_log_json(rep))
    else:
        render.from_log_table(rep, render.console())
    if rep.what_if is not None and not rep.what_if.fits:  # as fit: nothing fits is exit 1, after the answer
        from kvplan.errors import DoesNotFit
        from kvplan.fit import does_not_fit_reason

        flags = ", ".join(f"{fromlog.FLAG_NAMES.get(k, k)} {new}" for k, _, new in rep.what_if_changes)
        gone = [n for n in rep.what_if_notes if n.startswith("the KV budget would be")]
        raise DoesNotFit(f"what if {flags}: {gone[0] if gone else does_not_fit_reason(rep.spec, rep.what_if)}")


# --- fleet --------------------------------------------------------------------------------------


@app.command()
def fleet(
    model: str = typer.Argument(..., metavar="MODEL", help=MODEL_HELP),
    workload: Optional[str] = typer.Option(
        None, "--workload", "-w", help="Workload YAML: request classes with concurrency and tokens."
    ),
    concurrency: Optional[int] = typer.Option(
        None, "--concurrency", help="Requests in flight across the fleet (one class; with --seq)."
    ),
    seq: Optional[str] = typer.Option(None, "--seq", "-s", help="Tokens per request for --concurrency (32k = 32768)."),
    gpu: List[str] = typer.Option(
        [],
        "--gpu",
        "-g",
        help="Candidate GPU (repeat); default: every catalog GPU that holds the model at some TP <= 8.",
    ),
    tp: List[int] = typer.Option([], "--tp", help="Candidate TP (repeat); default: every TP <= 8 the heads allow."),
    pp: List[int] = typer.Option([], "--pp", help="Candidate PP (repeat); default: 1, 2 and 4."),
    data_parallel_size: int = typer.Option(
        1, "--data-parallel-size", help=DP_HELP + " Default: searched for MoE models (with expert parallelism)."
    ),
    enable_expert_parallel: bool = typer.Option(False, "--enable-expert-parallel", help=EP_HELP),
    ep_size: Optional[int] = typer.Option(None, "--ep-size", help=EP_SIZE_HELP),
    enable_dp_attention: bool = typer.Option(False, "--enable-dp-attention", help=DPA_HELP),
    pp_layer_partition: Optional[str] = typer.Option(
        None, "--pp-layer-partition", help="Layers per PP stage, e.g. 41,39 (vLLM VLLM_PP_LAYER_PARTITION)."
    ),
    engine: str = typer.Option("vllm", "--engine", "-e", help="Convention: vllm, sglang, trtllm, llamacpp."),
    engine_version: Optional[str] = typer.Option(
        None, "--engine-version", help="Engine rules of this version (as kvplan fit --engine-version)."
    ),
    max_num_seqs: Optional[int] = typer.Option(
        None, "--max-num-seqs", help="Cap on running requests per replica (vLLM max_num_seqs; TRT-LLM max_batch_size)."
    ),
    kv_dtype: Optional[str] = typer.Option(None, "--kv-dtype", help="KV dtype (default auto = model dtype)."),
    weights_dtype: Optional[str] = typer.Option(None, "--weights-dtype", help="Weights dtype (default: model dtype)."),
    weights_gib: Optional[str] = typer.Option(
        None, "--weights-gib", help="Weights per GPU (GiB, or a size with unit), instead of param_count; one --tp."
    ),
    kv_cache_memory: Optional[str] = typer.Option(
        None, "--kv-cache-memory", help="KV budget per GPU, bypassing the budget model (bytes, or 16GiB ...), exact."
    ),
    gpu_memory_utilization: Optional[float] = typer.Option(
        None, "--gpu-memory-utilization", help="Memory fraction (engine default)."
    ),
    max_num_batched_tokens: Optional[int] = typer.Option(
        None, "--max-num-batched-tokens", help="Tokens per forward step (engine default; llama.cpp n_ubatch 512)."
    ),
    max_model_len: Optional[str] = typer.Option(
        None,
        "--max-model-len",
        help="The engine's max_model_len (vLLM --max-model-len, SGLang --context-length, TRT-LLM --max_seq_len): "
        "planned as fit plans it; a longer class is refused. Default: the longest class. With --concurrency and no "
        "--seq: the requests' length too.",
    ),
    swa_full: bool = _LO()["swa_full"],
    ctx_size: Optional[str] = _LO()["ctx_size"],
    n_parallel: Optional[int] = _LO()["n_parallel"],
    kv_unified: Optional[bool] = _LO()["kv_unified"],
    cache_type_k: Optional[str] = _LO()["cache_type_k"],
    cache_type_v: Optional[str] = _LO()["cache_type_v"],
    flash_attn: Optional[str] = _LO()["flash_attn"],
    n_batch: Optional[int] = _LO()["n_batch"],
    llama_tool: Optional[str] = _LO()["llama_tool"],
    price: List[str] = typer.Option(
        [], "--price", help="GPU=USD_PER_HOUR per GPU (repeat, or a comma list), e.g. h100=2.49,h200=3.5."
    ),
    sort: str = typer.Option("gpus", "--sort", help="gpus or cost."),
    show_all: bool = typer.Option(
        False, "--all", help="List every layout that fits, not only the best layout per GPU."
    ),
    tpot_ms: Optional[float] = typer.Option(
        None, "--tpot-ms", help="SLO: time per output token (ms) of classes without tpot_ms; replicas keep only "
        "the requests whose estimated step meets it."
    ),
    ttft_ms: Optional[float] = typer.Option(
        None, "--ttft-ms", help="SLO: time to first token (ms) of classes without ttft_ms (each prompt alone)."
    ),
    disaggregated: bool = typer.Option(
        False, "--disaggregated", help="Plan prefill and decode on separate pools, with the KV transfer between them."
    ),
    kv_link_gbs: float = typer.Option(
        50.0,
        "--kv-link-gbs",
        help="--disaggregated: KV transfer bandwidth per GPU between the pools, GB/s (50 = 400 Gb/s).",
    ),
    prompt_len: Optional[str] = typer.Option(
        None, "--prompt-len", help="Prompt tokens of classes without prompt_tokens/output_tokens (default: all tokens)."
    ),
    mbu: Optional[float] = typer.Option(
        None, "--mbu", help="The estimate's fraction of peak bandwidth (default: calibrated)."
    ),
    mfu: Optional[float] = typer.Option(
        None, "--mfu", help="The estimate's fraction of peak FLOP/s (default: calibrated)."
    ),
    swa_full_tokens_ratio: Optional[float] = _opt_swa_ratio(),
    mamba_full_memory_ratio: Optional[float] = _opt_mamba_ratio(),
    max_mamba_cache_size: Optional[int] = _opt_mamba_slots(),
    disable_radix_cache: bool = _opt_radix(),
    max_total_tokens: Optional[str] = _opt_max_total_tokens(),
    mamba_ssm_dtype: Optional[str] = _opt_ssm_dtype(),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
    csv_out: bool = typer.Option(False, "--csv", help="Print CSV."),
) -> None:
    """Replicas and GPUs a workload needs, per GPU type and parallel layout (TP × PP, and expert / attention data
    parallelism for MoE models), ranked by GPUs or cost; with latency targets (--tpot-ms / --ttft-ms, or per
    class in the workload), by the tighter of memory and the targets under the speed estimate (kvplan.perf).
    --disaggregated: prefill and decode pools apart."""
    from kvplan import api, render
    from kvplan import fleet as fleetmod
    from kvplan.errors import UsageError
    from kvplan.gpus import get_gpu, load_catalog

    if json_out and csv_out:
        raise UsageError("--json and --csv: give one of them")
    spec = _load_model(model)
    if max_model_len is not None and seq is None and workload is None and concurrency is not None:
        seq, max_model_len = max_model_len, None  # requests of the engine's max_model_len: its context flag as --seq
    if workload is not None and (concurrency is not None or seq is not None):
        raise UsageError("--workload: give either --workload FILE or --concurrency N --seq S, not both")
    if workload is not None:
        wl = fleetmod.load_workload(workload)
    elif concurrency is not None and seq is not None:
        wl = fleetmod.workload_from_data(
            {"name": "single", "classes": [{"name": "requests", "concurrency": concurrency, "tokens": seq}]},
            "--concurrency/--seq",
        )
    else:
        raise UsageError("--workload: give --workload FILE, or --concurrency N with --seq S")
    if weights_gib is not None and len(tp) != 1:
        raise UsageError("--weights-gib: weights per GPU depend on TP, so give one --tp with it (each TP its own run)")
    if weights_gib is not None and len(pp) > 1:
        raise UsageError("--weights-gib: weights per GPU depend on PP, so give one --pp with it (each PP its own run)")
    if weights_gib is not None and not pp:
        pp = [1]  # the weights given are those of one layout: no PP search
    if pp_layer_partition is not None and len(pp) != 1:
        raise UsageError("--pp-layer-partition: give one --pp with it (the partition has one count per stage)")
    from kvplan.units import parse_bytes

    opts = api.fit_options(
        engine=engine, pp=pp[0] if pp else 1, weights_bytes=_gib(weights_gib, "--weights-gib"), kv_dtype=kv_dtype,
        weights_dtype=weights_dtype, gpu_memory_utilization=gpu_memory_utilization, engine_version=engine_version,
        max_num_seqs=max_num_seqs, pp_layer_partition=pp_layer_partition, dp=data_parallel_size,
        enable_expert_parallel=enable_expert_parallel, ep_size=ep_size,
        kv_cache_memory_bytes=None if kv_cache_memory is None else parse_bytes(kv_cache_memory, "--kv-cache-memory"),
        max_num_batched_tokens=max_num_batched_tokens, swa_full=swa_full, max_model_len=max_model_len,
        **_llama_settings(
            ctx_size, n_parallel, kv_unified, cache_type_k, cache_type_v, flash_attn, n_batch, llama_tool
        ),
        **_sglang_settings(swa_full_tokens_ratio, mamba_full_memory_ratio, max_mamba_cache_size, disable_radix_cache,
                           max_total_tokens, mamba_ssm_dtype),
    )  # fmt: skip
    _check_pasted(spec, tp or [1])
    resolved = [_get_gpu(g) for g in gpu]
    gpu_notes = tuple(n for _, notes in resolved for n in notes)
    gpus = [g for g, _ in resolved] if gpu else load_catalog()
    prices = fleetmod.parse_prices(price, get_gpu, gpus if gpu else None)
    from kvplan.fit import engine_version_warning

    old = engine_version_warning(opts.engine, engine_version)
    if old:
        render.warn(old)
    from kvplan.perf import check_fraction
    from kvplan.units import parse_tokens

    slo = fleetmod.SLO(
        fleetmod.check_ms("--tpot-ms", tpot_ms), fleetmod.check_ms("--ttft-ms", ttft_ms),
        None if prompt_len is None else parse_tokens(prompt_len, "--prompt-len"),
        check_fraction("--mbu", mbu), check_fraction("--mfu", mfu),
    )  # fmt: skip
    if disaggregated and csv_out:
        raise UsageError("--csv: not with --disaggregated (two pools); use --json")
    if disaggregated:
        plan = fleetmod.plan_disaggregated(spec, wl, gpus, opts, tps=tp or None, prices=prices, sort=sort, slo=slo,
                                           pps=pp or None, link_gbs=kv_link_gbs)  # fmt: skip
        if json_out:
            render.print_json(render.disaggregated_json(spec.name, wl, plan))
        else:
            render.disaggregated_table(spec.name, wl, plan, render.console())
        if not plan.gpus:
            from kvplan.errors import DoesNotFit

            raise DoesNotFit(f"no prefill and decode pools tried can serve this workload on {spec.name}")
        return
    rows = fleetmod.plan_fleet(spec, wl, gpus, opts, tps=tp or None, prices=prices, sort=sort, slo=slo, pps=pp or None)
    if opts.max_model_len is not None and opts.max_model_len > spec.max_model_len:
        render.warn(
            f"--max-model-len {opts.max_model_len:,} is beyond {spec.name}'s max context of "
            f"{spec.max_model_len:,} tokens (computed anyway)"
        )
    elif wl.max_tokens > spec.max_model_len:
        render.warn(
            f"requests of {wl.max_tokens:,} tokens are beyond {spec.name}'s max context of "
            f"{spec.max_model_len:,} tokens (computed anyway)"
        )
    if json_out:
        render.print_json(render.fleet_json(spec.name, wl, rows, gpu_notes))
    elif csv_out:
        render.print_csv([render.fleet_row_dict(r, flat=True) for r in rows])
    else:
        speed = slo.wants_speed(wl)
        render.fleet_table(spec.name, wl, rows, render.console(), show_all=show_all, sort=sort, speed=speed)
    if not any(r.fits for r in rows):
        from kvplan.errors import DoesNotFit

        where = "in the JSON's layouts" if json_out else "in the CSV's reason column" if csv_out else "above"
        raise DoesNotFit(f"no GPU and layout tried can serve this workload on {spec.name} (reasons {where})")


# --- verify --------------------------------------------------------------------------------------


@app.command()
def verify(
    model: str = typer.Argument(..., metavar="MODEL", help=MODEL_HELP),
    seq: str = typer.Option(
        "4096",
        "--seq",
        "-s",
        help="Tokens per request (the cache's S_max); 32k = 32768. With --fit: the plan's max_model_len.",
    ),
    batch: Optional[int] = typer.Option(
        None, "--batch", "-b", min=1, help="Requests (default 1; with --fit the plan decides)."
    ),
    kv_dtype: str = typer.Option(
        "auto",
        "--kv-dtype",
        help="KV dtype: auto (model dtype), fp16, bf16, fp8, q8_0, nvfp4, ... (packed ones are quantized for real).",
    ),
    device: str = typer.Option("auto", "--device", help="auto (cuda when torch sees a GPU), cuda or cpu."),
    layers: Optional[int] = typer.Option(
        None, "--layers", min=1, help="Allocate only the first N layers (the formula counts the same layers)."
    ),
    fit_plan: bool = typer.Option(
        False, "--fit", help="Allocate as many requests of --seq as 'kvplan fit' says fit on --gpu (TP 1)."
    ),
    gpu: Optional[str] = typer.Option(
        None, "--gpu", "-g", help="With --fit: catalog GPU or a size (default on cuda: this GPU's total)."
    ),
    engine: str = typer.Option("vllm", "--engine", "-e", help="With --fit: vllm, sglang, trtllm, llamacpp."),
    kv_cache_memory: Optional[str] = typer.Option(
        None,
        "--kv-cache-memory",
        help="With --fit: KV budget per GPU (bytes, or 16GiB ...), bypassing the memory model.",
    ),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> int:
    """Allocate MODEL's cache with torch, measure it against the formula, check attention on it.

    Exit 0 when the measured bytes agree with the formula within the allocator's rounding and the
    attention and decode checks pass, 1 otherwise (or when the cache would not fit: nothing is
    allocated then), 2 on bad input or when torch is missing.
    """
    from kvplan import render
    from kvplan.errors import DoesNotFit, MissingExtra, UsageError
    from kvplan.units import check_batch, parse_bytes, parse_tokens

    spec = _load_model(model)
    s = parse_tokens(seq)
    if batch is not None:
        check_batch(batch)
    if not fit_plan:
        for flag, given in (
            ("--gpu", gpu is not None),
            ("--engine", engine != "vllm"),
            ("--kv-cache-memory", kv_cache_memory is not None),
        ):
            if given:
                raise UsageError(f"{flag}: only with --fit")
    elif batch is not None:
        raise UsageError("--batch: not with --fit (the plan decides how many requests fit)")
    budget = None if kv_cache_memory is None else parse_bytes(kv_cache_memory, "--kv-cache-memory")
    try:
        import torch  # noqa: F401  (the verify extra; kvplan estimate never imports it)
    except ImportError:
        from kvplan.install import extra_hint

        raise MissingExtra(f"kvplan verify needs torch: {extra_hint('verify')}") from None
    from kvplan import verify as verifymod

    # said once: with the result (allocated anyway), or inside the error when nothing could be allocated
    beyond = (
        f"--seq {s:,} is beyond {spec.name}'s max context of {spec.max_model_len:,} tokens"
        if s > spec.max_model_len
        else None
    )
    bar, progress = render.verify_progress()
    try:
        if fit_plan:
            result = verifymod.verify_fit(
                spec,
                s,
                kv_dtype,
                device=device,
                layers=layers,
                gpu=gpu,
                engine=engine,
                kv_cache_memory_bytes=budget,
                progress=progress,
            )
        else:
            result = verifymod.verify(spec, s, batch or 1, kv_dtype, device=device, layers=layers, progress=progress)
    except DoesNotFit as e:
        if beyond is None:
            raise
        raise DoesNotFit(f"{e} ({beyond})") from None
    finally:
        if bar.live.is_started:
            bar.stop()
    if beyond is not None:
        render.warn(f"{beyond} (allocated anyway)")
    if json_out:
        render.print_json(result.to_json())
    else:
        render.verify_table(result, render.console())
    return 0 if result.ok else 1


# --- sweep ----------------------------------------------------------------------------------------


@app.command()
def sweep(
    model: List[str] = typer.Argument(
        ..., metavar="MODEL...", help="Models: bundled names, spec YAMLs or config.json files."
    ),
    seq: List[str] = typer.Option(..., "--seq", "-s", help="max_model_len values; repeat for several. 128k = 131072."),
    gpu: List[str] = typer.Option(
        ..., "--gpu", "-g", help="GPUs (catalog names or sizes like 80GiB); repeat for several."
    ),
    kv_dtype: List[str] = typer.Option(
        ["auto"], "--kv-dtype", help="KV dtypes; repeat for several (auto = model dtype)."
    ),
    tp: List[int] = typer.Option(
        [1], "--tp", help="Tensor-parallel sizes; repeat for several. Sizes a model's heads refuse are skipped."
    ),
    engine: str = typer.Option("vllm", "--engine", "-e", help="Convention: vllm, sglang, trtllm, llamacpp."),
    gpu_memory_utilization: Optional[float] = typer.Option(
        None, "--gpu-memory-utilization", help="Memory fraction (engine default)."
    ),
    block_size: Optional[int] = typer.Option(None, "--block-size", help="Tokens per KV block (engine default)."),
    max_num_batched_tokens: Optional[int] = typer.Option(
        None, "--max-num-batched-tokens", help="Tokens per forward step (engine default)."
    ),
    weights_dtype: Optional[str] = typer.Option(None, "--weights-dtype", help="Weights dtype (default: model dtype)."),
    kv_cache_memory: Optional[str] = typer.Option(
        None, "--kv-cache-memory", help="KV budget per GPU, bypassing the budget model (bytes, or 16GiB ...), exact."
    ),
    weights_gib: Optional[str] = typer.Option(
        None,
        "--weights-gib",
        help="Weights per GPU (GiB, or a size with unit), instead of param_count; one MODEL and one --tp.",
    ),
    swa_full: bool = _LO()["swa_full"],
    ctx_size: Optional[str] = _LO()["ctx_size"],
    n_parallel: Optional[int] = _LO()["n_parallel"],
    kv_unified: Optional[bool] = _LO()["kv_unified"],
    cache_type_k: Optional[str] = _LO()["cache_type_k"],
    cache_type_v: Optional[str] = _LO()["cache_type_v"],
    flash_attn: Optional[str] = _LO()["flash_attn"],
    n_batch: Optional[int] = _LO()["n_batch"],
    llama_tool: Optional[str] = _LO()["llama_tool"],
    max_num_seqs: Optional[int] = typer.Option(
        None, "--max-num-seqs", help="Cap on running requests (vLLM max_num_seqs; SGLang max_running_requests)."
    ),
    swa_full_tokens_ratio: Optional[float] = _opt_swa_ratio(),
    mamba_full_memory_ratio: Optional[float] = _opt_mamba_ratio(),
    max_mamba_cache_size: Optional[int] = _opt_mamba_slots(),
    disable_radix_cache: bool = _opt_radix(),
    max_total_tokens: Optional[str] = _opt_max_total_tokens(),
    mamba_ssm_dtype: Optional[str] = _opt_ssm_dtype(),
    all_rows: bool = typer.Option(False, "--all", help="Table: print every row (default: the first 200)."),
    csv_out: bool = typer.Option(False, "--csv", help="Print every row as CSV."),
    json_out: bool = typer.Option(False, "--json", help="Print every row as a JSON list of objects."),
) -> None:
    """'kvplan fit' for every MODEL × --seq × --gpu × --kv-dtype × --tp, computed at once (numpy).

    At most 1,200,000 configurations per run (--all: 100,000 table rows), GPUs up to 8 TiB.
    """
    from kvplan import api, render
    from kvplan import sweep as sweepmod
    from kvplan.errors import UsageError
    from kvplan.units import parse_tokens, plural

    if csv_out and json_out:
        raise UsageError("--csv, --json: choose one output format")
    if weights_gib is not None and (len(model) != 1 or len(tp) != 1):
        raise UsageError(
            "--weights-gib: one model's weights per GPU at one TP, so give one MODEL and one --tp with it "
            f"(got {plural(len(model), 'model')}, {plural(len(tp), 'TP')})"
        )
    from kvplan.units import parse_bytes

    opts = api.fit_options(
        engine=engine, gpu_memory_utilization=gpu_memory_utilization, block_size=block_size,
        max_num_batched_tokens=max_num_batched_tokens, weights_dtype=weights_dtype,
        weights_bytes=_gib(weights_gib, "--weights-gib"), max_num_seqs=max_num_seqs, swa_full=swa_full,
        kv_cache_memory_bytes=None if kv_cache_memory is None else parse_bytes(kv_cache_memory, "--kv-cache-memory"),
        **_llama_settings(
            ctx_size, n_parallel, kv_unified, cache_type_k, cache_type_v, flash_attn, n_batch, llama_tool
        ),
        **_sglang_settings(swa_full_tokens_ratio, mamba_full_memory_ratio, max_mamba_cache_size, disable_radix_cache,
                           max_total_tokens, mamba_ssm_dtype),
    )  # fmt: skip
    specs = [_load_model(m) for m in model]
    seqs = [parse_tokens(s) for s in seq]
    gpus_ = [_get_gpu(g)[0] for g in gpu]
    result = sweepmod.sweep(specs, seqs, gpus_, kv_dtype, tp, opts)
    if result.skipped_rows:
        render.warn(sweepmod.skipped_message(result))
    if result.beyond_max_context_rows:
        render.warn(
            f"{plural(result.beyond_max_context_rows, 'row has', 'rows have')} --seq beyond the model's max context "
            "(computed anyway)"
        )
    if csv_out or json_out:
        (render.sweep_csv if csv_out else render.sweep_json)(result.iter_rows())
        return
    if all_rows and result.num_rows > sweepmod.MAX_TABLE_ROWS:
        raise UsageError(
            f"--all: {result.num_rows:,} rows; a table prints at most {sweepmod.MAX_TABLE_ROWS:,} (rich takes about "
            "30 s per million): give --csv or --json for every row, or split the sweep into runs of fewer rows"
        )
    limit = None if all_rows else render.SWEEP_TABLE_ROWS
    rows = result.rows(limit, sweepmod.TABLE_COLUMNS)
    render.sweep_table(
        rows, result.num_rows, result.engine, result.block_size, render.console(), result.columns.get("block_size")
    )
    if len(rows) < result.num_rows:
        render.warn(
            f"showing the first {len(rows):,} of {result.num_rows:,} rows; "
            "--all for every row, --csv or --json for data"
        )


# --- plot -----------------------------------------------------------------------------------------


@app.command()
def plot(
    model: List[str] = typer.Argument(
        ..., metavar="MODEL...", help="Models to draw; with --gpu one panel each, with its own KV budget per GPU."
    ),
    max_seq: str = typer.Option(
        "128k", "--max-seq", help="Longest context on the x axis (starts at 512 tokens): 513 to 1024m. 128k = 131072."
    ),
    gpu: List[str] = typer.Option(
        [], "--gpu", "-g", help="Draw each model's KV budget on this GPU (as 'kvplan fit'); repeat for several."
    ),
    topologies: bool = typer.Option(False, "--topologies", help="Also draw the first model as MHA and MQA (dashed)."),
    kv_dtype: str = typer.Option("auto", "--kv-dtype", help="KV dtype (auto = each model's dtype)."),
    tp: Optional[int] = typer.Option(
        None,
        "--tp",
        help="tensor_parallel_size of the budgets; curves are bytes per GPU (default: per model, the smallest TP "
        "with KV memory on each --gpu; 1 without --gpu).",
    ),
    engine: str = typer.Option("vllm", "--engine", "-e", help="Convention: vllm, sglang, trtllm, llamacpp."),
    weights_dtype: Optional[str] = typer.Option(
        None, "--weights-dtype", help="bf16, fp16, fp8, int8, int4, mxfp4, nvfp4 (default: each model's)."
    ),
    out: str = typer.Option("kvplan-plot.png", "--out", "-o", help="Output file, .png or .svg."),
    force: bool = typer.Option(False, "--force", help="Overwrite --out if it exists."),
    throughput: bool = typer.Option(
        False, "--throughput", help="Draw the decode tokens/s bound against concurrency instead (first model, --gpu)."
    ),
    context: str = typer.Option("4k", "--context", help="With --throughput: tokens cached per request."),
    mbu: Optional[float] = typer.Option(
        None,
        "--mbu",
        help="With --throughput: the estimate's fraction of peak memory bandwidth (default: calibrated per engine "
        "and GPU class; the limit line is 1).",
    ),
    mfu: Optional[float] = typer.Option(
        None,
        "--mfu",
        help="With --throughput: the estimate's fraction of peak FLOP/s (default: calibrated per engine and GPU "
        "class; the limit line is 1).",
    ),
) -> None:
    """Draw KV cache per request against context length (log2 axis), with each model's KV budget per GPU; with
    --throughput, the decode tokens/s bound against concurrency with the memory wall marked; needs kvplan[plot]."""
    from kvplan import plot as plotmod
    from kvplan import render
    from kvplan.units import parse_tokens, printable

    path = plotmod.check_out(out, force)
    specs = [_load_model(m) for m in model]
    gpus_ = [_get_gpu(g)[0] for g in gpu]
    if throughput:
        written, tdata = plotmod.plot_throughput(
            specs[0], gpus_, parse_tokens(context, "--context"), path, force, kv_dtype=kv_dtype,
            tensor_parallel_size=1 if tp is None else tp, engine=engine, weights_dtype=weights_dtype, mbu=mbu, mfu=mfu,
        )  # fmt: skip
        for note in tdata.notes:
            render.warn(note)
        typer.echo(f"wrote {printable(written)}")
        return
    written, data = plotmod.plot_kv_vs_context(
        specs, gpus_, parse_tokens(max_seq, "--max-seq"), kv_dtype, topologies, path, force,
        tensor_parallel_size=tp, engine=engine, weights_dtype=weights_dtype,
    )  # fmt: skip
    for note in data.notes:
        render.warn(note)
    typer.echo(f"wrote {printable(written)}")


# --- entry point ---------------------------------------------------------------------------------


def _one_line(message: str) -> str:
    """Control characters (a newline in a path or a spec name) escaped: an error is always one line."""
    line = "".join(c if c.isprintable() else repr(c)[1:-1] for c in message)
    return line if len(line) <= 2000 else f"{line[:2000]}… (message cut at 2,000 characters)"


def _click_errors() -> tuple[type, type]:
    """(UsageError, ClickException) of the click that typer runs on (vendored in typer >= 0.20)."""
    mro = {c.__name__: c for c in typer.BadParameter.__mro__}
    return mro["UsageError"], mro["ClickException"]


def _plain_metavars(command):
    """``command`` with its arguments shown as click shows them (``MODEL``), not typer 0.28's ``{MODEL}``
    (typer wraps a required argument's metavar in braces in the usage line)."""
    for cmd in [command, *getattr(command, "commands", {}).values()]:
        for param in cmd.params:
            if getattr(param, "param_type_name", "") == "argument" and param.metavar:
                param.make_metavar = lambda ctx=None, usage=False, p=param: p.metavar
    return command


def _command_for(argv: list[str]):
    """The click command to run: only the subcommand ``argv`` names (building all of them costs start-up
    time that grows with every command), or the whole app for --help, --version and unknown names."""
    name = argv[0] if argv else None
    for info in app.registered_commands:
        cmd_name = info.name or (info.callback.__name__.replace("_", "-") if info.callback else None)
        if name is not None and cmd_name == name:
            single = typer.Typer(add_completion=False, rich_markup_mode=None, pretty_exceptions_enable=False)
            single.info = app.info
            single.registered_callback = app.registered_callback
            single.registered_commands = [info]
            return _plain_metavars(typer.main.get_command(single))
    return _plain_metavars(typer.main.get_command(app))


def _drop_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's exit flush does not fail again on unwritable output."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # pragma: no cover - stdout without a file descriptor
        pass


_PASTED: list = [None]  # the engine command of this run (kvplan.cmdline.Pasted), checked once its model loads


def _check_pasted(spec, tps) -> None:
    """The pasted command's checks that need the model (experts over GPUs, llama.cpp -ngl ...), for each TP."""
    from kvplan import render

    pasted = _PASTED[0]
    notes: list[str] = []
    for check in pasted.checks if pasted is not None else ():
        for tp in tps:
            note = check(spec, tp)
            if note and note not in notes:
                notes.append(note)
    for note in notes:
        render.note(note)


def run(argv: Optional[List[str]] = None) -> int:
    """Run the CLI on ``argv``; return the exit code. Errors print one line on stderr, never a traceback."""
    usage_error, click_exception = _click_errors()
    argv = list(sys.argv[1:] if argv is None else argv)
    command = _command_for(argv)
    try:
        from kvplan.aliases import rewrite  # engine spellings (--tensor-parallel-size ...) and comma lists

        if "--" in argv:  # kvplan fit [flags] -- vllm serve MODEL ...: the engine's command line, whole
            from kvplan.cmdline import ignored_note, paste

            argv, _PASTED[0] = paste(argv, command)
            if _PASTED[0] is not None:
                from kvplan import render

                for line in (ignored_note(_PASTED[0]), *_PASTED[0].notes):
                    if line:
                        render.note(line)
        every = lambda: typer.main.get_command(app)  # noqa: E731 - built only to word an error
        rv = command.main(args=rewrite(argv, command, every), prog_name="kvplan", standalone_mode=False)
        sys.stdout.flush()  # a full disk / closed stdout fails here, not at interpreter exit
    except KvplanError as e:
        sys.stderr.write(f"kvplan: error: {_one_line(str(e))}\n")
        return e.exit_code
    except usage_error as e:
        if type(e).__name__ == "NoArgsIsHelpError":  # a bare `kvplan`: usage on stderr, exit 2 (not a success)
            sys.stderr.write(e.ctx.get_help() + "\n")
            return 2
        name = getattr(e.ctx, "info_name", None)
        where = f"kvplan {name}" if name and name != "kvplan" else "kvplan"
        sys.stderr.write(f"{where}: error: {_one_line(e.format_message())}\n")
        return 2
    except typer.Abort:
        sys.stderr.write("kvplan: aborted\n")
        return 130
    except click_exception as e:
        sys.stderr.write(f"kvplan: error: {e.format_message()}\n")
        return e.exit_code
    except BrokenPipeError:
        _drop_stdout()
        return 0
    except OSError as e:  # writing the output failed (ENOSPC on /dev/full, EIO ...): one line, exit 2
        try:
            sys.stdout.flush()
        except OSError:
            _drop_stdout()
        what = f"cannot write {e.filename}" if e.filename else "cannot write the output"
        sys.stderr.write(f"kvplan: error: {what}: {_one_line(e.strerror or str(e))}\n")
        return 2
    finally:
        _PASTED[0] = None
    return rv if isinstance(rv, int) else 0


def main() -> None:
    """Console-script entry point."""
    sys.exit(run(sys.argv[1:]))
