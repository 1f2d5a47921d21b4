"""kvplan verify: a real CPU cache measured against the formula; refusals before allocating; one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

import kvplan.verify as verifymod  # noqa: E402
from kvplan.calc import estimate  # noqa: E402
from kvplan.errors import DoesNotFit  # noqa: E402
from kvplan.specs import load_bundled  # noqa: E402

from .conftest import ROOT  # noqa: E402

JSON_KEYS = [
    "model", "device", "seq_len", "batch_size", "kv_dtype", "layers", "formula_bytes", "measured_bytes",
    "diff_bytes", "diff_pct", "tolerance_bytes", "attention_max_abs_err", "attention_ok", "decode_alloc_bytes",
    "transient_peak_bytes", "ok",
]  # fmt: skip


def test_cli_verify_llama3_8b_on_cpu_json(cli):
    # 2 × 32 layers × 8 heads × 128 × 2 B = 131,072 B/token; × 256 tokens × 2 requests = 67,108,864 B (64 MiB)
    code, out, err = cli("verify", "llama3-8b", "--seq", "256", "--batch", "2", "--device", "cpu", "--json")
    assert code == 0, err
    r = json.loads(out)
    assert list(r)[: len(JSON_KEYS)] == JSON_KEYS
    assert r["formula_bytes"] == 67_108_864 == estimate(load_bundled("llama3-8b"), 256, 2).total_bytes
    assert r["allocated_bytes"] == 67_108_864
    assert r["num_tensors"] == 64 and r["tolerance_bytes"] == 64 * 2 * 4096
    assert r["diff_bytes"] == r["measured_bytes"] - r["formula_bytes"]
    assert abs(r["diff_bytes"]) <= r["tolerance_bytes"]
    assert abs(r["diff_pct"]) < 1.0
    assert r["attention_ok"] is True and 0 < r["attention_max_abs_err"] < 0.05
    assert r["decode_alloc_bytes"] == 0
    # logits and probabilities of the prefill chunk: 2 × (2 × 32 × 32 × 252 × 4 B) = 4,128,768 B at least
    assert r["transient_peak_bytes"] >= 4_128_768
    assert r["ok"] is True and r["device"] == "cpu" and r["layers"] == 32 and r["kv_dtype"] == "bf16"


@pytest.mark.parametrize(
    "model,seq,batch,layers,kv_dtype",
    [
        ("gemma3-27b", 1100, 2, 12, None),  # sliding rings wrap (1100 > 1024) + full layers 5 and 11
        ("deepseek-v3", 300, 1, 3, None),  # MLA latent, absorbed attention (d 576, d_v 512, H_kv 1)
        ("jamba-v0.1", 256, 2, 13, None),  # Mamba states + full attention at layers 4 and 12
        ("falcon-7b", 512, 3, 4, None),  # MQA, 71 query heads on one KV head
        ("llama2-7b", 256, 1, 4, None),  # MHA, fp16
        ("llama4-scout", 300, 1, 4, None),  # chunked (8192 > 300) + full
        ("llama3-8b", 256, 2, 4, "fp8"),  # fp8 cache, attention in bf16 on the dequantized values
        ("llama3-8b", 256, 2, 4, "q8_0"),  # packed rows: bytes checked, attention skipped
        # fp8 rings: index_copy_ has no float8 kernel on CPU (used to raise NotImplementedError)
        ("mistral-7b-v0.1", 8, 1, 1, "fp8"),  # sliding ring, float8_e4m3fn
        ("gemma3-27b", 1100, 1, 2, "fp8_e5m2"),  # sliding rings that wrap, float8_e5m2
        ("gpt-oss-20b", 200, 1, 2, "fp8"),  # sliding window 128 wraps, then a full layer
        ("llama4-scout", 300, 1, 1, "fp8"),  # chunked ring
    ],
)
def test_verify_models_on_cpu(model, seq, batch, layers, kv_dtype):
    spec = load_bundled(model)
    r = verifymod.verify(spec, seq, batch, kv_dtype, device="cpu", layers=layers)
    assert r.formula_bytes == r.allocated_bytes
    assert abs(r.diff_bytes) <= r.tolerance_bytes, r
    assert r.decode_alloc_bytes == 0
    if kv_dtype == "q8_0":
        assert r.attention_ok is None and r.attention_max_abs_err is None
    else:
        assert r.attention_ok is True, r.attention_checks
    assert r.ok


def test_mamba_with_d_conv_1_keeps_no_conv_columns():
    # d_conv = 1: conv state [B, d_inner, 0]; the decode step used to index column −1 (IndexError)
    from dataclasses import replace

    spec = load_bundled("jamba-v0.1")
    spec = replace(spec, mamba=replace(spec.mamba, d_inner=8, d_conv=1, d_state=1))
    r = verifymod.verify(spec, 8, 1, device="cpu", layers=5)
    assert r.ok and r.formula_bytes == r.allocated_bytes
    assert r.attention_ok is True  # the full-attention layer 4 is checked too
    assert any("mamba" in note for note in r.attention_checks)


def test_formula_for_first_layers_matches_calc():
    # gemma3 layers 0..5: 5 sliding (1024 kept) + 1 full (1100): 8,192 B per token per layer
    # (5 × 1024 + 1100) × 8192 × 2 requests = 101,908,480 B
    r = verifymod.verify(load_bundled("gemma3-27b"), 1100, 2, device="cpu", layers=6, check_attention=False)
    assert r.formula_bytes == (5 * 1024 + 1100) * 8192 * 2 == 101_908_480
    assert r.ok


def test_refuses_before_allocating(cli, monkeypatch):
    def no_alloc(*a, **k):
        raise AssertionError("allocated despite the refusal")

    monkeypatch.setattr(verifymod, "StaticKVCache", no_alloc)
    # 80 layers × 2 × 8 × 128 × 2 B = 327,680 B/token × 131,072 × 64 = 2,748,779,069,440 B (2.5 TiB)
    code, out, err = cli("verify", "llama3-70b", "--seq", "128k", "--batch", "64", "--device", "cpu")
    assert code == 1
    lines = [x for x in err.splitlines() if x.startswith("kvplan: error:")]
    assert len(lines) == 1 and "Traceback" not in err and out == ""
    assert "2,748,779,069,440 B" in lines[0] and "nothing was allocated" in lines[0]
    assert "MemAvailable" in lines[0] and "--layers" in lines[0]


def test_refusal_uses_memavailable_minus_margin(monkeypatch):
    gib = 1 << 30
    # 10 GiB available, margin max(1 GiB, 10 % of 16 GiB) = 1.6 GiB: 8.4 GiB usable
    monkeypatch.setattr(verifymod, "meminfo_bytes", lambda key: {"MemAvailable": 10 * gib, "MemTotal": 16 * gib}[key])
    spec = load_bundled("llama3-8b")
    usable = 10 * gib - 16 * gib // 10
    with pytest.raises(DoesNotFit, match="usable on cpu"):
        verifymod._refuse_if_too_big(usable + 1, usable + 1, "cpu", "x")
    verifymod._refuse_if_too_big(usable, usable, "cpu", "x")  # exactly fits: no error
    with pytest.raises(DoesNotFit):  # 131,072 B/token × 8192 × 9 = 9 GiB > 8.4 GiB
        verifymod.verify(spec, 8192, 9, device="cpu")


def test_mismatch_exits_1(cli, monkeypatch):
    # A resident-set reading one page more than the tolerance allows must fail the verify.
    spec = load_bundled("llama3-8b")
    formula = estimate(spec, 64, 1).total_bytes  # 131,072 × 64 = 8,388,608 B
    tolerance = 64 * 2 * 4096
    for extra, ok in ((tolerance, True), (tolerance + 4096, False), (-tolerance - 4096, False)):
        readings = iter([1 << 30, (1 << 30) + formula + extra])
        monkeypatch.setattr(verifymod, "rss_bytes", lambda it=readings: next(it))
        r = verifymod.verify(spec, 64, 1, device="cpu", check_attention=False)
        assert r.measured_bytes == formula + extra and r.ok is ok
    readings = iter([0, formula + tolerance + 4096])
    monkeypatch.setattr(verifymod, "rss_bytes", lambda: next(readings))
    code, out, err = cli("verify", "llama3-8b", "--seq", "64", "--device", "cpu")
    assert code == 1 and "verify: MISMATCH" in out


def test_a_wrong_attention_fails_the_check(monkeypatch):
    # The check can fail: an attention that ignores the sliding window reads stale ring slots' keys.
    from kvplan.attention import grouped_query_attention

    def no_window(q, k, v, **kw):
        kw.pop("mask", None)
        return grouped_query_attention(q, k, v, causal=False, scale=kw.get("scale"))

    monkeypatch.setattr(verifymod, "grouped_query_attention", no_window)
    r = verifymod.verify(load_bundled("gpt-oss-20b"), 200, 1, device="cpu", layers=2)  # window 128 < 200
    assert r.attention_ok is False and r.attention_max_abs_err > 0.05 and not r.ok


def test_missing_torch_is_one_line(cli, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now raises ImportError
    code, out, err = cli("verify", "llama3-8b", "--device", "cpu")
    assert code == 2
    assert err == "kvplan: error: kvplan verify needs torch: pip install 'kvplan[verify]'\n"


@pytest.mark.parametrize(
    "args,line",
    [
        (["--device", "tpu"], "kvplan: error: --device: 'tpu' is not one of auto, cuda, cpu\n"),
        (["--layers", "33"], "kvplan: error: --layers: 33 must be an integer in 1..32 (llama3-8b)\n"),
        (["--seq", "0"], "kvplan: error: --seq: '0' must be at least 1 token\n"),
        (["--gpu", "h200"], "kvplan: error: --gpu: only with --fit\n"),
        (
            ["--fit", "--batch", "2"],
            "kvplan: error: --batch: not with --fit (the plan decides how many requests fit)\n",
        ),
        (["--kv-dtype", "fp9"], None),
    ],
)
def test_bad_flags_exit_2_with_one_line(cli, args, line):
    code, out, err = cli("verify", "llama3-8b", "--device", "cpu", *args)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "Traceback" not in err
    if line:
        assert err == line
    else:
        assert err.startswith("kvplan: error: --kv-dtype: unknown dtype 'fp9'")


def test_cuda_without_a_gpu_is_a_usage_error(cli):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    code, out, err = cli("verify", "llama3-8b", "--device", "cuda")
    assert code == 2 and err.startswith("kvplan: error: --device cuda: torch") and err.count("\n") == 1


def test_fit_allocates_the_plans_requests(cli):
    # vLLM convention, budget 64 MiB, 256-token requests: 256 × 131,072 B = 32 MiB each (256 is whole
    # 16-token blocks) → 2 requests fit. Verify allocates those 2 (first 4 layers, to stay small).
    code, out, err = cli(
        "verify", "llama3-8b", "--fit", "--gpu", "h200", "--kv-cache-memory", "64MiB", "--seq", "256",
        "--device", "cpu", "--layers", "4", "--json",
    )  # fmt: skip
    assert code == 0, err
    r = json.loads(out)
    assert r["fit_requests"] == 2 and r["batch_size"] == 2 and r["fit_engine"] == "vllm"
    assert r["fit_kv_budget_bytes"] == 64 << 20 and r["fit_formula_bytes"] == 2 * 256 * 131_072
    # 4 layers × 2 × 8 × 128 × 2 B × 256 × 2 = 8,388,608 B allocated
    assert r["formula_bytes"] == 8_388_608 and r["ok"] is True


def test_fit_that_does_not_fit_exits_1(cli):
    code, out, err = cli(
        "verify", "llama3-8b", "--fit", "--gpu", "h200", "--kv-cache-memory", "1MiB", "--seq", "256", "--device", "cpu"
    )
    assert code == 1 and err.startswith("kvplan: error: llama3-8b on") and err.count("\n") == 1


def test_table_output(cli):
    code, out, err = cli("verify", "gpt2", "--seq", "128", "--device", "cpu")
    assert code == 0, err
    # GPT-2: 2 × 12 layers × 12 heads × 64 × 2 B = 36,864 B/token (fp16); × 128 = 4,718,592 B
    assert "4,718,592" in out and "formula (kvplan.calc)" in out and "verify: OK" in out


def test_help_does_not_import_torch():
    code = (
        "import sys; from kvplan.cli import run; rc = run(['verify', '--help']);"
        "print('TORCH', 'torch' in sys.modules, file=sys.stderr); sys.exit(rc)"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "TORCH False" in r.stderr
    assert "--device" in r.stdout and "--fit" in r.stdout
