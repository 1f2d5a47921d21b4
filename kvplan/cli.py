"""The ``kvplan`` command line: parse flags, call the core, hand results to :mod:`kvplan.render`.

No arithmetic here. Errors from the core (:class:`kvplan.errors.KvplanError`) and from flag parsing
become one line on stderr: exit 2 for bad input, 1 for a plan that does not fit.
"""

from __future__ import annotations

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

MODEL_HELP = "Bundled model name (see 'kvplan models'), a spec YAML, or a Hugging Face config.json (or its folder)."


def _version(value: bool) -> None:
    if value:
        typer.echo(f"kvplan {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    """Exact KV-cache memory planning for LLM serving."""


# --- estimate -----------------------------------------------------------------------------------


@app.command()
def estimate(
    model: str = typer.Argument(..., help=MODEL_HELP),
    seq: List[str] = typer.Option(..., "--seq", "-s", help="Tokens per request; repeat for several. 128k = 131072."),
    batch: int = typer.Option(1, "--batch", "-b", min=1, help="Concurrent requests."),
    kv_dtype: str = typer.Option("auto", "--kv-dtype", help="KV dtype: auto (model dtype), fp16, bf16, fp8, int8, q8_0, q4_0, nvfp4, ..."),
    block_size: Optional[int] = typer.Option(None, "--block-size", min=1, help="Round each request up to whole blocks of N tokens (paged engines)."),
    tp: int = typer.Option(1, "--tp", min=1, help="Tensor-parallel size: report bytes per GPU."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON: one object per --seq value (a list for several)."),
) -> None:
    """KV-cache bytes of MODEL for requests of --seq tokens: per layer kind, per request, per batch."""
    from kvplan import calc, render
    from kvplan.specs import load_model
    from kvplan.units import parse_tokens

    spec = load_model(model)
    seqs = [parse_tokens(s) for s in seq]
    results = [calc.estimate(spec, s, batch, kv_dtype, block_size, tp) for s in seqs]
    for r in results:
        if r.exceeds_max_model_len:
            render.warn(
                f"--seq {r.seq_len:,} is beyond {spec.name}'s max context of {spec.max_model_len:,} tokens "
                "(computed anyway: rope scaling may allow it)"
            )
    if json_out:
        objs = [render.estimate_json(r) for r in results]
        render.print_json(objs[0] if len(objs) == 1 else objs)
        return
    con = render.console()
    for r in results:
        render.estimate_table(r, con)


# --- models ---------------------------------------------------------------------------------------


@app.command()
def models(
    json_out: bool = typer.Option(False, "--json", help="Print JSON (bytes at 4096 and 131072 tokens)."),
) -> None:
    """List the bundled models with their KV geometry and bytes per token at bf16."""
    from kvplan import calc, render
    from kvplan.specs import load_all_bundled

    rows = [calc.model_summary(s) for s in load_all_bundled()]
    if json_out:
        render.print_json(rows)
    else:
        render.models_table(rows, render.console())


# --- compare -------------------------------------------------------------------------------------


@app.command()
def compare(
    model: str = typer.Argument(..., help=MODEL_HELP),
    seq: str = typer.Option(..., "--seq", "-s", help="Tokens per request (128k = 131072)."),
    batch: int = typer.Option(1, "--batch", "-b", min=1, help="Concurrent requests."),
    kv_dtype: str = typer.Option("auto", "--kv-dtype", help="KV dtype (auto = model dtype)."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """MHA vs the model vs MQA: the same geometry with H_kv = H_q, the model's H_kv, and H_kv = 1."""
    from kvplan import calc, render
    from kvplan.specs import load_model
    from kvplan.units import parse_tokens

    spec = load_model(model)
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
    model: str = typer.Argument(..., help=MODEL_HELP),
    gpu: str = typer.Option(..., "--gpu", "-g", help="Catalog GPU (h100, h200, a100-80gb, l4, mi300x, ...) or a size: 80GB, 80GiB, 81559MiB."),
    tp: int = typer.Option(1, "--tp", help="tensor_parallel_size."),
    pp: int = typer.Option(1, "--pp", help="pipeline_parallel_size (layers split into stages)."),
    max_model_len: Optional[str] = typer.Option(None, "--max-model-len", help="Tokens per request (default: the model's max context). 32k = 32768."),
    kv_dtype: str = typer.Option("auto", "--kv-dtype", help="KV dtype (auto = model dtype)."),
    weights_dtype: Optional[str] = typer.Option(None, "--weights-dtype", help="bf16, fp16, fp8, int8, int4 (AWQ/GPTQ g128), mxfp4, nvfp4 (default: model dtype)."),
    gpu_memory_utilization: Optional[float] = typer.Option(None, "--gpu-memory-utilization", help="Memory fraction (vLLM 0.9, SGLang mem_fraction_static 0.88, TRT-LLM free fraction 0.9)."),
    block_size: Optional[int] = typer.Option(None, "--block-size", help="Tokens per KV block (engine default)."),
    max_num_batched_tokens: Optional[int] = typer.Option(None, "--max-num-batched-tokens", help="Tokens per forward step (engine default 8192; llama.cpp n_ubatch 512)."),
    max_batch_size: Optional[int] = typer.Option(None, "--max-batch-size", help="TRT-LLM max_batch_size (runtime buffers)."),
    engine: str = typer.Option("vllm", "--engine", "-e", help="Convention: vllm, sglang, trtllm, llamacpp."),
    activation_gib: Optional[str] = typer.Option(None, "--activation-gib", help="Activation peak per GPU (GiB, or a size with unit)."),
    overhead_gib: Optional[str] = typer.Option(None, "--overhead-gib", help="Non-torch memory per GPU (GiB, or a size with unit)."),
    weights_gib: Optional[str] = typer.Option(None, "--weights-gib", help="Weights per GPU (GiB, or a size with unit), instead of param_count."),
    kv_cache_memory: Optional[str] = typer.Option(None, "--kv-cache-memory", help="KV budget per GPU, bypassing the memory model (bytes, or 16GiB ...), as vLLM's --kv-cache-memory-bytes."),
    shared_prefix: int = typer.Option(0, "--shared-prefix", help="Prompt tokens shared by every request, cached once per replica (full/MLA layers)."),
    swa_full: bool = typer.Option(False, "--swa-full", help="llama.cpp: size sliding-window layers at n_ctx too."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """How many requests of --max-model-len fit on one GPU of a replica, as the engine would count them."""
    from kvplan import fit as fitmod
    from kvplan import render
    from kvplan.errors import DoesNotFit
    from kvplan.gpus import get_gpu
    from kvplan.specs import load_model
    from kvplan.units import parse_bytes, parse_size_default_gib, parse_tokens

    spec = load_model(model)
    opts = fitmod.FitOptions(
        engine=fitmod.get_engine(engine),
        tensor_parallel_size=tp,
        pipeline_parallel_size=pp,
        max_model_len=None if max_model_len is None else parse_tokens(max_model_len, "--max-model-len"),
        kv_dtype=kv_dtype,
        weights_dtype=weights_dtype,
        gpu_memory_utilization=gpu_memory_utilization,
        block_size=block_size,
        max_num_batched_tokens=max_num_batched_tokens,
        max_batch_size=max_batch_size,
        activation_bytes=None if activation_gib is None else parse_size_default_gib(activation_gib, "--activation-gib"),
        overhead_bytes=None if overhead_gib is None else parse_size_default_gib(overhead_gib, "--overhead-gib"),
        weights_bytes=None if weights_gib is None else parse_size_default_gib(weights_gib, "--weights-gib"),
        kv_cache_memory_bytes=None if kv_cache_memory is None else parse_bytes(kv_cache_memory, "--kv-cache-memory"),
        shared_prefix_tokens=shared_prefix,
        swa_full=swa_full,
    )
    g = get_gpu(gpu)
    try:
        result = fitmod.require_fit(spec, g, opts)
    except DoesNotFit as e:
        if json_out:
            render.print_json(render.fit_json(e.result))
        raise
    if result.max_model_len > spec.max_model_len:
        render.warn(
            f"--max-model-len {result.max_model_len:,} is beyond {spec.name}'s max context of "
            f"{spec.max_model_len:,} tokens (computed anyway)"
        )
    if json_out:
        render.print_json(render.fit_json(result))
    else:
        render.fit_table(result, render.console())


# --- fleet --------------------------------------------------------------------------------------


@app.command()
def fleet(
    model: str = typer.Argument(..., help=MODEL_HELP),
    workload: Optional[str] = typer.Option(None, "--workload", "-w", help="Workload YAML: request classes with concurrency and tokens."),
    concurrency: Optional[int] = typer.Option(None, "--concurrency", help="Requests in flight across the fleet (one class; with --seq)."),
    seq: Optional[str] = typer.Option(None, "--seq", "-s", help="Tokens per request for --concurrency (32k = 32768)."),
    gpu: List[str] = typer.Option([], "--gpu", "-g", help="Candidate GPU (repeat); default: every catalog GPU that holds the model at some TP <= 8."),
    tp: List[int] = typer.Option([], "--tp", help="Candidate TP (repeat); default: every TP <= 8 the heads allow."),
    pp: int = typer.Option(1, "--pp", help="pipeline_parallel_size."),
    engine: str = typer.Option("vllm", "--engine", "-e", help="Convention: vllm, sglang, trtllm, llamacpp."),
    kv_dtype: str = typer.Option("auto", "--kv-dtype", help="KV dtype (auto = model dtype)."),
    weights_dtype: Optional[str] = typer.Option(None, "--weights-dtype", help="Weights dtype (default: model dtype)."),
    gpu_memory_utilization: Optional[float] = typer.Option(None, "--gpu-memory-utilization", help="Memory fraction (engine default)."),
    price: List[str] = typer.Option([], "--price", help="GPU=USD_PER_HOUR per GPU (repeat), e.g. h100=2.49."),
    sort: str = typer.Option("gpus", "--sort", help="gpus or cost."),
    show_all: bool = typer.Option(False, "--all", help="Also list layouts that do not fit."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
    csv_out: bool = typer.Option(False, "--csv", help="Print CSV."),
) -> None:
    """Replicas and GPUs a workload needs, per GPU type and TP, ranked by GPUs or cost."""
    from kvplan import fleet as fleetmod
    from kvplan import render
    from kvplan.errors import UsageError
    from kvplan.fit import FitOptions, get_engine
    from kvplan.gpus import get_gpu, load_catalog
    from kvplan.specs import load_model

    spec = load_model(model)
    if workload is not None and (concurrency is not None or seq is not None):
        raise UsageError("--workload: give either --workload FILE or --concurrency N --seq S, not both")
    if workload is not None:
        wl = fleetmod.load_workload(workload)
    elif concurrency is not None and seq is not None:
        wl = fleetmod.workload_from_data({"name": "single", "classes": [{"name": "requests", "concurrency": concurrency, "tokens": seq}]}, "--concurrency/--seq")
    else:
        raise UsageError("--workload: give --workload FILE, or --concurrency N with --seq S")
    opts = FitOptions(
        engine=get_engine(engine),
        pipeline_parallel_size=pp,
        kv_dtype=kv_dtype,
        weights_dtype=weights_dtype,
        gpu_memory_utilization=gpu_memory_utilization,
    )
    gpus = [get_gpu(g) for g in gpu] if gpu else load_catalog()
    prices = fleetmod.parse_prices(price, get_gpu)
    rows = fleetmod.plan_fleet(spec, wl, gpus, opts, tps=tp or None, prices=prices, sort=sort)
    if json_out:
        render.print_json(render.fleet_json(spec.name, wl, rows))
    elif csv_out:
        render.print_csv([render.fleet_row_dict(r) for r in rows])
    else:
        render.fleet_table(spec.name, wl, rows, render.console(), show_all=show_all, sort=sort)


# --- entry point ---------------------------------------------------------------------------------


def _click_errors() -> tuple[type, type]:
    """(UsageError, ClickException) of the click that typer runs on (vendored in typer >= 0.20)."""
    mro = {c.__name__: c for c in typer.BadParameter.__mro__}
    return mro["UsageError"], mro["ClickException"]


def run(argv: list[str] | None = None) -> int:
    """Run the CLI on ``argv``; return the exit code. Errors print one line on stderr, never a traceback."""
    usage_error, click_exception = _click_errors()
    command = typer.main.get_command(app)
    try:
        rv = command.main(args=argv, prog_name="kvplan", standalone_mode=False)
    except KvplanError as e:
        sys.stderr.write(f"kvplan: error: {e}\n")
        return e.exit_code
    except usage_error as e:
        if type(e).__name__ == "NoArgsIsHelpError":
            sys.stdout.write(e.ctx.get_help() + "\n")
            return 0
        name = getattr(e.ctx, "info_name", None)
        where = f"kvplan {name}" if name and name != "kvplan" else "kvplan"
        sys.stderr.write(f"{where}: error: {e.format_message()}\n")
        return 2
    except typer.Abort:
        sys.stderr.write("kvplan: aborted\n")
        return 130
    except click_exception as e:
        sys.stderr.write(f"kvplan: error: {e.format_message()}\n")
        return e.exit_code
    except BrokenPipeError:
        return 0
    return rv if isinstance(rv, int) else 0


def main() -> None:
    """Console-script entry point."""
    sys.exit(run(sys.argv[1:]))
