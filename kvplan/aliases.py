"""Engine flag spellings accepted as aliases of kvplan's own flags, and comma lists.

:func:`rewrite` turns the argv a user typed into the one kvplan's click commands parse, before they parse
it, so ``kvplan fit --help`` keeps showing kvplan's names. Only the flags the invoked command has are
targets: ``--seq`` becomes ``--max-model-len`` for ``fit`` and ``--max-model-len`` becomes ``--seq`` for
``estimate``; an alias whose target the command lacks is left for click to refuse.

========================================  ===========================  ==========================================
typed (engine)                            kvplan flag                  where the spelling comes from
========================================  ===========================  ==========================================
``--tensor-parallel-size``, ``-tp``,      ``--tp``                     vLLM, SGLang (``--tp-size``)
``--tp-size``
``--pipeline-parallel-size``, ``-pp``,    ``--pp``                     vLLM, SGLang (``--pp-size``)
``--pp-size``
``--kv-cache-dtype``                      ``--kv-dtype``               vLLM, SGLang
``--max-num-seqs``,                       ``--max-num-seqs``           vLLM, SGLang (where the command has it)
``--max-running-requests``
``--max-model-len``, ``--seq``,           ``--seq`` or                 vLLM, SGLang: the context flag of the
``--context-length``, ``--ctx-size``      ``--max-model-len``          command, either name (``--ctx-size``:
                                                                       not with ``--engine llamacpp``)
``--mem-fraction-static``                 ``--gpu-memory-utilization`` SGLang, with ``--engine sglang`` only
``--dtype``                               ``--weights-dtype`` and      vLLM: the model dtype, so the weights
                                          ``--kv-dtype``               and (unless a KV dtype is given) the
                                                                       KV cache (``auto`` = the model's dtype)
``--quantization``, ``-q``                ``--weights-dtype``          vLLM (fp8, awq, gptq, mxfp4, ...)
``--kv-cache-memory-bytes``               ``--kv-cache-memory``        vLLM
``--page-size``                           ``--block-size``             SGLang
``-dp``, ``--dp``, ``--attn-dp-size``,     ``--data-parallel-size``     vLLM (``-dp``), SGLang (``--attn-dp-size``;
``--dp-size``                                                          ``--dp-size`` with ``--enable-dp-attention``)
``--expert-parallel-size``, ``--ep``      ``--ep-size``                SGLang
``--chunked-prefill-size``                ``--max-num-batched-tokens`` SGLang
``--disable-hybrid-swa-memory``           ``--swa-full``               SGLang (a flag: sliding layers cached
                                                                       for every token, in one pool)
========================================  ===========================  ==========================================

With ``--engine llamacpp`` (or ``ollama``, ``llama-server``) llama.cpp's own spellings mean what they mean to
llama.cpp (:data:`LLAMACPP_ALIASES`): ``-c`` / ``--ctx-size`` is the context of all slots together (kvplan's
``--ctx-size``, not ``--max-model-len``), ``-np`` ``--parallel``, ``-ctk`` ``--cache-type-k``, ``-ctv``
``--cache-type-v``, ``-fa`` ``--flash-attn``, ``-ub`` / ``--ubatch-size`` ``--max-num-batched-tokens``
(n_ubatch), ``-b`` ``--batch-size``, ``-kvu`` / ``-no-kvu`` ``--kv-unified`` / ``--no-kv-unified``
(common/arg.cpp at llama.cpp 0c1e57098). With any other engine ``--ctx-size`` stays ``--max-model-len``.

vLLM's ``--dtype`` sets the model dtype (``ModelConfig.dtype``; vLLM 0.33 ``config/model.py``
``_get_and_verify_dtype``: an explicit ``float``/``float32`` is served in float32, only ``auto`` downcasts a
float32 config), and ``--kv-cache-dtype auto`` follows it (``utils/torch_utils.py``
``kv_cache_dtype_str_to_dtype``: ``auto`` is ``model_config.dtype``). So ``--dtype X`` becomes
``--weights-dtype X`` (dropped when ``--quantization`` says how the weights are stored) and ``--kv-dtype X``
unless ``--kv-dtype`` / ``--kv-cache-dtype`` is given; a given KV dtype ``auto`` becomes X too. ``--dtype
half`` on a bf16 model therefore plans an fp16 cache (the same bytes), ``--dtype float`` an fp32 one.

Options that take several values (``--seq`` of ``estimate`` and ``sweep``, ``--tp``, ``--gpu``,
``--kv-dtype`` where repeatable) also take them comma-separated: ``--seq 4k,32k,128k``.
"""

from __future__ import annotations

import re

from kvplan.errors import UsageError
from kvplan.units import check_ascii_number

# typed spelling -> kvplan flags it stands for, in order of preference (the first one the command has wins)
ALIASES: dict[str, tuple[str, ...]] = {
    "--tensor-parallel-size": ("--tp",),
    "-tp": ("--tp",),
    "--tp-size": ("--tp",),
    "--pipeline-parallel-size": ("--pp",),
    "-pp": ("--pp",),
    "--pp-size": ("--pp",),
    "--kv-cache-dtype": ("--kv-dtype",),
    "--max-num-seqs": ("--max-num-seqs",),
    "--max-running-requests": ("--max-num-seqs",),
    "--seq": ("--seq", "--max-model-len"),
    "-s": ("-s", "--max-model-len"),
    "--max-model-len": ("--max-model-len", "--seq"),
    "--context-length": ("--max-model-len", "--seq"),
    "--mem-fraction-static": ("--gpu-memory-utilization",),
    "--dtype": ("--weights-dtype", "--kv-dtype"),
    "--quantization": ("--weights-dtype",),
    "-q": ("--weights-dtype",),
    "--kv-cache-memory-bytes": ("--kv-cache-memory",),
    "--page-size": ("--block-size",),
    "-dp": ("--data-parallel-size",),
    "--dp": ("--data-parallel-size",),
    "--attn-dp-size": ("--data-parallel-size",),
    "--dp-size": ("--data-parallel-size",),
    "--expert-parallel-size": ("--ep-size",),
    "--ep": ("--ep-size",),
    "--chunked-prefill-size": ("--max-num-batched-tokens",),
}
# boolean flags: typed spelling -> kvplan flag
BOOL_ALIASES: dict[str, tuple[str, ...]] = {
    "--disable-hybrid-swa-memory": ("--swa-full",),
}

# llama.cpp's spellings, with --engine llamacpp (common/arg.cpp: -c, -np, -ctk, -ctv, -fa, -ub, -b, -kvu, -no-kvu)
LLAMACPP_ALIASES: dict[str, tuple[str, ...]] = {
    "-c": ("--ctx-size",),
    "-np": ("--parallel",),
    "-ctk": ("--cache-type-k",),
    "-ctv": ("--cache-type-v",),
    "-fa": ("--flash-attn",),
    "-ub": ("--max-num-batched-tokens",),
    "--ubatch-size": ("--max-num-batched-tokens",),
    "-b": ("--batch-size",),
    "-kvu": ("--kv-unified",),
    "-no-kvu": ("--no-kv-unified",),
}
# with any other engine (or a command without --engine): --ctx-size is the request length, as before
OTHER_ENGINE_ALIASES: dict[str, tuple[str, ...]] = {"--ctx-size": ("--max-model-len", "--seq")}

COMMA_LISTS = ("--seq", "-s", "--tp", "--pp", "--gpu", "-g", "--kv-dtype")
KV_FLAGS = ("--kv-dtype", "--kv-cache-dtype")

# vLLM's --dtype values -> kvplan weight dtype names (None: the model's own dtype, i.e. no flag)
DTYPE_VALUES: dict[str, str | None] = {
    "auto": None,
    "half": "fp16",
    "float16": "fp16",
    "fp16": "fp16",
    "bfloat16": "bf16",
    "bf16": "bf16",
    "float": "fp32",
    "float32": "fp32",
    "fp32": "fp32",
}

# vLLM's --quantization methods -> kvplan weight dtypes (None: the checkpoint decides, no flag)
QUANTIZATION_VALUES: dict[str, str | None] = {
    "none": None,
    "fp8": "fp8",
    "fbgemm_fp8": "fp8",
    "modelopt": "fp8",
    "ptpc_fp8": "fp8",
    "awq": "int4",
    "awq_marlin": "int4",
    "gptq": "int4",
    "gptq_marlin": "int4",
    "mxfp4": "mxfp4",
    "modelopt_fp4": "nvfp4",
    "nvfp4": "nvfp4",
    "int8": "int8",
    "int4": "int4",
}


_NUMERIC_TYPES = {"IntParamType", "FloatParamType"}  # click's number types (IntRange and FloatRange derive)
# string flags whose numbers kvplan parses with int(), Decimal() or a \\d regex (all read non-ASCII digits)
ASCII_FLAGS = ("--engine-version", "--pp-layer-partition", "--price")


def _options(command) -> tuple[set[str], set[str], set[str], set[str]]:
    """(every option name, names of options that take a value, names of repeatable options, names of options
    whose value click converts to a number)."""
    names: set[str] = set()
    valued: set[str] = set()
    multiple: set[str] = set()
    numeric: set[str] = set()
    for p in getattr(command, "params", ()):
        opts = [*getattr(p, "opts", ()), *getattr(p, "secondary_opts", ())]
        if not opts or not opts[0].startswith("-"):
            continue
        names.update(opts)
        if not getattr(p, "is_flag", False) and not getattr(p, "count", False):
            valued.update(opts)
        if getattr(p, "multiple", False):
            multiple.update(opts)
        if _NUMERIC_TYPES & {c.__name__ for c in type(getattr(p, "type", None)).__mro__}:
            numeric.update(opts)
    return names, valued, multiple, numeric


def engine_values(argv: list[str]) -> list[str]:
    """Every value of --engine / -e in argv (before ``--``), in order."""
    out = []
    for i, tok in enumerate(argv):
        if tok == "--":
            break
        if tok in ("--engine", "-e") and i + 1 < len(argv):
            out.append(argv[i + 1].strip().lower())
        elif tok.startswith("--engine="):
            out.append(tok.split("=", 1)[1].strip().lower())
        elif tok.startswith("-e") and len(tok) > 2 and not tok.startswith("--"):
            out.append(tok[2:].lstrip("=").strip().lower())
    return out


def _same_engine(a: str, b: str) -> bool:
    from kvplan.options import get_engine

    try:
        return get_engine(a) is get_engine(b)
    except UsageError:
        return a == b


def _engine(argv: list[str]) -> str | None:
    """The value of --engine / -e in argv, if given: one reading for the aliases and for click.

    Raises:
        UsageError: two different engines (``--engine vllm --engine sglang``); the same one twice is fine.
    """
    values = engine_values(argv)
    for v in values[1:]:
        if not _same_engine(values[0], v):
            raise UsageError(f"--engine: given twice with different engines ({values[0]}, {v}); give one")
    return values[-1] if values else None


def _is_llamacpp(argv: list[str]) -> bool:
    """Whether argv's --engine names llama.cpp (``llamacpp``, ``ollama``, ``llama-server`` ...)."""
    name = _engine(argv)
    if name is None:
        return False
    from kvplan.options import Engine, get_engine

    try:
        return get_engine(name) is Engine.llamacpp
    except UsageError:
        return False


def _value(flag: str, typed: str, value: str, argv: list[str]) -> str | None:
    """The value to pass on for an alias (None: drop the flag), checking what needs checking."""
    key = value.strip().lower()
    if typed == "--dtype":
        if key not in DTYPE_VALUES:
            raise UsageError(f"--dtype: unknown dtype {value!r}; allowed: {', '.join(DTYPE_VALUES)}")
        return DTYPE_VALUES[key]
    if typed in ("--quantization", "-q"):
        if key not in QUANTIZATION_VALUES:
            raise UsageError(
                f"{typed}: kvplan cannot tell the weight bits of {value!r}; allowed: "
                f"{', '.join(QUANTIZATION_VALUES)}, or give --weights-dtype (bf16, fp8, int8, int4, mxfp4, nvfp4)"
            )
        return QUANTIZATION_VALUES[key]
    if typed == "--dp-size" and "--enable-dp-attention" not in argv:
        raise UsageError(
            "--dp-size: SGLang's --dp-size alone runs that many replicas behind a router, which kvplan counts itself; "
            "for attention data parallelism give --enable-dp-attention with it (or --attn-dp-size N)"
        )
    if typed == "--mem-fraction-static" and _engine(argv) != "sglang":
        raise UsageError(
            "--mem-fraction-static: SGLang's fraction; give it with --engine sglang "
            "(or use --gpu-memory-utilization, which means the chosen engine's own fraction)"
        )
    return value


def _model_dtype(argv: list[str]) -> str | None:
    """The kvplan dtype name of vLLM's ``--dtype`` in argv (before ``--``), or None (absent, ``auto``, or a
    value :func:`_value` will refuse)."""
    for i, tok in enumerate(argv):
        if tok == "--":
            break
        if tok == "--dtype" and i + 1 < len(argv):
            return DTYPE_VALUES.get(argv[i + 1].strip().lower())
        if tok.startswith("--dtype="):
            return DTYPE_VALUES.get(tok.split("=", 1)[1].strip().lower())
    return None


def _takes_several(flag: str, target: str, every_command) -> str:
    """``; 'kvplan sweep' and 'kvplan fleet' take several``: the commands whose ``flag`` (or ``target``)
    takes several values, read from the commands themselves (``every_command()``: the click group of all
    of them); "" when none does, or none was given."""
    if every_command is None:
        return ""
    group = every_command()
    several = [
        f"'kvplan {name}'" for name, cmd in getattr(group, "commands", {}).items() if {flag, target} & _options(cmd)[2]
    ]
    if not several:
        return ""
    verb = "takes" if len(several) == 1 else "take"
    return f"; {', '.join(several[:-1])}{' and ' if len(several) > 1 else ''}{several[-1]} {verb} several"


def rewrite(argv: list[str], command, every_command=None) -> list[str]:
    """``argv`` with engine spellings replaced by the flags of the command it invokes, and comma lists split.

    ``command`` is the click command (or group) that will parse ``argv``; ``argv[0]`` names the
    subcommand when it is a group. Tokens after ``--`` are left alone. ``every_command``: a function
    returning the group of every command, called only to name, in an error, the commands that take
    several values of a flag.

    Raises:
        UsageError: two different ``--engine`` values; a number flag's value outside ASCII
            (:func:`kvplan.units.check_ascii_number`), a ``--dtype`` or
            ``--quantization`` value with no known weight dtype,
            ``--mem-fraction-static`` without ``--engine sglang``, an empty item in a comma list, or a
            comma list for a flag that takes one value.
    """
    if not argv:
        return argv
    sub = command
    commands = getattr(command, "commands", None)
    start = 0
    if commands is not None:
        sub = commands.get(argv[0])
        if sub is None:
            return argv
        start = 1
    names, valued, multiple, numeric = _options(sub)
    _engine(argv)  # two different --engine values: one clear error (click would take the last)
    quantized = any(t in ("--quantization", "-q") or t.startswith("--quantization=") for t in argv)
    kv_given = any(t in KV_FLAGS or t.startswith(tuple(f + "=" for f in KV_FLAGS)) for t in argv)
    model_dtype = _model_dtype(argv)  # vLLM's --dtype: the KV cache's dtype when none (or auto) is given
    llama = _is_llamacpp(argv)
    aliases = {**ALIASES, **(LLAMACPP_ALIASES if llama else OTHER_ENGINE_ALIASES)}
    forced = () if llama else tuple(OTHER_ENGINE_ALIASES)  # rewritten even where the command has the name
    out = list(argv[:start])
    i = start
    while i < len(argv):
        tok = argv[i]
        if tok == "--":
            out.extend(argv[i:])
            break
        flag, eq, inline = tok.partition("=") if tok.startswith("-") else (tok, "", "")
        target = flag
        if flag not in names and flag in BOOL_ALIASES and not eq:
            out.append(next((t for t in BOOL_ALIASES[flag] if t in names), flag))
            i += 1
            continue
        if (flag not in names or flag in forced) and flag in aliases:
            target = next((t for t in aliases[flag] if t in names), flag)
        if target not in valued:  # a positional, a boolean flag, or an unknown flag: click decides
            out.append(target if target != flag and target in names else tok)
            i += 1
            continue
        if eq:
            value, i = inline, i + 1
        elif i + 1 < len(argv):
            value, i = argv[i + 1], i + 2
        else:
            out.append(tok if target == flag else target)  # click reports the missing value
            i += 1
            continue
        if flag == "--dtype" and target != flag:
            value = _value(target, flag, value, argv)
            if value is None:
                continue
            if target == "--weights-dtype" and not quantized:  # --quantization says how the weights are stored
                out.extend([target, value])
            if "--kv-dtype" in names and not kv_given:  # vLLM: --kv-cache-dtype auto = the model dtype
                out.extend(["--kv-dtype", value])
            continue
        if target != flag:
            value = _value(target, flag, value, argv)
            if value is None:
                continue
        if target in numeric or target in ASCII_FLAGS:
            check_ascii_number(flag, value)
        if target == "--kv-dtype" and model_dtype is not None:  # vLLM's auto is the --dtype given
            value = ",".join(model_dtype if v.strip().lower() == "auto" else v for v in value.split(","))
        if flag in COMMA_LISTS or target in COMMA_LISTS:
            parts = value.split(",") if "," in value else [value]
            if len(parts) > 1:
                if any(not p.strip() for p in parts):
                    raise UsageError(f"{flag}: empty item in the list {value!r}")
                pair = next(
                    (
                        (a.strip(), b.strip())
                        for a, b in zip(parts, parts[1:], strict=False)
                        if re.fullmatch(r"[0-9]{1,3}", a.strip()) and re.fullmatch(r"[0-9]{3}", b.strip())
                    ),
                    None,
                )
                if target == "--seq" and pair:  # 32,768 reads as a thousands separator; commas separate values
                    raise UsageError(
                        f"{flag}: {value!r} is ambiguous: write {''.join(pair)} or {'_'.join(pair)}; "
                        "commas separate values"
                    )
                if target not in multiple:
                    raise UsageError(
                        f"{flag}: one value only for 'kvplan {argv[0]}' (got {value!r})"
                        + _takes_several(flag, target, every_command)
                    )
            for p in parts:
                out.extend([target, p.strip()])
            continue
        out.extend([target, value])
    return out
