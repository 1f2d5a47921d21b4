"""Inputs that used to break the error contract or print a number a user could act on wrongly."""

from __future__ import annotations

import sys

import pytest

from kvplan.units import fmt_gb, fmt_gib


def test_bare_kvplan_prints_usage_and_exits_2(cli):
    code, out, err = cli()
    assert code == 2
    assert out == ""
    assert "Usage: kvplan" in err


@pytest.mark.parametrize(
    "args, line",
    [
        (
            ["--batch", "1000000000000"],
            "kvplan: error: --batch: 1,000,000,000,000 is beyond kvplan's bound of 1,000,000,000 concurrent requests\n",
        ),
        (
            ["--batch", "99999999999999999999999"],
            "kvplan: error: --batch: 99,999,999,999,999,999,999,999 is beyond kvplan's bound of 1,000,000,000 "
            "concurrent requests\n",
        ),
        (
            ["--seq", "99999999999999999999"],
            "kvplan: error: --seq: '99999999999999999999' is beyond kvplan's bound of 1,099,511,627,776 tokens "
            "(2^40)\n",
        ),
    ],
)
def test_huge_values_are_bounded_with_the_bound_named(cli, args, line):
    if "--seq" not in args:
        args = ["--seq", "8k", *args]
    code, out, err = cli("estimate", "llama3-8b", *args)
    assert (code, out, err) == (2, "", line)


def test_largest_batch_is_exact_integers(cli):
    code, out, _ = cli("estimate", "llama3-8b", "--seq", "8k", "--batch", "1000000000")
    assert code == 0
    # 131,072 B/token × 8,192 tokens × 10^9 requests = 1,073,741,824 × 10^9 B = 10^9 GiB exactly
    assert "KV cache: 1,073,741,824,000,000,000 B (1,000,000,000 GiB, 1,073,741,824.000 GB)" in out


def test_gib_and_gb_text_is_exact_for_any_int():
    # 99,999,999,999,999,999,999,999 requests × 0.5 GiB: a float would print ...991,611,392
    n = 99_999_999_999_999_999_999_999 * 536_870_912
    assert fmt_gib(n) == "49,999,999,999,999,999,999,999.5 GiB"
    assert fmt_gb(n) == "53,687,091,199,999,999,999,999.463 GB"
    assert (fmt_gib(536_870_912), fmt_gb(536_870_912)) == ("0.5 GiB", "0.537 GB")


def test_ratio_is_cut_never_rounded_and_counts_take_singulars():
    from kvplan.units import fmt_ratio_floor, parse_tokens, plural

    assert fmt_ratio_floor(14_329 / 2_048) == "6.99" and f"{14_329 / 2_048:.2f}" == "7.00"
    assert fmt_ratio_floor(0.29) == "0.29"  # its binary value is a little below: cut by its repr, not its bits
    assert (fmt_ratio_floor(7.0), fmt_ratio_floor(30_951.479), fmt_ratio_floor(0.0)) == ("7.00", "30,951.47", "0.00")
    assert (plural(1, "block"), plural(2, "block"), plural(1, "padding layer"), plural(0, "row has", "rows have")) == (
        "1 block",
        "2 blocks",
        "1 padding layer",
        "0 rows have",
    )
    assert parse_tokens("2k", "--shared-prefix", allow_zero=True) == 2048
    assert parse_tokens("0", "--shared-prefix", allow_zero=True) == 0
    with pytest.raises(Exception, match="must be at least 1 token"):
        parse_tokens("0", "--seq")


@pytest.mark.parametrize("suffix", ["", ".yaml", ".json"])
def test_model_name_too_long_for_the_file_system(cli, suffix):
    name = "a" * 300 + suffix
    code, out, err = cli("estimate", name, "--seq", "1")
    assert code == 2 and out == ""
    assert err.count("\n") == 1
    assert err.startswith("kvplan: error: " + "a" * 120 + "… (")
    assert "cannot read (File name too long)" in err or "unknown model" in err


BOMB = """\
a: &a ["x","x","x","x","x","x","x","x","x"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
"""


@pytest.mark.parametrize(
    "command, key",
    [
        (["fleet", "llama3-8b", "--workload"], "name: [*d,*d,*d,*d,*d,*d,*d,*d,*d]\nclasses: []\n"),
        (
            ["fleet", "llama3-8b", "--workload"],
            "name: w\nclasses:\n  - {name: c, concurrency: 1, tokens: 8, shared_prefix: *d}\n",
        ),
        (["estimate", "--seq", "1"], "name: [*d,*d,*d]\n"),
    ],
)
def test_yaml_alias_bombs_are_refused_fast(cli, tmp_path, command, key):
    p = tmp_path / "bomb.yaml"
    p.write_text(BOMB + key)
    args = [*command, str(p)] if command[0] == "fleet" else [command[0], str(p), *command[1:]]
    code, out, err = cli(*args)  # refused from the parser's events, before any alias is expanded
    assert code == 2
    assert (
        err == f"kvplan: error: {p}: YAML aliases (*a) are not allowed in spec and workload files (line 2); "
        "write the value out\n"
    )


def test_empty_spec_file_says_empty(cli, tmp_path):
    p = tmp_path / "empty.yaml"
    p.write_text("# nothing\n")
    code, _, err = cli("estimate", str(p), "--seq", "1")
    assert code == 2
    assert err == f"kvplan: error: {p}: empty file; a spec is a YAML mapping of fields (see 'kvplan models')\n"


@pytest.mark.parametrize("args", [["models"], ["models", "--json"], ["gpus"]])
def test_a_reader_closing_the_pipe_early_is_not_a_failure(args):
    import subprocess
    import sys

    # `kvplan models | head -1`: rich would exit 1 on the broken pipe, as if a plan did not fit
    code = "import sys; from kvplan.cli import run; sys.exit(run(sys.argv[1:]))"
    p = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.readline()
    p.stdout.close()
    assert p.wait(timeout=30) == 0
    assert p.stderr.read() == b""


def _registered_model_types():
    from kvplan.readers import REGISTRY

    return sorted(REGISTRY)


@pytest.mark.parametrize("model_type", _registered_model_types())
def test_a_huge_layer_count_is_refused_before_any_per_layer_list(model_type):
    from kvplan.errors import SpecError
    from kvplan.readers import spec_from_hf_config

    with pytest.raises(SpecError, match=r"c\.json: num_hidden_layers=2000000000 is more layers than kvplan handles"):
        spec_from_hf_config({"model_type": model_type, "num_hidden_layers": 2_000_000_000}, "c.json")


@pytest.mark.parametrize(
    "config, message",
    [
        ({"model_type": "granitemoehybrid", "num_hidden_layers": 2, "layer_types": [[1], "mamba"]}, "layer_types[0]"),
        (
            {"model_type": "zamba2", "num_hidden_layers": 2, "layers_block_type": [{"a": 1}, "mamba"]},
            "layers_block_type[0]",
        ),
        ({"model_type": "nemotron_h", "layers_block_type": ["mamba", ["attention"]]}, "layers_block_type[1]"),
        ({"model_type": "nemotron_h", "hybrid_override_pattern": ["M"]}, "hybrid_override_pattern"),
        ({"model_type": "nemotron_h", "mamba_ssm_cache_dtype": ["float32"]}, "mamba_ssm_cache_dtype"),
        ({"model_type": "qwen3_5_text", "mamba_ssm_dtype": {"a": 1}}, "mamba_ssm_dtype"),
        ({"model_type": "deepseek_v32", "num_hidden_layers": 2, "layer_types": [[], "x"]}, "layer_types[0]"),
        ({"model_type": "qwen3_next", "num_hidden_layers": 2, "layer_types": [{}, "x"]}, "layer_types[0]"),
    ],
)
def test_a_list_or_object_where_a_name_belongs_is_one_line(cli, tmp_path, config, message):
    import json

    p = tmp_path / "config.json"
    p.write_text(json.dumps(config))
    code, out, err = cli("estimate", p, "--seq", "4k")
    assert (code, out) == (2, "") and err.count("\n") == 1, err
    assert f"{p}: {message}" in err


BIG_SPEC = "name: big\nsource: test\nnum_layers: 100000\nnum_q_heads: 8\nnum_kv_heads: 8\nhead_dim: 128\n"


@pytest.mark.parametrize("extra", ["", "num_kv_shared_layers: 50000\n", "layers: {default: full, rules: []}\n"])
def test_a_100_000_layer_spec_gives_its_exact_bytes(cli, tmp_path, extra):
    # 100,000 layers (kvplan's MAX_LAYERS): a build quadratic in the layers would take ~10^10 steps here, a hang
    # rather than a flaky threshold; scripts/bench_inputs.py times it
    p = tmp_path / "big.yaml"
    p.write_text(f"{BIG_SPEC}dtype: bf16\nmax_model_len: 4096\n{extra}")
    code, out, err = cli("estimate", p, "--seq", "4k")
    assert code == 0, err
    # per layer and token: K and V × 8 KV heads × 128 × 2 B (bf16) = 4,096 B, × 4,096 tokens = 16,777,216 B;
    # the last 50,000 layers of num_kv_shared_layers read earlier layers' caches and keep none of their own
    # 100,000 × 16,777,216 = 1,677,721,600,000 B; 50,000 × 16,777,216 = 838,860,800,000 B
    expected = "838,860,800,000" if extra.startswith("num_kv") else "1,677,721,600,000"
    assert f"KV cache: {expected} B" in out


def _traced_events(fn) -> int:
    """Python-level work of ``fn()``: the call and line events sys.settrace sees (no clock involved)."""
    count = 0

    def trace(frame, event, arg):
        nonlocal count
        count += 1
        return trace

    sys.settrace(trace)
    try:
        fn()
    finally:
        sys.settrace(None)
    return count


@pytest.mark.skipif(sys.gettrace() is not None, reason="a tracer (coverage, a debugger) is already installed")
@pytest.mark.parametrize("extra", ["", "shared", "rules"])
def test_spec_building_work_grows_linearly_with_the_layers(extra):
    from kvplan.specs import build_spec

    def data(n: int) -> dict:
        d = dict(name="big", source="test", num_layers=n, num_q_heads=8, num_kv_heads=8, head_dim=128,
                 dtype="bf16", max_model_len=4096)  # fmt: skip
        if extra == "shared":
            d["num_kv_shared_layers"] = n // 2
        if extra == "rules":
            d["layers"] = {"default": "full", "rules": [{"kind": "full", "period": 4, "offset": 3}]}
        return d

    small = _traced_events(lambda: build_spec(data(1_000), "small.yaml"))
    big = _traced_events(lambda: build_spec(data(10_000), "big.yaml"))
    assert big <= 11 * small, (small, big)  # linear: ~10x; a per-layer pass over the layers: ~100x


def test_parse_tokens_comma_is_not_a_thousands_separator():
    from kvplan.errors import UsageError
    from kvplan.units import parse_tokens

    assert parse_tokens("32_768") == 32768
    with pytest.raises(UsageError, match="comma is not a thousands separator"):
        parse_tokens("32,768", "--context")


# --- YAML: one loader for spec, workload and catalog files (issue 20) ------------------------------------


SPEC = "name: m\nsource: test\nnum_layers: 2\nnum_q_heads: 8\nnum_kv_heads: 8\nhead_dim: 128\nmax_model_len: 4096\n"


@pytest.mark.parametrize("where", ["notes", "param_count", "max_model_len"])
def test_a_yaml_integer_over_4300_digits_is_one_line_anywhere(cli, tmp_path, where):
    # Python's int() refuses decimal strings over 4,300 digits (ValueError); PyYAML called it unguarded
    p = tmp_path / "m.yaml"
    text = f"{SPEC}dtype: bf16\n".replace("max_model_len: 4096\n", "") + f"{where}: {'9' * 5000}\n"
    if where != "max_model_len":
        text += "max_model_len: 4096\n"
    p.write_text(text)
    code, out, err = cli("estimate", p, "--seq", "4k")
    assert (code, out) == (2, "")
    line = text.splitlines().index(f"{where}: {'9' * 5000}") + 1
    col = len(where) + 3
    assert err == (
        f"kvplan: error: {p}: a YAML value kvplan cannot read at line {line}, column {col}: an integer of 5,000 "
        "digits; at most 4,300\n"
    )


def test_a_workload_integer_over_4300_digits_is_one_line(cli, tmp_path):
    p = tmp_path / "w.yaml"
    p.write_text(f"name: w\nnotes: {'1' * 4301}\nclasses:\n  - {{name: c, concurrency: 1, tokens: 4k}}\n")
    code, out, err = cli("fleet", "llama3-8b", "--workload", p, "--gpu", "h100")
    assert (code, out) == (2, "")
    assert (
        err
        == f"kvplan: error: {p}: a YAML value kvplan cannot read at line 2, column 8: an integer of 4,301 digits; at most 4,300\n"
    )


def test_yaml_1_1_sexagesimal_numbers_are_strings_not_minutes(cli, tmp_path):
    # YAML 1.1 reads 1:30 as 1 × 60 + 30 = 90 (PyYAML's SafeLoader does); kvplan's loader keeps it a string
    p = tmp_path / "w.yaml"
    p.write_text("name: w\nclasses:\n  - {name: c, concurrency: 1:30, tokens: 4k}\n")
    code, out, err = cli("fleet", "llama3-8b", "--workload", p, "--gpu", "h100")
    assert (code, out) == (2, "")
    assert err == f"kvplan: error: {p}: classes[0].concurrency='1:30' must be an integer >= 1\n"
    import yaml

    from kvplan.textio import yaml_loader

    assert yaml.safe_load("a: 1:30") == {"a": 90}  # what PyYAML alone does
    values = yaml.load("a: 1:30\nb: 190:20:30.15\nc: 90\nd: 1_000\ne: 0x10\nf: 1.5\ng: .inf", Loader=yaml_loader())
    assert values == {"a": "1:30", "b": "190:20:30.15", "c": 90, "d": 1000, "e": 16, "f": 1.5, "g": float("inf")}


def test_a_yaml_date_that_is_no_date_is_one_line(cli, tmp_path):
    p = tmp_path / "m.yaml"
    p.write_text(f"{SPEC}dtype: bf16\nnotes: 2001-13-45\n")
    code, out, err = cli("estimate", p, "--seq", "4k")
    assert (code, out) == (2, "")
    assert err == f"kvplan: error: {p}: a YAML value kvplan cannot read (ValueError: month must be in 1..12)\n"


# --- one rule for numbers, and text that reaches a terminal or a spreadsheet (issue 20) ----------------


@pytest.mark.parametrize(
    "args, flag, value",
    [
        (["fit", "llama3-8b", "--gpu", "h100", "--tp", "٤"], "--tp", "٤"),  # ARABIC-INDIC DIGIT FOUR: int() reads 4
        (["fit", "llama3-8b", "--gpu", "h100", "--tensor-parallel-size=٤"], "--tensor-parallel-size", "٤"),
        (["estimate", "llama3-8b", "--seq", "1k", "--batch", "４"], "--batch", "４"),  # FULLWIDTH DIGIT FOUR
        (["fit", "llama3-8b", "--gpu", "h100", "--gpu-memory-utilization", "٠.٩"], "--gpu-memory-utilization", "٠.٩"),
        (["sweep", "llama3-8b", "--seq", "4k", "--gpu", "h100", "--tp", "1,٢"], "--tp", "1,٢"),
        (["estimate", "llama3-8b", "--seq", "٤k"], "--seq", "٤k"),
        (["fit", "llama3-8b", "--gpu", "h100", "--kv-cache-memory", "٤GiB"], "--kv-cache-memory", "٤GiB"),
        (["fit", "llama3-8b", "--gpu", "h100", "-e", "llamacpp", "--engine-version", "b٥٠٠٠"], "--engine-version", "b٥٠٠٠"),
        (["fleet", "llama3-8b", "--concurrency", "2", "--seq", "1k", "--gpu", "h100", "--price", "h100=٢"], "--price", "h100=٢"),
    ],
)  # fmt: skip
def test_numbers_are_ascii_digits_for_every_flag(cli, args, flag, value):
    assert int("٤") == 4 and float("٠.٩") == 0.9  # what click's int and float types would have read
    code, out, err = cli(*args)
    assert (code, out) == (2, "")
    assert err == f"kvplan: error: {flag}: {value!r}: numbers are written in ASCII digits (0-9) here\n"


def test_a_workload_token_count_in_other_digits_is_refused(cli, tmp_path):
    p = tmp_path / "w.yaml"
    p.write_text("classes:\n  - {name: c, concurrency: 2, tokens: ٤k}\n", encoding="utf-8")
    code, out, err = cli("fleet", "llama3-8b", "--workload", p, "--gpu", "h100")
    assert (code, err) == (
        2,
        f"kvplan: error: {p}: classes[0].tokens: '٤k': numbers are written in ASCII digits (0-9) here\n",
    )


def _spec_named(tmp_path, name: str):
    p = tmp_path / "m.yaml"
    p.write_text(f"name: {name!r}\nsource: test\nnum_layers: 2\nnum_q_heads: 8\nnum_kv_heads: 8\nhead_dim: 128\n"
                 "dtype: bf16\nmax_model_len: 4096\nparam_count: 1000000\n")  # fmt: skip
    return p


@pytest.mark.parametrize("name", ['=HYPERLINK("http://x","y")', "+1", "-2+3", "@SUM(A1)"])
def test_sweep_csv_quotes_a_name_a_spreadsheet_would_run(cli, tmp_path, name):
    # OWASP "CSV injection": a cell starting with = + - @ (or tab, CR) is run as a formula; a leading ' shows text
    import csv
    import io

    code, out, err = cli("sweep", _spec_named(tmp_path, name), "--seq", "1k", "--gpu", "h100", "--csv")
    assert code == 0, err
    rows = list(csv.DictReader(io.StringIO(out)))
    assert rows[0]["model"] == "'" + name
    assert rows[0]["seq"] == "1024"  # numbers are left alone


def test_fleet_csv_quotes_names_too(cli, tmp_path):
    import csv
    import io

    code, out, err = cli("fleet", _spec_named(tmp_path, "=1+1"), "--concurrency", "2", "--seq", "1k", "--gpu", "h100",
                         "--tp", "1", "--csv")  # fmt: skip
    assert code == 0, err
    row = next(csv.DictReader(io.StringIO(out)))
    assert row["gpu"] == "h100-sxm-80gb" and row["tensor_parallel_size"] == "1"
    from kvplan.render import csv_cell

    assert (csv_cell("=1+1"), csv_cell("\t=1"), csv_cell("llama"), csv_cell(-1)) == ("'=1+1", "'\t=1", "llama", -1)


@pytest.mark.parametrize(
    "cell, written",
    [
        # kvplan's own flag lists and plain numbers are written as they are (they were quoted: '--tensor-...)
        ("--tensor-parallel-size 2 --pipeline-parallel-size 2", "--tensor-parallel-size 2 --pipeline-parallel-size 2"),
        ("-tp 2", "-tp 2"),
        ("-0.5", "-0.5"),
        ("+3", "'+3"),  # a spreadsheet would show 3
        # a formula or DDE payload, even one that starts like a flag or a number, is quoted
        ("-cmd|' /C calc'!A0", "'-cmd|' /C calc'!A0"),
        ("-2+3+cmd|' /C calc'!A0", "'-2+3+cmd|' /C calc'!A0"),
        ("-2+3", "'-2+3"),
        ('--x=HYPERLINK("http://x")', '\'--x=HYPERLINK("http://x")'),
        ("@SUM(A1)", "'@SUM(A1)"),
        ("-", "'-"),
    ],
)
def test_csv_quotes_formulas_not_flags_or_numbers(cell, written):
    from kvplan.render import csv_cell

    assert csv_cell(cell) == written


def test_fleet_csv_writes_its_parallel_flags_as_they_are(cli):
    import csv
    import io

    code, out, err = cli("fleet", "llama3.1-70b", "--concurrency", "64", "--seq", "8k", "--gpu", "h100", "--tp", "2",
                         "--pp", "2", "--csv")  # fmt: skip
    assert code == 0, err
    row = next(csv.DictReader(io.StringIO(out)))
    assert row["parallel_flags"] == "--tensor-parallel-size 2 --pipeline-parallel-size 2"


@pytest.mark.parametrize("command", [["sweep", "--seq", "1k", "--gpu", "h100"], ["compare", "--seq", "1k"],
                                     ["fleet", "--concurrency", "2", "--seq", "1k", "--gpu", "h100"]])  # fmt: skip
def test_brackets_in_a_name_are_text_not_rich_markup(cli, tmp_path, command):
    # rich read "[/x]" as a closing tag (MarkupError, a traceback) and "[red]" as a colour
    p = _spec_named(tmp_path, "m[/x][red]")
    code, out, err = cli(command[0], p, *command[1:])
    assert code == 0, err
    assert "m[/x][red]" in out


def test_workload_names_with_control_characters_are_refused(cli, tmp_path):
    p = tmp_path / "w.yaml"
    p.write_text('name: w\nclasses:\n  - {name: "c\\e[31mred", concurrency: 1, tokens: 4k}\n')
    code, out, err = cli("fleet", "llama3-8b", "--workload", p, "--gpu", "h100")
    assert (code, out) == (2, "")
    assert err == f"kvplan: error: {p}: classes[0].name='c\\x1b[31mred' must be one line of printable text\n"
    p.write_text('name: "w\\nx"\nclasses:\n  - {name: c, concurrency: 1, tokens: 4k}\n')
    code, out, err = cli("fleet", "llama3-8b", "--workload", p, "--gpu", "h100")
    assert (code, err) == (2, f"kvplan: error: {p}: name='w\\nx' must be one line of printable text\n")


def test_printable_escapes_what_would_move_the_cursor():
    from kvplan.units import printable

    assert printable("a\nb\x1b[31m.png") == "a\\nb\\x1b[31m.png"
    assert printable("plain é ü 模型.png") == "plain é ü 模型.png"


@pytest.mark.parametrize(
    "args, line",
    [
        (["estimate", "llama3-8b", "--seq", "9" * 4000],
         "--seq: '99999999999999999999…9999' (4,000 digits) is not a token count; use e.g. 4096, 32k or 128k (k = 1024)"),
        (["fit", "llama3-8b", "--gpu", "h100", "--kv-cache-memory", "x" * 4000],
         "--kv-cache-memory: 'xxxxxxxxxxxxxxxxxxxx…xxxx' (4,000 characters) is not a size; use bytes or a unit: GB "
         "(10^9), GiB (2^30), MB, MiB, TB, TiB"),
    ],
)  # fmt: skip
def test_a_long_value_is_echoed_by_its_ends_and_length(cli, args, line):
    # a 4,000-character value was echoed whole (cut only at 2,000 characters of message)
    code, out, err = cli(*args)
    assert (code, out, err) == (2, "", f"kvplan: error: {line}\n")


@pytest.mark.skipif(sys.gettrace() is not None, reason="a tracer (coverage, a debugger) is already installed")
@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm", "llamacpp"])
def test_the_advice_of_a_plan_that_does_not_fit_reuses_the_per_layer_work(engine):
    # A 10,000-layer model on an L4 does not fit; the advice (fit.suggest) plans it at every TP and catalog GPU,
    # about 140 plans. Each plan's per-layer work (vLLM's KV cache groups, the engines' bytes per token, llama.cpp's
    # cache rows) is computed once per spec and TP and reused: the whole advice costs a few plans' work, not ~120x
    # a plan as before (llama.cpp: 11x, its -fit and largest -c searches also repeated it).
    from kvplan import api
    from kvplan.fit import DoesNotFit, plan_fit, require_fit
    from kvplan.gpus import get_gpu
    from kvplan.specs import build_spec

    data = dict(name="big", source="test", num_layers=10_000, num_q_heads=8, num_kv_heads=8, head_dim=128,
                dtype="bf16", max_model_len=1 << 20, param_count=10**9)  # fmt: skip
    # max_model_len given: without it SGLang serves the length its pool holds (max_req_len) and starts
    opts, gpu = api.fit_options(engine=engine, max_model_len=1 << 20), get_gpu("l4")

    def advice():
        with pytest.raises(DoesNotFit):
            require_fit(build_spec(data, "big.yaml"), gpu, opts)

    one = _traced_events(lambda: plan_fit(build_spec(data, "big.yaml"), gpu, opts))
    assert _traced_events(advice) <= 8 * one


LLAMA_CONFIG = "tests/fixtures/hf_configs/llama3.1-8b.json"


@pytest.mark.parametrize(
    "renamed, message",
    [
        # a case-only misspelling: was read as absent, H_kv = H_q (the MHA default), 2 GiB at 4k instead of 0.5 GiB
        ("Num_Key_Value_Heads", "unknown key 'Num_Key_Value_Heads' (did you mean 'num_key_value_heads'?); a "
         "misspelt key is not guessed"),
        # Falcon's name of the same field (FalconConfig attribute_map: num_kv_heads <- n_head_kv) in a llama config
        ("n_head_kv", "unknown key 'n_head_kv': another family's name of 'num_key_value_heads', which the llama "
         "reader reads (did you mean 'num_key_value_heads'?); a misspelt key is not guessed"),
        ("NUM_HIDDEN_LAYERS", "unknown key 'NUM_HIDDEN_LAYERS' (did you mean 'num_hidden_layers'?)"),
    ],
)  # fmt: skip
def test_a_key_in_another_case_or_another_familys_name_is_refused(cli, tmp_path, renamed, message):
    import json
    from pathlib import Path

    src = json.loads((Path(__file__).resolve().parent.parent / LLAMA_CONFIG).read_text())
    original = renamed.lower() if renamed.lower() in src else "num_key_value_heads"
    assert src["num_key_value_heads"] == 8 and src["num_attention_heads"] == 32  # the fixture's GQA (0.5 GiB at 4k)
    p = tmp_path / "config.json"
    p.write_text(json.dumps({(renamed if k == original else k): v for k, v in src.items()}))
    code, out, err = cli("estimate", p, "--seq", "4k")
    assert (code, out, err.count("\n")) == (2, "", 1), err
    assert err.startswith(f"kvplan: error: {p}: {message}")


def test_a_key_given_twice_is_refused_in_yaml_and_json(cli, tmp_path):
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    spec = tmp_path / "s.yaml"
    text = (root / "model_specs" / "llama3-8b.yaml").read_text()
    first = 1 + text.splitlines().index("num_layers: 32")
    spec.write_text(text + "num_layers: 64\n")
    last = len(spec.read_text().splitlines())
    code, out, err = cli("estimate", spec, "--seq", "4k")
    assert (code, out) == (2, "") and err == (
        f"kvplan: error: {spec}: duplicate key 'num_layers' at line {last} (first at line {first}); which value is "
        "meant is not guessed\n"
    )
    cfg = tmp_path / "config.json"
    lines = (root / LLAMA_CONFIG).read_text().rstrip().rstrip("}").rstrip()
    cfg.write_text(lines + ',\n  "num_key_value_heads": 32\n}\n')
    code, out, err = cli("estimate", cfg, "--seq", "4k")
    assert (code, out) == (2, "") and err == (
        f"kvplan: error: {cfg}: duplicate key 'num_key_value_heads' in a JSON object; which value is meant is not "
        "guessed\n"
    )
    wl = tmp_path / "w.yaml"
    wl.write_text("name: w\nclasses:\n  - {name: c, concurrency: 1, tokens: 4k, tokens: 8k}\n")
    code, _, err = cli("fleet", "llama3-8b", "--workload", wl, "--gpu", "h100")
    assert code == 2 and err.startswith(f"kvplan: error: {wl}: duplicate key 'tokens' at line 3 (first at line 3)")


@pytest.mark.parametrize(
    "where, value, shown",
    [("model_type", ["llama"], '["llama"]'), ("model_type", {"a": 1}, '{"a": 1}'), ("model_type", 5, "5"),
     ("text_config.model_type", ["x"], '["x"]')],
)  # fmt: skip
def test_a_model_type_that_is_not_a_name_is_one_line(cli, tmp_path, where, value, shown):
    import json
    from pathlib import Path

    config = json.loads((Path(__file__).resolve().parent.parent / LLAMA_CONFIG).read_text())
    if where == "model_type":
        config["model_type"] = value
    else:
        config["text_config"] = {"model_type": value}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(config))
    code, out, err = cli("estimate", p, "--seq", "4k")
    assert (code, out) == (2, "")
    assert err == f'kvplan: error: {p}: {where}={shown} must be a string (a model type, e.g. "llama")\n'
