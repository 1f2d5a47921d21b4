"""Pasted engine command lines (issue 16): ``kvplan fit [kvplan flags] -- <the engine's launch command>``.

The flag lists checked here are the engines' own parsers' (tests/fixtures/engine_flags.json, written by
scripts/engine_flags.py from vLLM 0.33.0's and SGLang 0.5.23's argparse parsers and llama.cpp 0c1e57098's
common/arg.cpp; TensorRT-LLM's serve.py click options transcribed). Value rules asserted are the engines'
(vLLM's human_readable_int: ``16k`` = 16,000, its docstring's own examples).
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from kvplan import cmdline
from kvplan.errors import UsageError

ROOT = Path(__file__).resolve().parent.parent
FLAGS = json.loads((ROOT / "tests" / "fixtures" / "engine_flags.json").read_text())
HF = ROOT / "tests" / "fixtures" / "hf_configs"
ISSUE = (
    "vllm", "serve", "meta-llama/Llama-3.1-70B-Instruct", "--tensor-parallel-size", "8", "--max-model-len", "32768",
    "--kv-cache-dtype", "fp8", "--trust-remote-code", "--enable-expert-parallel",
)  # fmt: skip


@pytest.fixture(autouse=True)
def offline(tmp_path, monkeypatch):
    """No Hugging Face cache and no Hub: repo ids resolve only to bundled specs (and known tunes of them)."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-empty"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def fit_json(cli, *args):
    code, out, err = cli("fit", "--json", *args)
    assert code == 0, err
    return json.loads(out), err


def _without_model(d):
    if isinstance(d, dict):  # the model's name, and the notes that name it
        return {k: _without_model(v) for k, v in d.items() if k not in ("model", "load_notes")}
    if isinstance(d, list):
        return [_without_model(v) for v in d]
    return d


def same_plan(a: dict, b: dict) -> None:
    """Two fit JSONs equal but for the model's name."""
    assert _without_model(a) == _without_model(b)


def one_line_error(code, out, err, *parts):
    assert code == 2 and out == ""
    assert err.startswith("kvplan: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err
    for p in parts:
        assert p in err, err


# --- every flag of every parser is classified ----------------------------------------------------------------


def _fixture_flags(engine: str, tool: str | None = None):
    section = FLAGS[engine]
    return section["tools"][tool] if tool else section["flags"]


@pytest.mark.parametrize(
    "engine, tool, letter",
    [("vllm", None, ""), ("sglang", None, ""), ("trtllm", None, ""), ("llamacpp", "llama-server", "s"),
     ("llamacpp", "llama-cli", "c")],
)  # fmt: skip
def test_every_flag_of_the_engines_parser_is_in_the_table(engine, tool, letter):
    table = [f for f in cmdline.flags(engine) if not letter or letter in f.tools]
    by_name = {s: f for f in table for s in f.spellings}
    fixture = _fixture_flags(engine, tool)
    assert len(fixture) == len(table)
    for entry in fixture:
        accepted = set(entry.get("accepted") or [*entry["options"], *entry["negatives"]])
        f = by_name[entry["options"][0]]
        assert set(f.spellings) == accepted, entry
        assert f.negatives == frozenset(entry["negatives"]), entry
        assert f.takes == entry["takes"], entry
        assert f.kind in "-!=", entry


def test_the_fixture_says_which_versions():
    assert FLAGS["vllm"]["version"] == "0.33.0"
    assert FLAGS["sglang"]["version"] == "0.5.23"
    assert FLAGS["llamacpp"]["version"] == "0c1e57098bba43ac29e6e3b677cdceebdd22334f"
    assert FLAGS["trtllm"]["version"].startswith("main@00209af1")
    # a few flags the issue names, as each parser spells them
    vllm = {s for f in FLAGS["vllm"]["flags"] for s in f["accepted"]}
    assert {"--trust-remote-code", "--enable-expert-parallel", "-ep", "--speculative-config", "-sc"} <= vllm
    assert "--no-enable-prefix-caching" in vllm  # EnableDisableAction's hidden negative
    trt = {s for f in FLAGS["trtllm"]["flags"] for s in f["options"]}
    assert {"--max_batch_size", "--kv_cache_free_gpu_memory_fraction", "--max_num_tokens"} <= trt


def test_every_class_names_a_known_reason_or_handler():
    for table in cmdline.TABLES:
        for f in cmdline.flags(table):
            if f.kind == "!":
                assert f.arg in cmdline.REASONS["*"] or f.arg in cmdline.REASONS.get(table, {}), f
            elif f.kind == "=":
                assert f.arg.split(":")[0] in cmdline.HANDLERS, f


def test_classes_that_matter():
    def kind(table, name):
        return next(f for f in cmdline.flags(table) if name in f.spellings).kind

    for name in ("--host", "--port", "--served-model-name", "--trust-remote-code", "--api-key", "--seed",
                 "--chat-template", "--tokenizer", "--download-dir", "--uvicorn-log-level"):  # fmt: skip
        assert kind("vllm", name) == "-", name
    for name in (
        "--enable-lora",
        "--cpu-offload-gb",
        "--kv-transfer-config",
        "--hf-overrides",
        "--num-gpu-blocks-override",
    ):
        assert kind("vllm", name) == "!", name
    for name in ("--tensor-parallel-size", "--max-model-len", "--kv-cache-dtype", "--gpu-memory-utilization",
                 "--enforce-eager", "--speculative-config", "--enable-expert-parallel", "--data-parallel-size"):  # fmt: skip
        assert kind("vllm", name) == "=", name
    assert kind("sglang", "--mem-fraction-static") == "=" and kind("sglang", "--enable-hierarchical-cache") == "!"
    assert kind("llamacpp", "-c") == "=" and kind("llamacpp", "--lora") == "!" and kind("llamacpp", "--port") == "-"
    assert kind("trtllm", "--kv_cache_free_gpu_memory_fraction") == "=" and kind("trtllm", "--max_beam_width") == "!"


# --- the issue's command --------------------------------------------------------------------------------------


def test_the_issues_command_gives_the_plan_of_the_same_kvplan_flags(cli):
    pasted, err = fit_json(cli, "--gpu", "h100", "--", *ISSUE)
    plain, _ = fit_json(
        cli, "llama3.1-70b", "--gpu", "h100", "--tp", "8", "--max-model-len", "32768", "--kv-dtype", "fp8",
        "--enable-expert-parallel",
    )
    same_plan(pasted, plain)
    assert pasted["max_model_len"] == 32768 and pasted["tensor_parallel_size"] == 8
    assert "kvplan: note: ignored (no effect on memory): --trust-remote-code\n" in err
    assert (
        "meta-llama/Llama-3.1-70B-Instruct: the geometry of bundled llama3.1-70b (an instruct tune has the base "
        "model's config.json; its own config.json not checked here; HF_HUB_OFFLINE is set)"
    ) in err
    # vLLM takes the flag for a dense model and it changes nothing (no fused-MoE layer to split)
    assert "--enable-expert-parallel: no effect: meta-llama/Llama-3.1-70B-Instruct has no routed experts" in err


def test_kvplan_flags_go_before_the_dashes(cli):
    a, _ = fit_json(cli, "--gpu", "h100", "--kv-cache-memory", "40GiB", "--", *ISSUE)
    b, _ = fit_json(cli, "llama3.1-70b", "--gpu", "h100", "--kv-cache-memory", "40GiB", "--tp", "8",
                    "--max-model-len", "32768", "--kv-dtype", "fp8", "--enable-expert-parallel")  # fmt: skip
    same_plan(a, b)


def test_the_command_quoted_as_one_argument(cli):
    a, _ = fit_json(cli, "--gpu", "h100", "--", " ".join(ISSUE))
    b, _ = fit_json(cli, "--gpu", "h100", "--", *ISSUE)
    assert a == b


# --- each engine's command ------------------------------------------------------------------------------------

EXAMPLES = [
    (  # python -m vllm.entrypoints.openai.api_server --model X (FlexibleArgumentParser: underscores read as dashes)
        ["python", "-m", "vllm.entrypoints.openai.api_server", "--model", "meta-llama/Llama-3.1-8B", "--max_model_len",
         "8192", "--gpu-memory-utilization", "0.85", "--max-num-seqs", "64", "--enforce-eager", "--port", "8000"],
        ["llama3.1-8b", "--max-model-len", "8192", "--gpu-memory-utilization", "0.85", "--max-num-seqs", "64",
         "--enforce-eager"],
    ),
    (
        ["vllm", "serve", "llama3.1-8b", "-tp", "2", "--block-size", "32", "--no-enable-prefix-caching",
         "--max-num-batched-tokens", "4096", "--no-async-scheduling", "--kv-cache-memory-bytes", "20G"],
        ["llama3.1-8b", "--tp", "2", "--block-size", "32", "--no-enable-prefix-caching", "--max-num-batched-tokens",
         "4096", "--no-async-scheduling", "--kv-cache-memory", str(20 << 30)],
    ),
    (
        ["python3", "-m", "sglang.launch_server", "--model-path", "meta-llama/Llama-3.1-8B", "--tp-size", "2",
         "--context-length", "32768", "--mem-fraction-static", "0.8", "--chunked-prefill-size", "4096", "--host",
         "0.0.0.0", "--port", "30000", "--trust-remote-code"],
        ["llama3.1-8b", "--engine", "sglang", "--tp", "2", "--max-model-len", "32768", "--gpu-memory-utilization",
         "0.8", "--max-num-batched-tokens", "4096"],
    ),
    (
        ["sglang", "serve", "gpt-oss-20b", "--disable-hybrid-swa-memory", "--kv-cache-dtype", "fp8_e4m3"],
        ["gpt-oss-20b", "--engine", "sglang", "--swa-full", "--kv-dtype", "fp8_e4m3"],
    ),
    (
        ["/opt/llama.cpp/build/bin/llama-server", "-m", "llama3.1-8b", "-c", "32768", "-np", "4", "-ngl", "99", "-fa",
         "on", "-ctk", "q8_0", "-ctv", "q8_0", "--host", "0.0.0.0", "--port", "8080", "--jinja"],
        ["llama3.1-8b", "--engine", "llamacpp", "--ctx-size", "32768", "--parallel", "4", "--flash-attn", "on",
         "--cache-type-k", "q8_0", "--cache-type-v", "q8_0"],
    ),
    (
        ["llama-cli", "-m", "llama3.1-8b", "--ctx_size", "8192", "-ub", "256", "-b", "1024", "-p", "hello"],
        ["llama3.1-8b", "--engine", "llamacpp", "--llama-tool", "cli", "--ctx-size", "8192",
         "--max-num-batched-tokens", "256", "--batch-size", "1024"],
    ),
    (
        ["trtllm-serve", "meta-llama/Llama-3.1-8B", "--max_batch_size", "64", "--max_num_tokens", "4096",
         "--max_seq_len", "16384", "--kv_cache_free_gpu_memory_fraction", "0.85", "--tp_size", "2", "--host",
         "0.0.0.0"],
        ["llama3.1-8b", "--engine", "trtllm", "--max-batch-size", "64", "--max-num-batched-tokens", "4096",
         "--max-model-len", "16384", "--gpu-memory-utilization", "0.85", "--tp", "2"],
    ),
]  # fmt: skip


@pytest.mark.parametrize("command, flags", EXAMPLES, ids=lambda x: " ".join(x[:3]) if isinstance(x, list) else "")
def test_each_engines_command_gives_the_plan_of_the_same_kvplan_flags(cli, command, flags):
    a, _ = fit_json(cli, "--gpu", "h100", "--", *command)
    b, _ = fit_json(cli, *flags, "--gpu", "h100")
    same_plan(a, b)


def test_vllm_reads_suffixes_its_own_way(cli):
    # vLLM's human_readable_int: '1k' -> 1,000, '1K' -> 1,024 (utils/argparse_utils.py docstring); kvplan's 16k is 16,384
    a, _ = fit_json(cli, "--gpu", "h100", "--", "vllm", "serve", "llama3.1-8b", "--max-model-len", "16k")
    b, _ = fit_json(cli, "--gpu", "h100", "--", "vllm", "serve", "llama3.1-8b", "--max-model-len", "16K")
    assert (a["max_model_len"], b["max_model_len"]) == (16000, 16384)
    code, out, err = cli("fit", "--gpu", "h100", "--", "vllm", "serve", "llama3.1-8b", "--max-model-len", "auto")
    one_line_error(code, out, err, "--max-model-len auto: vLLM's auto-fit")


def test_argparse_abbreviations_and_dotted_json(cli):
    a, _ = fit_json(cli, "--gpu", "h100", "--", "vllm", "serve", "llama3.1-8b", "--max-model", "8192")
    assert a["max_model_len"] == 8192
    code, out, err = cli("fit", "--gpu", "h100", "--", "vllm", "serve", "llama3.1-8b", "--max-num", "8")
    one_line_error(code, out, err, "--max-num: ambiguous abbreviation for vLLM 0.33")


# --- ignored, refused, unknown ---------------------------------------------------------------------------------


def test_flags_without_memory_effect_are_listed_in_one_note(cli):
    code, _, err = cli("fit", "--gpu", "h100", "--", "vllm", "serve", "llama3.1-8b", "--trust-remote-code", "--port",
                       "8001", "--served-model-name", "m", "--cpu-offload-gb", "0")  # fmt: skip
    assert code == 0
    notes = [x for x in err.splitlines() if x.startswith("kvplan: note: ignored")]
    assert notes == [
        "kvplan: note: ignored (no effect on memory): --trust-remote-code, --port, --served-model-name, --cpu-offload-gb 0"
    ]


@pytest.mark.parametrize(
    "command, parts",
    [
        (["vllm", "serve", "llama3.1-8b", "--no-such-flag", "1"],
         ["--no-such-flag: not a flag of vLLM 0.33 (vllm serve); kvplan does not know whether it changes memory"]),
        (["python", "-m", "sglang.launch_server", "--model-path", "llama3.1-8b", "--max-model-len", "8192"],
         ["--max-model-len: not a flag of SGLang 0.5.23"]),  # SGLang's is --context-length
        (["llama-server", "-m", "llama3.1-8b", "--max-model-len", "8192"], ["--max-model-len: not a flag of llama.cpp"]),
        (["trtllm-serve", "llama3.1-8b", "--max-batch-size", "8"], ["--max-batch-size: not a flag of TensorRT-LLM"]),
        (["vllm", "serve", "llama3.1-8b", "--enable-lora"],
         ["--enable-lora: vLLM 0.33's flag changes memory (LoRA adapters' weights and buffers) and kvplan does not model it"]),
        (["vllm", "serve", "llama3.1-8b", "--cpu-offload-gb", "4"], ["--cpu-offload-gb: vLLM 0.33's flag changes memory"]),
        (["vllm", "serve", "llama3.1-8b", "--hf-overrides", '{"num_hidden_layers": 2}'], ["--hf-overrides: "]),
        (["trtllm-serve", "llama3.1-8b", "--max_beam_width", "4"], ["--max_beam_width: ", "beam search"]),
        (["llama-server", "-m", "llama3.1-8b", "-ngl", "20"], ["-ngl 20: only part of llama3.1-8b (32 layers"]),
        (["llama-server", "-m", "llama3.1-8b", "--ctx-size=8192"], ["llama.cpp takes no '=' form"]),
        (["llama-server", "-m", "llama3.1-8b", "-fit", "off"], ["-fit off without -c"]),
        (["llama-server", "-hf", "ggml-org/gemma-3-1b-it-GGUF"], ["-hf: ", "give a local GGUF with -m"]),
        (["python", "-m", "sglang.launch_server", "--model-path", "llama3.1-8b", "--cuda-graph-max-bs-decode", "64"],
         ["--cuda-graph-max-bs-decode: SGLang derives its default --mem-fraction-static"]),
        (["python", "-m", "sglang.launch_server", "--model-path", "llama3.1-8b", "--chunked-prefill-size", "-1"],
         ["--chunked-prefill-size -1: chunked prefill off"]),
        (["vllm", "serve", "llama3.1-8b", "--trust-remote-code=1"], ["--trust-remote-code: a switch"]),
        (["docker", "run", "vllm/vllm-openai"], ["docker run: not an engine command kvplan reads"]),
        (["vllm", "serve", "llama3.1-8b", "--json"], ["--json: not a flag of vLLM 0.33 (vllm serve); kvplan's own flags go before '--'"]),
        (["VLLM_USE_V1=1", "vllm", "serve", "x"], ["VLLM_USE_V1=...: an environment variable"]),
        (["vllm", "serve", "--port", "8000"], ["MODEL: the vllm serve command names no model"]),
    ],
)  # fmt: skip
def test_refusals_are_one_line(cli, command, parts):
    code, out, err = cli("fit", "--gpu", "h100", "--", *command)
    one_line_error(code, out, err, *parts)


def test_a_refused_flag_at_the_engines_default_is_accepted(cli):
    a, _ = fit_json(cli, "--gpu", "h100", "--", "vllm", "serve", "llama3.1-8b", "--cpu-offload-gb", "0",
                    "--max-logprobs", "20", "--disable-lora", "--decode-context-parallel-size", "1")  # fmt: skip
    b, _ = fit_json(cli, "llama3.1-8b", "--gpu", "h100")
    same_plan(a, b)
    a, _ = fit_json(cli, "--gpu", "h100", "--", "python", "-m", "sglang.launch_server", "--model-path", "llama3.1-8b",
                    "--mem-fraction-static", "0.8", "--cuda-graph-max-bs-decode", "64")  # fmt: skip
    b, _ = fit_json(cli, "llama3.1-8b", "--engine", "sglang", "--gpu", "h100", "--gpu-memory-utilization", "0.8")
    same_plan(a, b)


def test_sglang_flags_kvplan_is_gaining(cli):
    # mapped to kvplan flags of the same name: passed on once kvplan's fit has them, refused until then
    code, out, err = cli("fit", "--gpu", "h100", "--", "python", "-m", "sglang.launch_server", "--model-path",
                         "llama3.1-8b", "--disable-radix-cache")  # fmt: skip
    from kvplan.cli import _command_for

    names = {o for p in _command_for(["fit"]).commands["fit"].params for o in getattr(p, "opts", ())}
    if "--disable-radix-cache" in names:
        assert code == 0, err
    else:
        one_line_error(
            code, out, err, "--disable-radix-cache: SGLang's flag changes memory and kvplan does not model it yet"
        )


def test_a_setting_given_on_both_sides_is_refused(cli):
    code, out, err = cli("fit", "--gpu", "h100", "--tp", "4", "--", "vllm", "serve", "llama3.1-8b", "-tp", "2")
    one_line_error(code, out, err, "--tp: given to kvplan and set by the vllm serve command (--tp); give it once")


def test_kvplans_model_replaces_the_commands(cli):
    a, err = fit_json(cli, "llama3.1-8b", "--gpu", "h100", "--", "vllm", "serve", "/models/llama-8b", "-tp", "2")
    b, _ = fit_json(cli, "llama3.1-8b", "--gpu", "h100", "--tp", "2")
    assert a == b
    assert "planning llama3.1-8b (given to kvplan) for the command's model /models/llama-8b" in err


def test_revision_goes_with_the_repo_id():
    tool, rest = cmdline.identify(["vllm", "serve", "meta-llama/Llama-3.1-8B", "--revision", "v2"])
    assert cmdline.translate(tool, rest, {"--tp", "--weights-dtype"}).model == "meta-llama/Llama-3.1-8B@v2"
    tool, rest = cmdline.identify(["trtllm-serve", "serve", "acme/x", "--revision=abc"])
    assert (tool, cmdline.translate(tool, rest, set()).model) == (cmdline.TRTLLM, "acme/x@abc")


# --- one --engine ---------------------------------------------------------------------------------------------


def test_a_conflicting_engine_is_one_error(cli):
    code, out, err = cli("fit", "--gpu", "h100", "--engine", "sglang", "--", *ISSUE)
    one_line_error(code, out, err, "--engine sglang: the pasted command is vLLM 0.33's (vllm serve)")
    a, _ = fit_json(cli, "--gpu", "h100", "--engine", "vllm", "--", *ISSUE)
    b, _ = fit_json(cli, "--gpu", "h100", "--", *ISSUE)
    assert a == b


def test_engine_given_twice(cli):
    # before: the alias rewrite read the first (vllm) and click the last (sglang), so --mem-fraction-static
    # (SGLang's) passed the check and was applied to a plan made under another engine's reading
    code, out, err = cli("fit", "llama3.1-8b", "--gpu", "h100", "--engine", "vllm", "--engine", "sglang",
                         "--mem-fraction-static", "0.8")  # fmt: skip
    one_line_error(code, out, err, "--engine: given twice with different engines (vllm, sglang); give one")
    code, out, err = cli("fit", "llama3.1-8b", "--gpu", "h100", "-e", "sglang", "--engine", "vllm")
    one_line_error(code, out, err, "(sglang, vllm)")
    a, _ = fit_json(cli, "llama3.1-8b", "--gpu", "h100", "--engine", "sglang", "--engine", "SGLang")
    b, _ = fit_json(cli, "llama3.1-8b", "--gpu", "h100", "--engine", "sglang")
    assert a == b


# --- speculative decoding --------------------------------------------------------------------------------------


def test_speculative_config_json(cli):
    base = ("--gpu", "h100", "--", "vllm", "serve", "qwen3-next-80b-a3b", "-tp", "4")
    a, err = fit_json(cli, *base, "--speculative-config", '{"method": "ngram", "num_speculative_tokens": 4, '
                      '"prompt_lookup_max": 4}')  # fmt: skip
    b, _ = fit_json(cli, "qwen3-next-80b-a3b", "--gpu", "h100", "--tp", "4", "--num-speculative-tokens", "4")
    same_plan(a, b)
    assert "--speculative-config.prompt_lookup_max" in err
    c, _ = fit_json(
        cli, *base, "--speculative-config.method", "ngram", "--speculative-config.num_speculative_tokens", "4"
    )
    d, _ = fit_json(cli, *base, "--spec-method", "ngram", "--spec-tokens", "4")
    assert a == c == d


def test_speculative_draft_model_loads_as_a_model(cli):
    a, _ = fit_json(cli, "--gpu", "h100", "--", "vllm", "serve", "llama3.1-8b", "-sc",
                    '{"model": "llama3.2-1b", "num_speculative_tokens": 3}')  # fmt: skip
    b, _ = fit_json(cli, "llama3.1-8b", "--gpu", "h100", "--speculative-model", "llama3.2-1b",
                    "--num-speculative-tokens", "3")  # fmt: skip
    same_plan(a, b)


def test_mtp_needs_the_modules_count_from_kvplan(cli):
    cmd = (
        "vllm",
        "serve",
        "deepseek-v3",
        "-tp",
        "8",
        "--speculative-config",
        '{"method":"mtp","num_speculative_tokens":1}',
    )
    code, out, err = cli("fit", "--gpu", "h200", "--", *cmd)
    one_line_error(code, out, err, "method mtp: the model's own MTP modules", "--num-mtp-layers N before '--'")
    a, _ = fit_json(cli, "--gpu", "h200", "--num-mtp-layers", "1", "--", *cmd)
    b, _ = fit_json(
        cli, "deepseek-v3", "--gpu", "h200", "--tp", "8", "--num-mtp-layers", "1", "--num-speculative-tokens", "1"
    )
    same_plan(a, b)


@pytest.mark.parametrize(
    "value, parts",
    [
        ('{"method": ngram}', ["--speculative-config: not JSON (Expecting value at column 12)"]),
        ("[1, 2]", ["--speculative-config: a JSON object"]),
        ('{"method": "ngram", "num_speculative_tokens": 2, "bogus": 1}', ["'bogus' is not a key of vLLM 0.33's"]),
        ('{"method": "ngram"}', ["give num_speculative_tokens"]),
        ('{"model": "llama3.2-1b", "num_speculative_tokens": 2, "kv_cache_dtype": "fp8"}',
         ["kv_cache_dtype \"fp8\" changes the drafter's memory"]),
        ('{"method": "eagle3", "model": "llama3.2-1b", "num_speculative_tokens": 2}', ["method eagle3 with model"]),
        ('{"method": "dflash", "model": "x/y", "num_speculative_tokens": 2}', ["method dflash with model"]),
        ('{"model": "llama3.2-1b", "num_speculative_tokens": 2, "draft_tensor_parallel_size": 1}',
         ["draft_tensor_parallel_size 1: kvplan sizes the drafter at the target's TP"]),
    ],
)  # fmt: skip
def test_speculative_config_refusals(cli, value, parts):
    code, out, err = cli(
        "fit", "--gpu", "h100", "--", "vllm", "serve", "llama3.1-8b", "-tp", "2", "--speculative-config", value
    )
    one_line_error(code, out, err, *parts)


def test_spec_shortcut_and_json_key_together_is_vllms_error(cli):
    code, out, err = cli("fit", "--gpu", "h100", "--", "vllm", "serve", "llama3.1-8b", "--spec-tokens", "2",
                         "--speculative-config", '{"method": "ngram", "num_speculative_tokens": 3}')  # fmt: skip
    one_line_error(
        code, out, err, "--spec-tokens and --speculative-config['num_speculative_tokens'] are mutually exclusive"
    )


# --- expert and data parallelism -------------------------------------------------------------------------------


def test_expert_parallel_is_kvplans_expert_parallel(cli):
    a, err = fit_json(
        cli, "--gpu", "h100", "--", "vllm", "serve", "mixtral-8x7b", "-tp", "4", "--enable-expert-parallel"
    )
    b, _ = fit_json(cli, "mixtral-8x7b", "--gpu", "h100", "--tp", "4", "--enable-expert-parallel")
    same_plan(a, b)
    assert (a["expert_parallel_size"], a["parallel_flags"]) == (4, "--tensor-parallel-size 4 --enable-expert-parallel")


def test_experts_that_do_not_divide_are_refused():
    tool, rest = cmdline.identify(["vllm", "serve", "x", "-tp", "4", "--enable-expert-parallel"])
    pasted = cmdline.translate(tool, rest, {"--tp", "--weights-dtype"})
    spec = SimpleNamespace(name="moe6", moe=SimpleNamespace(num_experts=6))
    with pytest.raises(UsageError, match=r"--enable-expert-parallel: moe6's 6 experts do not divide over 4 GPUs"):
        for check in pasted.checks:
            check(spec, 4)
    assert all(check(spec, 2) for check in pasted.checks)  # 6 over 2: a note


def test_data_parallel(cli):
    # vLLM --data-parallel-size D: D engine ranks of TP GPUs, each with its own requests' KV (kvplan's own flag)
    a, err = fit_json(cli, "--gpu", "h100", "--", "vllm", "serve", "llama3.1-8b", "--data-parallel-size", "4")
    b, _ = fit_json(cli, "llama3.1-8b", "--gpu", "h100", "--data-parallel-size", "4")
    same_plan(a, b)
    assert a["data_parallel_size"] == 4
    a, _ = fit_json(cli, "--gpu", "h100", "--", "vllm", "serve", "mixtral-8x7b", "-tp", "4", "-dp", "2")
    b, _ = fit_json(cli, "mixtral-8x7b", "--gpu", "h100", "--tp", "4", "--data-parallel-size", "2")
    same_plan(a, b)


# --- fleet and the other commands -------------------------------------------------------------------------------


def test_fleet_takes_a_command_too(cli):
    code, out, err = cli("fleet", "--concurrency", "100", "--seq", "8k", "--gpu", "h100", "--json", "--", "vllm",
                         "serve", "llama3.1-8b", "-tp", "2", "--kv-cache-dtype", "fp8")  # fmt: skip
    code2, out2, _ = cli("fleet", "llama3.1-8b", "--concurrency", "100", "--seq", "8k", "--gpu", "h100", "--json",
                         "--tp", "2", "--kv-dtype", "fp8")  # fmt: skip
    assert code == code2 == 0, err
    assert json.loads(out) == json.loads(out2)


def test_fleet_takes_the_engines_max_model_len(cli):
    # real launch commands carry --max-model-len (vLLM), --context-length (SGLang): fleet's --max-model-len
    base = ("fleet", "--concurrency", "5000", "--seq", "8k", "--gpu", "h200", "--tp", "1", "--pp", "1", "--json")
    code, out, err = cli(*base, "--", "vllm", "serve", "llama3.1-8b", "--max-model-len", "8192")
    code2, out2, _ = cli(*base, "llama3.1-8b", "--max-model-len", "8192")
    assert code == code2 == 0, err
    assert json.loads(out) == json.loads(out2)
    # SGLang's --context-length sets max_running_requests as fit's --max-model-len does: SGLang 0.5.23
    # min(clamp(int(tokens / context_len x 512), 2048, 4096), tokens // 2), here with fit's token pool
    code, out, err = cli(*base, "--", "python", "-m", "sglang.launch_server", "--model-path", "llama3.1-8b",
                         "--context-length", "131072")  # fmt: skip
    assert code == 0, err
    row = json.loads(out)["layouts"][0]
    fit, _ = fit_json(cli, "llama3.1-8b", "--gpu", "h200", "--engine", "sglang", "--max-model-len", "131072")
    tokens = fit["kv_capacity_tokens"]
    want = min(max(int(tokens / 131072 * 512), 2048), 4096, tokens // 2)
    assert row["max_requests_per_replica"] == fit["max_num_seqs"] == want < 4096  # 4096 at the 8k default
    # a class longer than the command's max_model_len: the engine refuses those requests
    code, out, err = cli("fleet", "--concurrency", "100", "--seq", "16k", "--gpu", "h100", "--", "vllm", "serve",
                         "llama3.1-8b", "--max-model-len", "8192")  # fmt: skip
    one_line_error(code, out, err, "--max-model-len 8,192: requests of class requests (16,384 tokens) are longer, "
                   "and the engine refuses them; give a max_model_len of at least 16,384")  # fmt: skip


def test_other_commands_refuse_a_pasted_command(cli):
    code, out, err = cli("sweep", "llama3.1-8b", "--seq", "4k", "--gpu", "h100", "--", "vllm", "serve", "x")
    one_line_error(code, out, err, "'kvplan sweep' does not take an engine command")


# --- instruct and chat tunes ------------------------------------------------------------------------------------


def _geometry(spec):
    from kvplan import calc

    return (
        spec.num_layers, spec.num_q_heads, spec.num_kv_heads, spec.head_dim, tuple(spec.layer_kinds),
        spec.sliding_window, spec.attention_chunk_size, spec.max_model_len, spec.hidden_size,
        calc.estimate(spec, 4096).total_bytes, calc.estimate(spec, spec.max_model_len).total_bytes,
    )  # fmt: skip


CHECKED = {  # the tune's own config.json (tests/fixtures/hf_configs) → the bundled base it maps to
    "google/gemma-2-9b-it": "gemma2-9b-it.json",
    "tiiuae/falcon-40b-instruct": "falcon-40b-instruct-saved.json",
    "meta-llama/Llama-4-Scout-17B-16E-Instruct": "llama4-scout-17b-16e-instruct.json",
}


@pytest.mark.parametrize("repo, config", sorted(CHECKED.items()))
def test_checked_tunes_have_their_bases_geometry(repo, config):
    from kvplan.loader import load_bundled, load_hf_config, load_model
    from kvplan.readers.hub import TUNES

    base, differ, status = TUNES[repo]
    assert (status, differ) == ("checked", {})
    tune = load_model(repo)  # offline, not cached: the bundled base's geometry
    assert _geometry(load_hf_config(HF / config)) == _geometry(load_bundled(base)) == _geometry(tune)
    assert tune.name == repo
    assert any("checked against its config.json" in w for w in tune.warnings)


def test_every_checked_tune_has_a_fixture():
    from kvplan.readers.hub import TUNES

    assert {k for k, v in TUNES.items() if v[2] == "checked"} == set(CHECKED)


def test_tune_with_a_different_context(cli):
    # Qwen2.5-*-Instruct configs say max_position_embeddings 32768 where the base's say 131072 (bundled
    # qwen2.5-7b's notes; maxtext's qwen25_7b_config)
    code, out, err = cli("estimate", "Qwen/Qwen2.5-7B-Instruct", "--seq", "64k")
    assert code == 0
    assert "the geometry of bundled qwen2.5-7b with max_model_len 32,768" in err
    assert "is beyond Qwen/Qwen2.5-7B-Instruct's max context of 32,768 tokens" in err


def test_a_sibling_release_of_the_bundled_one(cli):
    # bundled qwen3-next-80b-a3b is the Thinking release's config.json (its spec's hf_repo and source); the Instruct
    # release resolves to it offline, the warning saying which release was bundled
    from kvplan.loader import load_bundled
    from kvplan.readers.hub import TUNE_RELATION, TUNES

    bundled = load_bundled("qwen3-next-80b-a3b")
    assert bundled.hf_repo == "Qwen/Qwen3-Next-80B-A3B-Thinking"
    assert TUNES["Qwen/Qwen3-Next-80B-A3B-Instruct"] == ("qwen3-next-80b-a3b", {}, "unchecked")
    assert set(TUNE_RELATION) <= set(TUNES)
    code, out, err = cli("estimate", "Qwen/Qwen3-Next-80B-A3B-Instruct", "--seq", "4k", "--json")
    assert code == 0
    assert (
        "Qwen/Qwen3-Next-80B-A3B-Instruct: the geometry of bundled qwen3-next-80b-a3b (bundled from the Thinking "
        "release's config.json; the Instruct and Thinking releases are post-trains of one base, with its config.json; "
        "its own config.json not checked here; HF_HUB_OFFLINE is set)"
    ) in err
    want = json.loads(cli("estimate", "qwen3-next-80b-a3b", "--seq", "4k", "--json")[1])
    got = json.loads(out)
    assert got["model"] == "Qwen/Qwen3-Next-80B-A3B-Instruct" and got["total_bytes"] == want["total_bytes"] > 0


def test_other_ids_are_not_mapped(cli):
    code, out, err = cli("estimate", "meta-llama/Llama-3.1-70B-Instruct-FP8", "--seq", "4k")
    one_line_error(code, out, err, "not a bundled model, and its config.json is not in the Hugging Face cache")
    code, out, err = cli("estimate", "meta-llama/Llama-3.1-70B-Instruct@main", "--seq", "4k")
    assert code == 2  # a revision: its own config.json only


def test_a_cached_tune_config_wins(cli, tmp_path, monkeypatch):
    from tests.test_hub import LLAMA31_8B, add_to_cache

    root = tmp_path / "hf"
    monkeypatch.setenv("HF_HUB_CACHE", str(root))
    add_to_cache(
        root, "meta-llama/Llama-3.1-8B-Instruct", {"config.json": json.dumps({**LLAMA31_8B, "num_hidden_layers": 2})}
    )
    code, out, err = cli("estimate", "meta-llama/Llama-3.1-8B-Instruct", "--seq", "4k", "--json")
    assert code == 0 and "geometry of bundled" not in err
    assert json.loads(out)["total_bytes"] == 2 * 2 * 8 * 128 * 2 * 4096


def test_sglang_expert_and_attention_data_parallelism_are_kvplans(cli):
    # SGLang: --ep-size 8 splits the experts over the 8 TP GPUs; --dp-size 8 with --enable-dp-attention (or
    # --attn-dp-size 8) makes 8 attention groups inside them (srt/runtime_context.py derive_parallel_widths)
    cmd = ("python", "-m", "sglang.launch_server", "--model-path", "deepseek-v3", "--tp", "8", "--ep-size", "8")
    b, _ = fit_json(cli, "deepseek-v3", "--gpu", "h200", "--engine", "sglang", "--tp", "8", "--ep-size", "8",
                    "--data-parallel-size", "8")  # fmt: skip
    for dp in (("--enable-dp-attention", "--dp-size", "8"), ("--attn-dp-size", "8")):
        a, _ = fit_json(cli, "--gpu", "h200", "--", *cmd, *dp)
        same_plan(a, b)
        assert (a["data_parallel_size"], a["expert_parallel_size"]) == (8, 8)
    # --dp-size alone: independent replicas, the plan is one replica's
    a, err = fit_json(cli, "--gpu", "h200", "--", *cmd, "--dp-size", "2")
    assert a["data_parallel_size"] == 1 and "SGLang runs 2 independent replicas" in err


# --- values no engine setting holds (issue 20 audit) ----------------------------------------------------------

_BIG = "9" * 5000


@pytest.mark.parametrize(
    "args, line",
    [
        (["--speculative-config", '{"num_speculative_tokens": ' + _BIG + "}"],
         "--speculative-config: the number 99999999999999999999…9999 (5,000 digits) is beyond any setting kvplan "
         "reads (a finite number below 10^18)"),
        (["--speculative-config.num_speculative_tokens", _BIG],
         "--speculative-config.num_speculative_tokens: the number 99999999999999999999…9999 (5,000 digits) is "
         "beyond any setting kvplan reads (a finite number below 10^18)"),
        (["--hf-overrides.num_hidden_layers", _BIG],
         "--hf-overrides.num_hidden_layers: the number 99999999999999999999…9999 (5,000 digits) is beyond any "
         "setting kvplan reads (a finite number below 10^18)"),
        (["--speculative-config", "[" * 20000],
         "--speculative-config: JSON nested too deep (20,000 characters); give a flat object"),
        (["--speculative-config.num_speculative_tokens", "[" * 20000],
         "--speculative-config.num_speculative_tokens: JSON nested too deep (20,000 characters); give a flat object"),
        (["--speculative-config", '{"num_speculative_tokens": 1e400}'],
         "--speculative-config: the number 1e400 is beyond any setting kvplan reads (a finite number below 10^18)"),
        (["--speculative-config", '{"num_speculative_tokens": NaN}'],
         "--speculative-config: NaN is not a number JSON has; give a finite number"),
        (["--max-model-len", _BIG],
         "--max-model-len: 99999999999999999999…9999 (5,000 digits) is beyond any setting kvplan reads (below 10^18)"),
        # one rule for digits: ASCII only, for integer and fractional flags alike (float('٠.٩') is 0.9)
        (["--gpu-memory-utilization", "٠.٩"],
         "--gpu-memory-utilization: '٠.٩': numbers are written in ASCII digits (0-9) here"),
        (["--tensor-parallel-size", "٤"], "--tensor-parallel-size: '٤': numbers are written in ASCII digits (0-9) here"),
        (["--max-model-len", "٤٠٩٦"], "--max-model-len: '٤٠٩٦': numbers are written in ASCII digits (0-9) here"),
    ],
)  # fmt: skip
def test_pasted_values_beyond_any_setting_are_one_line(cli, args, line):
    code, out, err = cli("fit", "--gpu", "h100", "--", "vllm", "serve", "meta-llama/Meta-Llama-3-8B", *args)
    assert (code, out, err) == (2, "", f"kvplan: error: {line}\n")


def test_pasted_ascii_rule_covers_sglang_and_llamacpp(cli):
    code, _, err = cli("fit", "--gpu", "h100", "--", "python", "-m", "sglang.launch_server", "--model-path",
                       "llama3.1-8b", "--mem-fraction-static", "٠.٨")  # fmt: skip
    line = "kvplan: error: --mem-fraction-static: '٠.٨': numbers are written in ASCII digits (0-9) here\n"
    assert (code, err) == (2, line)
    code, _, err = cli("fit", "--gpu", "h100", "--", "llama-server", "-m", "llama3.1-8b", "-ngl", "٤")
    assert (code, err) == (2, "kvplan: error: -ngl: '٤': numbers are written in ASCII digits (0-9) here\n")
