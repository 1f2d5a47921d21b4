"""kvplan's Python API: the objects the CLI renders, from the same inputs.

    import kvplan

    spec = kvplan.load_model("llama3-8b")             # or "meta-llama/Llama-3.1-8B", "model.gguf", "config.json"
    est = kvplan.estimate(spec, "4k")                 # calc.Estimate: est.total_bytes == 536_870_912
    plan = kvplan.fit("llama3.1-70b", "h100", tp=4, max_model_len="32k")   # fit.FitResult
    rows = kvplan.fleet("llama3.1-70b", "examples/chat-and-rag.yaml", gpus=["h100", "h200"])

Every function takes a model as a :class:`~kvplan.specs.ModelSpec` or as anything ``kvplan MODEL`` takes
(a bundled name, a Hugging Face repo id, a GGUF file, a spec YAML, a config.json); token counts as ints or
strings (``"128k"`` = 131,072); GPUs as catalog names, driver names (``"NVIDIA H100 80GB HBM3"``), sizes
(``"80GiB"``) or :class:`~kvplan.gpus.GPU` objects. Byte counts in results are ints. Errors are
:class:`kvplan.errors.UsageError` (bad input, with the one-line message the CLI prints; ``SpecError`` for
models) and never a plan that does not fit: check ``FitResult.fits`` / ``FleetRow.fits``.

``kvplan.fit`` and ``kvplan.fleet`` are also the modules of those names; calling them calls the functions
here (the modules are made callable), so ``kvplan.fit.FitOptions`` keeps working.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["load_model", "estimate", "fit", "fit_options", "fleet", "get_gpu"]


def _spec(model):
    from kvplan.loader import load_model
    from kvplan.specs import ModelSpec

    return model if isinstance(model, ModelSpec) else load_model(str(model))


def _tokens(value, flag: str, allow_zero: bool = False, caller: str = "") -> int:
    from kvplan.errors import UsageError
    from kvplan.units import parse_tokens

    if isinstance(value, (list, tuple, set, range)):  # the CLI's comma list has no Python form: one call each
        name = flag.lstrip("-").replace("-", "_")
        shown = repr(value) if len(repr(value)) <= 60 else f"{repr(value)[:57]}..."
        raise UsageError(
            f"{name}: one token count (an int, or a string like '32k'), not a {type(value).__name__} ({shown}); "
            f"call {caller or 'it'} once per length"
        )
    return parse_tokens(value, flag, allow_zero=allow_zero)


def _number(flag: str, value) -> None:
    """Refuse a value that is not a number (a string, a bool) where the CLI takes a float; the ranges are the
    engines' checks (as for the CLI's values).

    Raises:
        UsageError: naming the flag, as the CLI does.
    """
    from kvplan.errors import UsageError

    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise UsageError(f"{flag}: {value!r} must be a number, not a {type(value).__name__}")


def _bytes(value, flag: str) -> int | None:
    from kvplan.units import parse_bytes

    return None if value is None else parse_bytes(value, flag)


def load_model(model):
    """The :class:`~kvplan.specs.ModelSpec` of a bundled name, Hugging Face repo id (``org/name[@revision]``,
    from the local HF cache or the Hub), GGUF file, spec YAML or config.json (or its folder).

    Raises:
        SpecError: nothing matches (close names suggested), an unreadable or inconsistent file, or a repo
            that is not cached while offline (``HF_HUB_OFFLINE``).
    """
    return _spec(model)


def get_gpu(gpu):
    """The :class:`~kvplan.gpus.GPU` of a catalog id or alias, a driver's product name or a size.

    Raises:
        UsageError: unknown name (close names suggested) or a malformed size.
    """
    from kvplan.gpus import GPU, get_gpu

    return gpu if isinstance(gpu, GPU) else get_gpu(str(gpu))


def estimate(model, seq, batch: int = 1, kv_dtype: str = "auto", block_size: int | None = None, tp: int = 1):
    """KV-cache bytes of ``batch`` requests of ``seq`` tokens, per layer kind: what ``kvplan estimate`` prints.

    Args:
        model: a ModelSpec or a MODEL string (see :func:`load_model`).
        seq: tokens per request, int or string (``"128k"`` = 131,072).
        batch: concurrent requests.
        kv_dtype: ``auto`` (the model's dtype), ``fp16``, ``bf16``, ``fp8``, ``q8_0``, ``nvfp4``, ...
        block_size: round each request up to whole blocks of this many tokens (paged engines), or None.
        tp: tensor-parallel size: bytes per GPU.

    Returns:
        :class:`kvplan.calc.Estimate`: ``bytes_per_request`` and ``total_bytes`` in B (ints), ``groups``
        per layer kind; ``exceeds_max_model_len`` when ``seq`` is beyond the model's context.

    Raises:
        UsageError: a bad count, dtype or TP; SpecError for the model.
    """
    from kvplan import calc

    return calc.estimate(_spec(model), _tokens(seq, "--seq", caller="kvplan.estimate"), batch, kv_dtype, block_size, tp)


def fit_options(
    *,
    engine: str = "vllm",
    tp: int = 1,
    pp: int = 1,
    max_model_len=None,
    kv_dtype: str | None = None,
    weights_dtype: str | None = None,
    gpu_memory_utilization: float | None = None,
    block_size: int | None = None,
    max_num_batched_tokens: int | None = None,
    max_batch_size: int | None = None,
    activation_bytes=None,
    overhead_bytes=None,
    weights_bytes=None,
    kv_cache_memory_bytes=None,
    shared_prefix=0,
    swa_full: bool = False,
    engine_version: str | None = None,
    max_num_seqs: int | None = None,
    async_scheduling: bool | None = None,
    enable_prefix_caching: bool | None = None,
    hybrid_kv_cache_manager: bool | None = None,
    vllm_sampler: str | None = None,
    pp_layer_partition=None,
    num_speculative_tokens: int = 0,
    speculative_model=None,
    num_mtp_layers: int = 0,
    enforce_eager: bool = False,
    ctx_size=None,
    n_parallel: int | None = None,
    kv_unified: bool | None = None,
    cache_type_k: str | None = None,
    cache_type_v: str | None = None,
    flash_attn: str | None = None,
    n_batch: int | None = None,
    llama_tool: str | None = None,
    dp: int = 1,
    enable_expert_parallel: bool = False,
    ep_size: int | None = None,
    swa_full_tokens_ratio: float | None = None,
    mamba_full_memory_ratio: float | None = None,
    max_mamba_cache_size: int | None = None,
    disable_radix_cache: bool = False,
    max_total_tokens=None,
    mamba_ssm_dtype: str | None = None,
):
    """The :class:`kvplan.options.FitOptions` of a plan: the one place they are built, for the API and every
    CLI command (``fit``, ``fleet``, ``sweep``, ``plot``, ``verify --fit``).

    Args:
        engine: ``vllm``, ``sglang``, ``trtllm`` or ``llamacpp`` (whose conventions apply).
        tp, pp: tensor- and pipeline-parallel sizes.
        max_model_len: tokens per request (int or ``"32k"``); None: the model's max context.
        kv_dtype, weights_dtype: dtypes (None/``auto``: the model's).
        gpu_memory_utilization: the engine's memory fraction (None: its default).
        block_size, max_num_batched_tokens, max_batch_size, max_num_seqs: engine settings (None: defaults).
        activation_bytes, overhead_bytes, weights_bytes: per-GPU overrides in B (int, or a string with a unit:
            ``"2GiB"``).
        kv_cache_memory_bytes: a KV budget per GPU that bypasses the budget model (vLLM's
            ``--kv-cache-memory-bytes``).
        shared_prefix: prompt tokens every request shares, cached once (int or ``"2k"``).
        swa_full: size sliding-window layers for every token (llama.cpp's ``--swa-full``).
        engine_version: whose rules (None: the newest).
        async_scheduling, enable_prefix_caching, hybrid_kv_cache_manager: vLLM settings (None: defaults).
        vllm_sampler: the sampler of vLLM's profile run (``flashinfer``, ``pytorch``, ``triton``; None: the
            version's default).
        pp_layer_partition: layers per PP stage, a tuple or ``"41,39"``.
        num_speculative_tokens, speculative_model, num_mtp_layers: speculative decoding (vLLM); the draft
            model as a ModelSpec or a MODEL string.
        enforce_eager: vLLM's ``--enforce-eager``, SGLang's ``--disable-cuda-graph`` (no CUDA graphs in the budget).
        ctx_size, n_parallel, kv_unified, cache_type_k, cache_type_v, flash_attn, n_batch, llama_tool: llama.cpp's
            ``-c`` (the context of all slots together, int or ``"32k"``; 0: the model's), ``-np``,
            ``--kv-unified``, ``-ctk``, ``-ctv``, ``-fa`` (on/off/auto), ``-b``, and whose defaults apply
            (``server``: llama-server, ``cli``: llama-cli); None: the tool's defaults. llama.cpp's ``-ub`` is
            ``max_num_batched_tokens``.
        dp: attention data-parallel ranks per replica (vLLM ``--data-parallel-size``, SGLang ``--attn-dp-size``).
        enable_expert_parallel: split the routed experts over the GPUs of a stage (vLLM
            ``--enable-expert-parallel``; SGLang: ``--ep-size`` = TP).
        ep_size: SGLang's ``--ep-size``.
        swa_full_tokens_ratio, mamba_full_memory_ratio, max_mamba_cache_size, disable_radix_cache,
            max_total_tokens, mamba_ssm_dtype: SGLang's settings of the same names (None / False: its defaults);
            ``max_num_seqs`` is its ``--max-running-requests``, ``block_size`` its ``--page-size``,
            ``max_num_batched_tokens`` its ``--chunked-prefill-size``, ``swa_full`` its
            ``--disable-hybrid-swa-memory``.

    Raises:
        UsageError: an unknown engine, a malformed count or size, a llama.cpp setting under another engine;
            SpecError for the draft model.
    """
    from kvplan.options import FitOptions, check_engine_fields, get_engine, parse_partition

    for flag, value in (("--gpu-memory-utilization", gpu_memory_utilization),
                        ("--swa-full-tokens-ratio", swa_full_tokens_ratio),
                        ("--mamba-full-memory-ratio", mamba_full_memory_ratio)):  # fmt: skip
        _number(flag, value)
    if isinstance(pp_layer_partition, str):
        pp_layer_partition = parse_partition(pp_layer_partition)
    opts = FitOptions(
        engine=get_engine(engine),
        tensor_parallel_size=tp,
        pipeline_parallel_size=pp,
        max_model_len=None if max_model_len is None else _tokens(max_model_len, "--max-model-len"),
        kv_dtype=kv_dtype,
        weights_dtype=weights_dtype,
        gpu_memory_utilization=gpu_memory_utilization,
        block_size=block_size,
        max_num_batched_tokens=max_num_batched_tokens,
        max_batch_size=max_batch_size,
        activation_bytes=_bytes(activation_bytes, "activation_bytes"),
        overhead_bytes=_bytes(overhead_bytes, "overhead_bytes"),
        weights_bytes=_bytes(weights_bytes, "weights_bytes"),
        kv_cache_memory_bytes=_bytes(kv_cache_memory_bytes, "kv_cache_memory_bytes"),
        shared_prefix_tokens=_tokens(shared_prefix, "--shared-prefix", allow_zero=True),
        swa_full=swa_full,
        engine_version=engine_version,
        max_num_seqs=max_num_seqs,
        async_scheduling=async_scheduling,
        enable_prefix_caching=enable_prefix_caching,
        hybrid_kv_cache_manager=hybrid_kv_cache_manager,
        vllm_sampler=vllm_sampler,
        pp_layer_partition=None if pp_layer_partition is None else tuple(pp_layer_partition),
        num_speculative_tokens=num_speculative_tokens,
        speculative_model=None if speculative_model is None else _spec(speculative_model),
        num_mtp_layers=num_mtp_layers,
        enforce_eager=bool(enforce_eager),
        ctx_size=None if ctx_size is None else _tokens(ctx_size, "--ctx-size", allow_zero=True),
        n_parallel=n_parallel,
        kv_unified=kv_unified,
        cache_type_k=cache_type_k,
        cache_type_v=cache_type_v,
        flash_attn=flash_attn,
        n_batch=n_batch,
        llama_tool=llama_tool,
        data_parallel_size=dp,
        enable_expert_parallel=enable_expert_parallel,
        expert_parallel_size=ep_size,
        swa_full_tokens_ratio=swa_full_tokens_ratio,
        mamba_full_memory_ratio=mamba_full_memory_ratio,
        max_mamba_cache_size=max_mamba_cache_size,
        disable_radix_cache=bool(disable_radix_cache),
        max_total_tokens=None if max_total_tokens is None else _tokens(max_total_tokens, "--max-total-tokens"),
        mamba_ssm_dtype=mamba_ssm_dtype,
    )
    check_engine_fields(opts)
    return opts


def fit(model, gpu, **settings):
    """One GPU's plan, as ``kvplan fit`` computes it: weights, activation, overhead, KV budget, capacity.

    Args:
        model: a ModelSpec or a MODEL string (see :func:`load_model`).
        gpu: catalog name, driver name, size (``"80GiB"``, taken as the CUDA-visible total) or a GPU.
        settings: the keywords of :func:`fit_options` (``tp=4``, ``max_model_len="32k"``, ``engine="sglang"``,
            ``kv_cache_memory_bytes="20GiB"`` ...).

    Returns:
        :class:`kvplan.fit.FitResult`, bytes per GPU as ints; ``fits`` is False when not one request fits
        (no exception: the CLI turns that into exit 1).

    Raises:
        UsageError: bad settings (a TP the heads do not allow, unknown dtype or engine, an unknown keyword
            ...); SpecError for the model, including a model without weights information and no
            ``weights_bytes``.
    """
    from kvplan.fit import plan_fit

    return plan_fit(_spec(model), get_gpu(gpu), _options(settings))


def _options(settings: dict):
    """:func:`fit_options` of keyword settings, with one clear line for an unknown keyword."""
    import inspect

    from kvplan.errors import UsageError

    allowed = [p for p in inspect.signature(fit_options).parameters]
    unknown = [k for k in settings if k not in allowed]
    if unknown:
        import difflib

        close = difflib.get_close_matches(unknown[0], allowed, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise UsageError(f"{unknown[0]!r}: not a setting of a plan{hint}; allowed: {', '.join(allowed)}")
    return fit_options(**settings)


def fleet(
    model,
    workload=None,
    *,
    concurrency: int | None = None,
    seq=None,
    gpus=None,
    tps: list[int] | None = None,
    pp: int | list[int] | None = None,
    engine: str = "vllm",
    kv_dtype: str = "auto",
    weights_dtype: str | None = None,
    gpu_memory_utilization: float | None = None,
    kv_cache_memory_bytes=None,
    prices: dict[str, float] | None = None,
    sort: str = "gpus",
    tpot_ms: float | None = None,
    ttft_ms: float | None = None,
    **settings,
):
    """Replicas and GPUs a workload needs per GPU type and parallel layout, as ``kvplan fleet`` ranks them.

    Args:
        model: a ModelSpec or a MODEL string (see :func:`load_model`).
        workload: a workload YAML path, a mapping ``{name, classes: [{name, concurrency, tokens,
            shared_prefix}]}``, or a :class:`kvplan.fleet.Workload`; or None with ``concurrency`` and ``seq``.
        gpus: candidate GPUs (names or GPU objects); None: the whole catalog.
        tps: candidate TPs; None: every TP ≤ 8 the heads allow.
        kv_cache_memory_bytes: a KV budget per GPU (int or ``"40GiB"``) that bypasses the budget model (exact).
        pp: candidate PP degree(s); None: 1, 2 and 4 (:data:`kvplan.fleet.DEFAULT_PPS`).
        prices: USD per GPU-hour by GPU name (``{"h100": 2.49}``).
        sort: ``gpus`` or ``cost``.
        tpot_ms, ttft_ms: latency targets of classes without their own (ms).
        settings: other keywords of :func:`fit_options` (``dp=8, enable_expert_parallel=True``,
            ``engine_version``, ``max_num_seqs`` ...).

    Returns:
        A list of :class:`kvplan.fleet.FleetRow`, feasible first, the best layout per GPU with
        ``best_for_gpu`` set; GPU counts are ints, ``kv_budget_bytes_per_gpu`` in B.

    Raises:
        UsageError: no or two workload sources, a workload that is not a path, mapping or Workload, a malformed
            workload, unknown GPU, an empty list of GPUs or PPs, bad TP or sort, a price the CLI's ``--price``
            refuses (not a number, below 0, NaN, for a GPU not in ``gpus``).
    """
    from kvplan import fleet as fleetmod
    from kvplan.errors import UsageError
    from kvplan.gpus import get_gpu as gpu_by_name
    from kvplan.gpus import load_catalog

    if isinstance(gpus, (str, Path)) or not isinstance(gpus, (list, tuple, type(None))):
        gpus = [gpus]  # one GPU
    if gpus is not None and not gpus:
        raise UsageError("gpus: an empty list; give GPUs, or None for the whole catalog")
    if pp is not None and not isinstance(pp, int) and not list(pp):
        raise UsageError("pp: an empty list; give PP degrees, or None for 1, 2 and 4")
    if workload is not None and not isinstance(workload, (str, Path, dict, fleetmod.Workload)):
        raise UsageError(
            f"workload: {type(workload).__name__} {str(workload)[:40]!r}: give a workload YAML path, a mapping "
            "{name, classes: [...]} or a kvplan.fleet.Workload (or concurrency with seq)"
        )
    if workload is not None and (concurrency is not None or seq is not None):
        raise UsageError("workload: give either a workload or concurrency and seq, not both")
    if workload is None:
        if concurrency is None or seq is None:
            raise UsageError("workload: give a workload, or concurrency with seq")
        data: Any = {"name": "single", "classes": [{"name": "requests", "concurrency": concurrency, "tokens": seq}]}
        wl = fleetmod.workload_from_data(data, "concurrency/seq")
    elif isinstance(workload, fleetmod.Workload):
        wl = workload
    elif isinstance(workload, dict):
        wl = fleetmod.workload_from_data(workload, "workload")
    else:
        wl = fleetmod.load_workload(Path(workload))
    pps = None if pp is None else [pp] if isinstance(pp, int) else list(pp)
    opts = _options(dict(settings, engine=engine, pp=pps[0] if pps else 1, kv_dtype=kv_dtype,
                         weights_dtype=weights_dtype, gpu_memory_utilization=gpu_memory_utilization,
                         kv_cache_memory_bytes=kv_cache_memory_bytes))  # fmt: skip
    candidates = [get_gpu(g) for g in gpus] if gpus else load_catalog()
    if prices is not None and not isinstance(prices, dict):
        raise UsageError(f"prices: a {type(prices).__name__}; give a mapping of GPU name to USD per GPU-hour")
    items = [f"{getattr(name, 'id', name)}={usd}" for name, usd in (prices or {}).items()]  # --price's rules
    price_ids = fleetmod.parse_prices(items, gpu_by_name, candidates if gpus else None)
    slo = fleetmod.SLO(fleetmod.check_ms("tpot_ms", tpot_ms), fleetmod.check_ms("ttft_ms", ttft_ms))
    return fleetmod.plan_fleet(_spec(model), wl, candidates, opts, tps=tps or None, prices=price_ids, sort=sort,
                               slo=slo, pps=pps)  # fmt: skip
