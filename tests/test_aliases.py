"""vLLM / SGLang / llama.cpp flag spellings as aliases, comma lists, and --help showing kvplan's names."""

from __future__ import annotations

import json

import pytest

from kvplan.aliases import ALIASES


def fit_json(cli, *args):
    code, out, err = cli("fit", *args, "--json")
    assert code == 0, err
    return json.loads(out)


BASE = ("llama3.1-70b", "--gpu", "h100")


@pytest.mark.parametrize(
    "alias, canonical",
    [
        (["--tensor-parallel-size", "4"], ["--tp", "4"]),
        (["-tp", "4"], ["--tp", "4"]),
        (["-tp=4"], ["--tp", "4"]),
        (["--tensor-parallel-size=4"], ["--tp", "4"]),
        (["--tp-size", "4"], ["--tp", "4"]),
        (["--tp", "2", "--pipeline-parallel-size", "2"], ["--tp", "2", "--pp", "2"]),
        (["--tp", "2", "-pp", "2"], ["--tp", "2", "--pp", "2"]),
        (["--tp", "2", "--pp-size", "2"], ["--tp", "2", "--pp", "2"]),
        (["--tp", "4", "--kv-cache-dtype", "fp8"], ["--tp", "4", "--kv-dtype", "fp8"]),
        (["--tp", "4", "--seq", "32k"], ["--tp", "4", "--max-model-len", "32k"]),
        (["--tp", "4", "-s", "32k"], ["--tp", "4", "--max-model-len", "32k"]),
        (["--tp", "4", "--context-length", "32768"], ["--tp", "4", "--max-model-len", "32768"]),
        (["--tp", "4", "--ctx-size", "32768"], ["--tp", "4", "--max-model-len", "32768"]),
        (["--tp", "4", "--dtype", "bfloat16"], ["--tp", "4", "--weights-dtype", "bf16"]),
        # vLLM's --dtype is the model dtype: the weights and (--kv-cache-dtype auto) the KV cache
        (["--tp", "4", "--dtype", "half"], ["--tp", "4", "--weights-dtype", "fp16", "--kv-dtype", "fp16"]),
        (
            ["--tp", "8", "-s", "8k", "--dtype", "float"],
            ["--tp", "8", "-s", "8k", "--weights-dtype", "fp32", "--kv-dtype", "fp32"],
        ),
        (
            ["--tp", "8", "-s", "8k", "--dtype", "float", "--kv-cache-dtype", "fp8"],
            ["--tp", "8", "-s", "8k", "--weights-dtype", "fp32", "--kv-dtype", "fp8"],
        ),
        (
            ["--tp", "4", "--dtype=half", "--kv-dtype", "auto"],
            ["--tp", "4", "--weights-dtype", "fp16", "--kv-dtype", "fp16"],
        ),
        (["--tp", "4", "--dtype", "auto"], ["--tp", "4"]),
        (["--tp", "2", "--quantization", "fp8"], ["--tp", "2", "--weights-dtype", "fp8"]),
        (["--tp", "2", "-q", "awq"], ["--tp", "2", "--weights-dtype", "int4"]),
        (["--tp", "2", "--quantization", "awq_marlin"], ["--tp", "2", "--weights-dtype", "int4"]),
        (["--tp", "2", "--quantization", "modelopt_fp4"], ["--tp", "2", "--weights-dtype", "nvfp4"]),
        # --quantization describes the stored weights; vLLM's --dtype is then the activation dtype
        (["--tp", "2", "--dtype", "bfloat16", "--quantization", "fp8"], ["--tp", "2", "--weights-dtype", "fp8"]),
        (
            ["--tp", "2", "--dtype", "float16", "--quantization", "fp8"],
            ["--tp", "2", "--weights-dtype", "fp8", "--kv-dtype", "fp16"],
        ),
        (["--tp", "4", "--kv-cache-memory-bytes", "16GiB"], ["--tp", "4", "--kv-cache-memory", "16GiB"]),
        (
            ["--tp", "4", "--engine", "sglang", "--mem-fraction-static", "0.8"],
            ["--tp", "4", "--engine", "sglang", "--gpu-memory-utilization", "0.8"],
        ),
        (
            ["--tp", "4", "--engine", "sglang", "--page-size", "16"],
            ["--tp", "4", "--engine", "sglang", "--block-size", "16"],
        ),
    ],
)
def test_fit_aliases_give_the_same_plan(cli, alias, canonical):
    assert fit_json(cli, *BASE, *alias) == fit_json(cli, *BASE, *canonical)


def test_max_num_seqs_where_fit_has_it(cli):
    code, out, _ = cli("fit", "--help")
    if "--max-num-seqs" not in out:
        pytest.skip("fit has no --max-num-seqs yet")
    base = ("llama3-8b", "--gpu", "h100")
    assert fit_json(cli, *base, "--max-running-requests", "64") == fit_json(cli, *base, "--max-num-seqs", "64")


@pytest.mark.parametrize("command", ["estimate", "compare", "verify", "fleet"])
def test_max_model_len_is_accepted_where_the_flag_is_seq(cli, command):
    code, out, err = cli(command, "--help")
    if command == "fleet":  # fleet has the engine's max_model_len as its own flag; alone it is the requests' length
        assert "--seq" in out and "--max-model-len" in out
        base = ("fleet", "llama3-8b", "--concurrency", "100", "--gpu", "h100", "--json")
        for flag in ("--max-model-len", "--context-length"):
            assert cli(*base, flag, "8192")[1] == cli(*base, "--seq", "8192")[1]
        return
    assert "--seq" in out and "--max-model-len" not in out  # --help keeps kvplan's name
    if command == "estimate":
        assert (
            cli("estimate", "llama3-8b", "--max-model-len", "4096", "--json")[1]
            == cli("estimate", "llama3-8b", "--seq", "4096", "--json")[1]
        )
        assert (
            cli("estimate", "llama3-8b", "--context-length", "4096", "--json")[1]
            == cli("estimate", "llama3-8b", "--seq", "4096", "--json")[1]
        )


def test_seq_comma_list_equals_repeating(cli):
    _, a, _ = cli("estimate", "llama3-8b", "--seq", "4k,32k,128k", "--json")
    _, b, _ = cli("estimate", "llama3-8b", "--seq", "4k", "--seq", "32k", "--seq", "128k", "--json")
    _, c, _ = cli("estimate", "llama3-8b", "--seq=4k,32k", "--seq", "128k", "--json")
    assert a == b == c and len(json.loads(a)) == 3


def test_sweep_comma_lists(cli):
    _, a, _ = cli("sweep", "llama3-8b", "--seq", "4k,8k", "--gpu", "h100,l4", "--tp", "1,2", "--json")
    _, b, _ = cli(
        "sweep",
        "llama3-8b",
        "--seq",
        "4k",
        "--seq",
        "8k",
        "--gpu",
        "h100",
        "--gpu",
        "l4",
        "--tp",
        "1",
        "--tp",
        "2",
        "--json",
    )
    assert a == b and len(json.loads(a)) == 8


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["fit", "llama3-8b", "--gpu", "h100", "--mem-fraction-static", "0.8"],
            "kvplan: error: --mem-fraction-static: SGLang's fraction; give it with --engine sglang",
        ),
        (
            ["fit", "llama3-8b", "--gpu", "h100", "--quantization", "bitsandbytes"],
            "kvplan: error: --quantization: kvplan cannot tell the weight bits of 'bitsandbytes'",
        ),
        (["fit", "llama3-8b", "--gpu", "h100", "--dtype", "int3"], "kvplan: error: --dtype: unknown dtype 'int3'"),
        (["compare", "llama3-8b", "--seq", "4k,8k"], "kvplan: error: --seq: one value only for 'kvplan compare'"),
        (["fit", "llama3-8b", "--gpu", "h100,l4"], "kvplan: error: --gpu: one value only for 'kvplan fit'"),
        (["estimate", "llama3-8b", "--seq", "4k,,8k"], "kvplan: error: --seq: empty item in the list '4k,,8k'"),
        # an alias whose target the command lacks is click's to refuse
        (
            ["estimate", "llama3-8b", "--seq", "4k", "--quantization", "fp8"],
            "kvplan estimate: error: No such option: --quantization",
        ),
    ],
)
def test_alias_errors_are_one_line_exit_2(cli, args, message):
    code, out, err = cli(*args)
    assert (code, out) == (2, "")
    assert err.startswith(message) and err.count("\n") == 1


@pytest.mark.parametrize("command", ["estimate", "fit", "fleet", "sweep", "verify", "compare"])
def test_help_shows_kvplan_names_only(cli, command):
    code, out, _ = cli(command, "--help")
    assert code == 0
    engine_only = {a for a in ALIASES if a not in ("--seq", "-s", "--max-model-len", "--max-num-seqs")}
    for alias in engine_only:
        assert f" {alias} " not in out and f" {alias}\n" not in out, alias


def test_values_that_look_like_aliases_are_left_alone(cli):
    # a value after a flag that takes one is never rewritten (here a --kv-dtype value, refused by the dtype check)
    code, out, err = cli("estimate", "llama3-8b", "--seq", "4k", "--kv-dtype", "--dtype")
    assert code == 2 and "--dtype" in err


def test_after_double_dash_nothing_is_rewritten(cli):
    code, out, err = cli("estimate", "--seq", "4k", "--", "-tp")
    assert code == 2  # '-tp' is the MODEL here: an unknown model, not --tp
    assert "unknown model '-tp'" in err


def test_vllm_dtype_float_gives_fp32_weights_and_an_fp32_kv_cache(cli):
    # vLLM 0.33: an explicit --dtype float serves float32 (only 'auto' downcasts a float32 config), and
    # --kv-cache-dtype auto is the model dtype: 32 layers x 2 x 8 KV heads x 128 x 4 B = 262,144 B per token
    r = fit_json(cli, "llama3.1-8b", "--gpu", "h100", "--dtype", "float", "--max-model-len", "8k")
    assert (r["weights_dtype"], r["kv_dtype"], r["kv_bytes_per_token"]) == ("fp32", "fp32", 262_144)
    assert r["weights_bytes"] == 4 * 8_030_000_000
    # a KV dtype given wins, as in vLLM; 'auto' given is the --dtype
    r = fit_json(cli, "llama3.1-8b", "--gpu", "h100", "--dtype", "float", "--kv-cache-dtype", "fp8", "-s", "8k")
    assert (r["weights_dtype"], r["kv_dtype"], r["kv_bytes_per_token"]) == ("fp32", "fp8_e4m3", 65_536)
    r = fit_json(cli, "llama3.1-8b", "--gpu", "h100", "--dtype", "float", "--kv-cache-dtype", "auto", "-s", "8k")
    assert (r["kv_dtype"], r["kv_bytes_per_token"]) == ("fp32", 262_144)


def test_vllm_dtype_half_on_a_bf16_model_caches_fp16(cli):
    r = fit_json(cli, "llama3.1-8b", "--gpu", "h100", "--dtype", "half", "--max-model-len", "8k")
    assert (r["weights_dtype"], r["kv_dtype"], r["kv_bytes_per_token"]) == ("fp16", "fp16", 131_072)
    code, out, err = cli("fit", "llama3.1-8b", "--gpu", "h100", "--dtype", "half", "--max-model-len", "8k")
    assert code == 0 and "KV fp16" in out.splitlines()[0] and "bf16" not in out.splitlines()[0]
    # with --quantization the weights are the checkpoint's, the cache still follows --dtype
    r = fit_json(cli, "llama3.1-8b", "--gpu", "h100", "--dtype", "float16", "--quantization", "fp8", "-s", "8k")
    assert (r["weights_dtype"], r["kv_dtype"]) == ("fp8", "fp16")


def test_vllm_dtype_sets_the_kv_dtype_of_commands_without_weights(cli):
    code, out, err = cli("estimate", "llama3-8b", "--seq", "4k", "--dtype", "float", "--json")
    assert code == 0, err
    assert json.loads(out)["total_bytes"] == 32 * 2 * 8 * 128 * 4 * 4096
    # a --kv-dtype list: each 'auto' is the --dtype
    code, out, err = cli(
        "sweep", "llama3-8b", "--seq", "4k", "--gpu", "h100", "--kv-dtype", "auto,fp8", "--dtype", "float", "--json"
    )
    assert code == 0, err
    assert [r["kv_dtype"] for r in json.loads(out)] == ["fp32", "fp8_e4m3"]


@pytest.mark.parametrize(
    "args, several",
    [
        # the December 2026 trial: estimate was told "'kvplan estimate' and 'kvplan sweep' take several"
        (["estimate", "llama3-8b", "--seq", "4k", "--kv-dtype", "bf16,fp8"], "'kvplan sweep' takes several"),
        (["fit", "llama3-8b", "--gpu", "h100,l4"], "'kvplan fleet', 'kvplan sweep' and 'kvplan plot' take several"),
        (["fit", "llama3-8b", "--gpu", "h100", "--seq", "8k,32k"], "'kvplan estimate' and 'kvplan sweep' take several"),
        (["compare", "llama3-8b", "--seq", "4k,8k"], "'kvplan estimate' and 'kvplan sweep' take several"),
    ],
)
def test_a_list_where_one_value_goes_names_the_commands_that_take_several(cli, args, several):
    code, out, err = cli(*args)
    assert (code, out) == (2, "")
    flag = next(a for a in args if "," in a)
    assert err.endswith(f"(got {flag!r}); {several}\n")
    assert f"'kvplan {args[0]}'" not in err.split(";")[-1]  # never the command that refused it


@pytest.mark.parametrize(
    "command, usage",
    [("estimate", "MODEL..."), ("fit", "[MODEL]"), ("fleet", "MODEL"), ("sweep", "MODEL..."), ("plot", "MODEL..."),
     ("compare", "MODEL"), ("verify", "MODEL")],
)  # fmt: skip
def test_usage_names_the_model_argument_as_click_does(cli, command, usage):
    code, out, _ = cli(command, "--help")
    assert code == 0
    assert out.splitlines()[0] == f"Usage: kvplan {command} [OPTIONS] {usage}"  # not typer's {model}
