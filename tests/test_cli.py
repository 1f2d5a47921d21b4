"""The command line as a user meets it: outputs, JSON keys, one-line errors with exit codes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .conftest import ROOT


def test_estimate_prints_exact_bytes(cli):
    code, out, err = cli("estimate", "llama3-8b", "--seq", "4096")
    assert code == 0, err
    assert "KV cache: 536,870,912 B (0.5 GiB, 0.537 GB)" in out
    assert err == ""


def test_estimate_json_one_object(cli):
    code, out, _ = cli("estimate", "llama3-8b", "--seq", "4096", "--json")
    obj = json.loads(out)
    for key in (
        "model",
        "seq_len",
        "batch_size",
        "kv_dtype",
        "bytes_per_request",
        "total_bytes",
        "total_gib",
        "total_gb",
        "groups",
    ):
        assert key in obj
    assert obj["total_bytes"] == 536_870_912
    assert obj["total_gib"] == 0.5
    assert obj["groups"] == [
        {
            "kind": "full",
            "layers": 32,
            "window": None,
            "tokens_cached": 4096,
            "bytes_per_token": 131_072,
            "state_bytes": 0,
            "bytes": 536_870_912,
        }
    ]


def test_estimate_json_several_seqs_is_a_list_and_k_means_1024(cli):
    code, out, err = cli("estimate", "gpt-oss-20b", "--seq", "4096", "--seq", "128k", "--batch", "2", "--json")
    assert code == 0, err
    objs = json.loads(out)
    assert [o["seq_len"] for o in objs] == [4096, 131072]
    assert [o["total_bytes"] for o in objs] == [2 * 103_809_024, 2 * 3_224_371_200]


def test_beyond_max_context_warns_but_computes(cli):
    code, out, err = cli("estimate", "llama3-8b", "--seq", "16k", "--json")
    assert code == 0
    assert json.loads(out)["total_bytes"] == 16384 * 131_072
    assert err == (
        "kvplan: warning: --seq 16,384 is beyond llama3-8b's max context of 8,192 tokens "
        "(computed anyway: rope scaling may allow it)\n"
    )


def test_estimate_kv_dtype_and_block_size(cli):
    code, out, _ = cli("estimate", "llama3-8b", "--seq", "4097", "--kv-dtype", "q8_0", "--block-size", "16", "--json")
    # q8_0: 69,632 B/token (34 B per 32 elements); 4097 tokens → 4112 in 16-token blocks
    assert json.loads(out)["total_bytes"] == 69_632 * 4112


def test_estimate_hf_config_path(cli):
    code, out, _ = cli("estimate", str(ROOT / "tests/fixtures/hf_configs/deepseek-v3.json"), "--seq", "1", "--json")
    assert code == 0
    assert json.loads(out)["total_bytes"] == 70_272


@pytest.mark.parametrize(
    "args, line",
    [
        (
            ["estimate", "llama3-8bb", "--seq", "4096"],
            "kvplan: error: unknown model 'llama3-8bb': not a bundled model name nor an existing file; "
            "did you mean llama3-8b or llama3.1-8b or llama3-70b?",
        ),
        (["estimate", "llama3-8b", "--seq", "0"], "kvplan: error: --seq: '0' must be at least 1 token"),
        (
            ["estimate", "llama3-8b", "--seq", "4k2"],
            "kvplan: error: --seq: '4k2' is not a token count; use e.g. 4096, 32k or 128k (k = 1024)",
        ),
        (
            ["estimate", "llama3-8b", "--seq", "4096", "--kv-dtype", "fp9"],
            "kvplan: error: --kv-dtype: unknown dtype 'fp9'; allowed: fp32, fp16, bf16, fp8_e4m3, fp8_e5m2, "
            "fp8_per_token_head, int8, q8_0, q4_0, q4_1, q5_0, q5_1, nvfp4, iq4_nl",
        ),
        (["estimate", "llama3-8b"], "kvplan estimate: error: Missing option '--seq' / '-s'."),
        (["estimate", "./missing.yaml", "--seq", "1"], "kvplan: error: missing.yaml: no such file"),
    ],
)
def test_errors_are_one_line_exit_2(cli, args, line):
    code, out, err = cli(*args)
    assert code == 2
    assert out == ""
    assert err == line + "\n"


def test_bad_batch_is_exit_2_one_line(cli):
    code, _, err = cli("estimate", "llama3-8b", "--seq", "1", "--batch", "0")
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("kvplan estimate: error:") and "--batch" in err


def test_bad_spec_file_names_file_and_field(cli, tmp_path):
    p = tmp_path / "x.yaml"
    p.write_text(
        "name: x\nsource: s\nnum_layers: 2\nnum_q_heads: 30\nnum_kv_heads: 8\nhead_dim: 8\ndtype: bf16\nmax_model_len: 8\n"
    )
    code, _, err = cli("estimate", str(p), "--seq", "1")
    assert code == 2
    assert err == f"kvplan: error: {p}: num_q_heads=30 is not a multiple of num_kv_heads=8\n"


def test_models_json_lists_every_bundled_model(cli):
    code, out, _ = cli("models", "--json")
    rows = {r["name"]: r for r in json.loads(out)}
    from kvplan.loader import bundled_names

    assert sorted(rows) == bundled_names()
    assert len(rows) >= 43 + 10  # the 43 reference models and the current architectures
    assert rows["llama3-8b"]["bytes_per_token_4096"] == 131_072
    assert rows["deepseek-v3"]["bytes_per_token_4096"] == 70_272
    assert rows["gemma3-27b"]["kv_bytes_131072"] == 11_173_625_856
    assert rows["jamba-v0.1"]["kinds"] == {"full": 4, "mamba": 28}


def test_compare_topologies(cli):
    code, out, _ = cli("compare", "llama3-8b", "--seq", "4096", "--kv-dtype", "fp16", "--json")
    rows = json.loads(out)["rows"]
    assert [(r["topology"], r["num_kv_heads"], r["queries_per_kv_head"], r["bytes"]) for r in rows] == [
        ("MHA", 32, 1, 2_147_483_648),
        ("llama3-8b (GQA)", 8, 4, 536_870_912),
        ("MQA", 1, 32, 67_108_864),
    ]
    assert [r["ratio_to_mha"] for r in rows] == [1.0, 0.25, 0.03125]


def test_compare_mla_against_uncompressed_heads(cli):
    code, out, _ = cli("compare", "deepseek-v3", "--seq", "4096", "--json")
    rows = json.loads(out)["rows"]
    assert [(r["topology"], r["num_kv_heads"], r["queries_per_kv_head"], r["bytes"]) for r in rows] == [
        # MHA: 61 layers × 128 heads × (192 + 128) × 2 B × 4096 = 20,468,203,520
        ("MHA", 128, 1, 20_468_203_520),
        # MLA: 61 × 576 × 2 B × 4096 = 287,834,112 (one latent for all 128 query heads)
        ("deepseek-v3 (MLA)", 1, 128, 287_834_112),
        # MQA: 61 × 1 × (192 + 128) × 2 B × 4096 = 159,907,840
        ("MQA", 1, 128, 159_907_840),
    ]


def test_help_and_version(cli):
    code, out, _ = cli("--help")
    assert code == 0 and "estimate" in out
    code, out, _ = cli("--version")
    assert code == 0 and out.startswith("kvplan ")


def test_estimate_never_imports_torch_numpy_matplotlib():
    code = (
        "import sys; from kvplan.cli import run; rc = run(['estimate', 'llama3-8b', '--seq', '4096']);"
        "bad = sorted(m for m in ('torch', 'numpy', 'matplotlib') if m in sys.modules);"
        "print('HEAVY', bad, file=sys.stderr); sys.exit(rc)"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "HEAVY []" in r.stderr


def test_python_dash_m_entry_point():
    r = subprocess.run(
        [sys.executable, "-m", "kvplan", "estimate", "llama3-8b", "--seq", "4096", "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0
    assert json.loads(r.stdout)["total_bytes"] == 536_870_912


# --- fuzzing bad input: any --seq text gives exit 0 or a one-line exit 2, never a traceback --------
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(max_size=12))
def test_fuzz_seq_flag(capsys, text):
    from kvplan.cli import run

    code = run(["estimate", "llama3-8b", "--seq", text, "--json"])
    out, err = capsys.readouterr()
    assert code in (0, 2)
    if code == 2:
        assert err.count("\n") == 1 and "Traceback" not in err
    else:
        assert json.loads(out)["seq_len"] >= 1


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.dictionaries(
        st.sampled_from(
            [
                "name",
                "source",
                "num_layers",
                "num_q_heads",
                "num_kv_heads",
                "head_dim",
                "dtype",
                "max_model_len",
                "layers",
                "sliding_window",
                "mla",
                "mamba",
                "bogus",
            ]
        ),
        st.one_of(
            st.integers(-3, 70),
            st.text(max_size=5),
            st.none(),
            st.lists(st.integers(-1, 5), max_size=3),
            st.dictionaries(st.text(max_size=4), st.integers(-1, 9), max_size=2),
        ),
    )
)
def test_fuzz_spec_files(tmp_path_factory, capsys, data):
    import yaml

    from kvplan.cli import run

    p = tmp_path_factory.mktemp("fuzz") / "spec.yaml"
    p.write_text(yaml.safe_dump(data))
    code = run(["estimate", str(p), "--seq", "16"])
    out, err = capsys.readouterr()
    assert code in (0, 2)
    if code == 2:
        assert err.startswith("kvplan: error: ") and err.count("\n") == 1


def test_newline_in_a_path_stays_one_line(cli):
    code, out, err = cli("estimate", "no\nsuch.yaml", "--seq", "1")
    assert code == 2
    assert err == "kvplan: error: no\\nsuch.yaml: no such file\n"


# --- weights: what each command says and takes when a spec has no param_count -----------------------

CONFIG_8B = ROOT / "tests" / "fixtures" / "hf_configs" / "llama3.1-8b.json"  # a config.json (params counted)
TOY = """\
name: toy
source: https://huggingface.co/org/toy/blob/main/config.json
num_layers: 4
num_q_heads: 8
num_kv_heads: 2
head_dim: 16
dtype: bf16
max_model_len: 1024
"""


def test_models_shows_parameters_and_a_parallel_mamba_state(cli):
    rows = {r["name"]: r for r in json.loads(cli("models", "--json")[1])}
    assert all(r["param_count"] is not None for r in rows.values())  # every bundled model plans with fit
    falcon = rows["falcon-h1-7b"]
    assert (falcon["attention"], falcon["param_count"], falcon["active_param_count"]) == (
        "GQA: 44 full+mamba2",
        7_585_513_568,
        None,
    )
    assert (rows["gemma4-26b-a4b"]["param_count"], rows["gemma4-26b-a4b"]["active_param_count"]) == (
        25_805_933_872,
        4_395_322_672,
    )
    code, out, _ = cli("models")
    assert code == 0 and "params" in out
    line = next(x for x in out.splitlines() if " falcon-h1-7b " in x)
    assert "44 full+mamba2" in line and "7.59B" in line
    line = next(x for x in out.splitlines() if " gemma4-26b-a4b " in x)
    assert "25.8B (A4.4B)" in line


def test_describe_layers_marks_the_attention_layers_that_keep_a_state(tmp_path):
    from kvplan.calc import describe_layers
    from kvplan.loader import load_spec_yaml

    p = tmp_path / "zamba.yaml"
    p.write_text(
        TOY + "layers: [mamba2, full, mamba2, full]\nparallel_state: mamba2\n"
        "mamba2: {num_heads: 4, head_dim: 16, d_state: 16, n_groups: 1, d_conv: 4}\n"
    )
    assert describe_layers(load_spec_yaml(p)) == "GQA: 2 full+mamba2 + 2 mamba2"


def test_unknown_weights_messages_say_what_to_do_for_each_kind_of_model(cli, tmp_path):
    from dataclasses import replace

    from kvplan.errors import UsageError
    from kvplan.fit import weights_per_gpu
    from kvplan.loader import load_bundled

    # a bundled name: nothing for the user to edit; --weights-gib
    with pytest.raises(UsageError) as e:
        weights_per_gpu(replace(load_bundled("llama3-8b"), param_count=None), None, 1, 1)
    assert str(e.value) == (
        "llama3-8b: the bundled spec gives no param_count, so weights are unknown; give --weights-gib (weights per GPU)"
    )
    # the user's spec YAML: add param_count to it
    toy = tmp_path / "toy.yaml"
    toy.write_text(TOY)
    code, out, err = cli("fit", toy, "--gpu", "h100")
    assert (code, out) == (2, "")
    assert err == (
        f"kvplan: error: toy: {toy} gives no param_count, so weights are unknown; add param_count (total "
        "parameters) to that spec YAML, or give --weights-gib (weights per GPU)\n"
    )
    # a config.json of a family kvplan does not count (a hybrid) and no safetensors beside it
    jamba = ROOT / "tests" / "fixtures" / "hf_configs" / "jamba-1.5-mini.json"
    code, out, err = cli("fit", jamba, "--gpu", "h200")
    assert (code, out) == (2, "")
    assert err == (
        "kvplan: error: jamba-1.5-mini: a config.json gives no parameter count and no safetensors weights were found "
        "with it (model.safetensors or model.safetensors.index.json), so weights are unknown; give --weights-gib "
        "(weights per GPU), or write a spec YAML with param_count\n"
    )


def test_fleet_and_sweep_take_weights_gib(cli):
    fit = json.loads(cli("fit", CONFIG_8B, "--gpu", "h100", "-s", "8k", "--weights-gib", "15", "--json")[1])
    assert fit["weights_bytes"] == 15 << 30
    code, out, err = cli("sweep", CONFIG_8B, "--seq", "8k", "--gpu", "h100", "--weights-gib", "15", "--json")
    assert code == 0, err
    assert json.loads(out)[0]["kv_budget_bytes"] == fit["kv_budget_bytes"]
    args = ("fleet", CONFIG_8B, "--concurrency", "100", "--seq", "8k", "--gpu", "h100", "--weights-gib", "15")
    code, out, err = cli(*args, "--tp", "1", "--json")
    assert code == 0, err
    assert json.loads(out)["layouts"][0]["kv_budget_bytes_per_gpu"] == fit["kv_budget_bytes"]
    # weights per GPU belong to one TP (and, in a sweep, one model)
    code, out, err = cli(*args)
    assert (code, out) == (2, "")
    assert (
        err
        == "kvplan: error: --weights-gib: weights per GPU depend on TP, so give one --tp with it (each TP its own run)\n"
    )
    code, out, err = cli("sweep", CONFIG_8B, "llama3-8b", "--seq", "8k", "--gpu", "h100", "--weights-gib", "15")
    assert (code, out) == (2, "")
    assert err == (
        "kvplan: error: --weights-gib: one model's weights per GPU at one TP, so give one MODEL and one --tp with it "
        "(got 2 models, 1 TP)\n"
    )


def test_sweep_title_names_each_engine_block_size(cli):
    # vLLM aligns a hybrid model's block to its state page: Falcon-H1 1,568 tokens, Qwen3.5-0.8B 576
    code, out, err = cli("sweep", "falcon-h1-7b", "qwen3.5-0.8b", "llama3-8b", "--seq", "8k", "--gpu", "h100")
    assert code == 0, err
    assert out.splitlines()[0] == (
        "sweep: 3 configurations, vllm convention, engine block sizes 16, 576, 1,568 tokens (per model)"
    )
    code, out, err = cli("sweep", "llama3-8b", "--seq", "8k", "--gpu", "h100")
    assert out.splitlines()[0] == "sweep: 1 configuration, vllm convention, blocks of 16 tokens"


# --- fuzz findings: output errors, HF_ENDPOINT, ambiguous --seq, --concurrency 0, strict JSON -------------------


@pytest.mark.skipif(not __import__("os").path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("fmt", [[], ["--json"]])
def test_unwritable_stdout_is_one_line(fmt):
    with open("/dev/full", "w") as full:
        p = subprocess.run(
            [sys.executable, "-m", "kvplan", "estimate", "llama3-8b", "--seq", "4k", *fmt],
            stdout=full, stderr=subprocess.PIPE, text=True, cwd=ROOT,
        )  # fmt: skip
    assert p.returncode == 2 and p.stderr == "kvplan: error: cannot write the output: No space left on device\n"


@pytest.mark.parametrize("endpoint", ["http://[::1", "http://h:99999", "ftp://x"])
def test_bad_hf_endpoint_is_one_line(cli, monkeypatch, endpoint):
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    code, out, err = cli("estimate", "someone/not-bundled", "--seq", "4k")
    assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith("kvplan: error: HF_ENDPOINT: ")


@pytest.mark.parametrize("seq", ["32,768", "1,000", "4096,1,000"])
def test_seq_thousands_comma_is_ambiguous(cli, seq):
    code, out, err = cli("estimate", "llama3-8b", "--seq", seq)
    assert code == 2 and out == "" and err.count("\n") == 1 and "is ambiguous" in err and "commas separate" in err


def test_seq_comma_lists_still_work(cli):
    code, out, _ = cli("estimate", "llama3-8b", "--seq", "4096,8192", "--json")
    assert code == 0 and [r["seq_len"] for r in json.loads(out)] == [4096, 8192]


@pytest.mark.parametrize("n", ["0", "-3"])
def test_fit_concurrency_must_be_positive(cli, n):
    code, out, err = cli("fit", "llama3-8b", "--gpu", "h100", "--concurrency", n)
    assert code == 2 and out == "" and err == f"kvplan: error: --concurrency: {n} must be an integer >= 1\n"


def test_print_json_is_strict():
    import io

    from kvplan.render import print_json

    buf = io.StringIO()
    print_json({"a": float("inf"), "b": [float("nan"), 1.5], "c": (float("-inf"),)}, buf)
    assert json.loads(buf.getvalue()) == {"a": None, "b": [None, 1.5], "c": [None]}


# --- several models side by side (the December 2026 trial: estimate took one model only) ------------------


def test_estimate_takes_several_models_side_by_side(cli):
    code, out, err = cli("estimate", "llama3.1-8b", "qwen3-8b", "--seq", "8k,32k")
    assert (code, err) == (0, "")
    rows = [line for line in out.splitlines() if line.startswith("│")]
    # 2 × 32 layers × 8 × 128 × 2 B = 131,072 B/token; Qwen3-8B: 36 layers: 147,456 B/token
    assert [[c.strip() for c in r.split("│")[1:6]] for r in rows] == [
        ["llama3.1-8b", "8,192", "bf16", "32 full", "1,073,741,824"],
        ["llama3.1-8b", "32,768", "bf16", "32 full", "4,294,967,296"],
        ["qwen3-8b", "8,192", "bf16", "36 full", "1,207,959,552"],
        ["qwen3-8b", "32,768", "bf16", "36 full", "4,831,838,208"],
    ]
    code, out, _ = cli("estimate", "llama3.1-8b", "qwen3-8b", "--seq", "8k", "--json")
    objs = json.loads(out)
    assert [(o["model"], o["bytes_per_request"]) for o in objs] == [
        ("llama3.1-8b", 1_073_741_824),
        ("qwen3-8b", 1_207_959_552),
    ]
    # one model: the per-layer tables as before; --summary gives the one-line form for it too
    code, out, _ = cli("estimate", "llama3-8b", "--seq", "4096")
    assert "layer kind" in out and out.rstrip().endswith("KV cache: 536,870,912 B (0.5 GiB, 0.537 GB)")
    code, out, _ = cli("estimate", "llama3-8b", "--seq", "4096", "--summary")
    row = next(line for line in out.splitlines() if line.startswith("│"))
    assert "layer kind" not in out
    assert [c.strip() for c in row.split("│")[1:-1]] == [
        "llama3-8b",
        "4,096",
        "bf16",
        "32 full",
        "536,870,912",
        "0.5",
        "0.537",
    ]
    code, out, _ = cli("estimate", "llama3-8b", "--seq", "4096", "--batch", "3", "--summary")
    assert "batch of 3, bytes" in out and "1,610,612,736" in out
