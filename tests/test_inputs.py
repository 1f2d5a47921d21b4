"""Inputs that used to break the error contract or print a number a user could act on wrongly."""

from __future__ import annotations

import time

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
    start = time.monotonic()
    code, out, err = cli("estimate", name, "--seq", "1")
    assert time.monotonic() - start < 1
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
    start = time.monotonic()
    code, out, err = cli(*args)
    assert time.monotonic() - start < 1
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

    start = time.perf_counter()
    with pytest.raises(SpecError, match=r"c\.json: num_hidden_layers=2000000000 is more layers than kvplan handles"):
        spec_from_hf_config({"model_type": model_type, "num_hidden_layers": 2_000_000_000}, "c.json")
    assert time.perf_counter() - start < 0.5


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


@pytest.mark.parametrize("extra", ["", "num_kv_shared_layers: 50000\n", "layers: {default: full, rules: []}\n"])
def test_a_100_000_layer_spec_is_built_in_under_a_second(cli, tmp_path, extra):
    p = tmp_path / "big.yaml"
    p.write_text(
        "name: big\nsource: test\nnum_layers: 100000\nnum_q_heads: 8\nnum_kv_heads: 8\nhead_dim: 128\n"
        f"dtype: bf16\nmax_model_len: 4096\n{extra}"
    )
    start = time.perf_counter()
    code, out, err = cli("estimate", p, "--seq", "4k")
    assert time.perf_counter() - start < 1
    assert code == 0, err
    kept = 50_000 if extra.startswith("num_kv") else 100_000
    assert f"KV cache: {kept * 2 * 8 * 128 * 2 * 4096:,} B" in out


def test_parse_tokens_comma_is_not_a_thousands_separator():
    from kvplan.errors import UsageError
    from kvplan.units import parse_tokens

    assert parse_tokens("32_768") == 32768
    with pytest.raises(UsageError, match="comma is not a thousands separator"):
        parse_tokens("32,768", "--context")
