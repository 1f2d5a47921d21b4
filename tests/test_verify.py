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
from kvplan.kvcache import StaticKVCache  # noqa: E402
from kvplan.loader import load_bundled  # noqa: E402
from kvplan.specs import build_spec  # noqa: E402

from .conftest import ROOT  # noqa: E402
from .test_kvcache import SYNTHETIC, SYNTHETIC_BYTES, synthetic_spec  # noqa: E402

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
        # packed rows: K/V quantized into the block layout with scales, dequantized for attention
        ("llama3-8b", 256, 2, 4, "q8_0"),
        ("llama3-8b", 64, 1, 2, "q4_0"),
        ("llama3-8b", 64, 1, 2, "q4_1"),
        ("llama3-8b", 64, 1, 2, "q5_0"),
        ("llama3-8b", 64, 1, 2, "q5_1"),
        ("llama3-8b", 64, 2, 2, "int8"),  # fp32 scale per token and head
        ("llama3-8b", 64, 1, 2, "fp8_per_token_head"),
        ("gemma3-27b", 1100, 1, 2, "nvfp4"),  # sliding rings that wrap, E2M1 + E4M3 scales
        ("deepseek-v3", 64, 1, 1, "q4_0"),  # MLA latent of 576 = 18 blocks of 32
        ("llama4-scout", 300, 1, 1, "q8_0"),  # chunked ring
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
    assert r.attention_ok is True, r.attention_checks
    if kv_dtype is not None and kv_dtype.startswith(("q", "nvfp4", "int8", "fp8_per")):
        assert r.readback_ok is True and "rows quantized with their scales" in r.attention_checks[0]
    assert r.ok


@pytest.mark.parametrize("kind", ["mamba", "mamba2"])
def test_state_with_d_conv_1_keeps_no_conv_columns(tmp_path, kind):
    # d_conv = 1: no past tokens, conv state [B, 0, d_inner] (Mamba-1) or [B, 0, dim] (Mamba-2); the decode
    # step used to index column −1 (IndexError). Spec files refuse d_conv < 2, so the StateConfig is replaced.
    from dataclasses import replace

    from kvplan.specs import StateConfig

    if kind == "mamba":
        spec, layers = load_bundled("jamba-v0.1"), 5
        state = StateConfig("mamba", d_inner=8, d_conv=1, d_state=1)
    else:
        spec, layers = synthetic_spec(tmp_path, "mamba2"), 3
        state = replace(spec.states["mamba2"], d_conv=1)
    spec = replace(
        spec,
        layers=tuple(replace(x, state=state) if x.kind == kind else x for x in spec.layers),
        states={kind: state},
    )
    conv = StaticKVCache(spec, 8, 1, device="meta", layers=layers).layers[0].tensors["conv"]
    assert conv.numel() == 0 and conv.shape == (1, *state.tensors("bf16")[0].shape)  # (1, 0, 8) / (1, 0, 96)
    r = verifymod.verify(spec, 8, 1, device="cpu", layers=layers)
    assert r.ok and r.formula_bytes == r.allocated_bytes and r.mismatched_layers == ()
    assert r.attention_ok is True and r.readback_ok is True  # the full-attention layer is checked too
    assert any(note.startswith(f"layer 0 {kind} (conv") for note in r.attention_checks)


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


def test_refusal_counts_the_address_space_ulimit_v_leaves(monkeypatch):
    gib = 1 << 30
    # MemAvailable 100 GiB (usable 100 − 12.8), but ulimit -v leaves 3 GiB: usable 3 GiB − 512 MiB = 2.5 GiB
    monkeypatch.setattr(verifymod, "meminfo_bytes", lambda key: {"MemAvailable": 100 * gib, "MemTotal": 128 * gib}[key])
    monkeypatch.setattr(verifymod, "address_space_left", lambda: (3 * gib, "ulimit -v"))
    usable = 3 * gib - (512 << 20)
    with pytest.raises(DoesNotFit, match=r"usable on cpu \(ulimit -v leaves this process 3 GiB of address space "):
        verifymod._refuse_if_too_big(usable + 1, usable + 1, "cpu", "x")
    verifymod._refuse_if_too_big(usable, usable, "cpu", "x")  # exactly fits: no error


def test_verify_under_ulimit_v_is_refused_not_a_crash():
    # a real RLIMIT_AS: the process's address space now + 1.5 GiB; the 4 GiB cache used to die in torch's
    # allocator ("DefaultCPUAllocator: can't allocate memory") with a traceback, whatever MemAvailable said
    code = (
        "import resource, sys, torch\n"
        "from kvplan.verify import status_bytes\n"
        "limit = status_bytes('VmSize') + (3 << 29)\n"
        "resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))\n"
        "from kvplan.cli import run\n"
        "sys.exit(run(['verify', 'llama3-8b', '--seq', '8k', '--batch', '4', '--device', 'cpu']))\n"
    )
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert p.returncode == 1, p.stderr
    assert p.stderr.count("\n") == 1 and "Traceback" not in p.stderr
    # 131,072 B/token × 8,192 × 4 = 4,294,967,296 B
    assert p.stderr.startswith("kvplan: error: verify llama3-8b --seq 8192 --batch 4 --kv-dtype bf16: the cache needs "
                               "4,294,967,296 B (4 GiB)")  # fmt: skip
    assert "(ulimit -v leaves this process " in p.stderr and "nothing was allocated" in p.stderr


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
    from kvplan.install import extra_hint  # the install line depends on how kvplan was installed

    assert err == f"kvplan: error: kvplan verify needs torch: {extra_hint('verify')}\n"


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
    # vLLM convention, budget 66 MiB, 256-token requests: 256 × 131,072 B = 32 MiB each (256 is whole
    # 16-token blocks) → 2 requests fit beside vLLM 0.33's null block (one 2 MiB block). Verify allocates
    # those 2 (first 4 layers, to stay small).
    code, out, err = cli(
        "verify", "llama3-8b", "--fit", "--gpu", "h200", "--kv-cache-memory", "66MiB", "--seq", "256",
        "--device", "cpu", "--layers", "4", "--json",
    )  # fmt: skip
    assert code == 0, err
    r = json.loads(out)
    assert r["fit_requests"] == 2 and r["batch_size"] == 2 and r["fit_engine"] == "vllm"
    assert r["fit_kv_budget_bytes"] == 66 << 20 and r["fit_formula_bytes"] == 2 * 256 * 131_072
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


# --- the per-layer spec model: every new kind allocated on CPU, measured, checked -----------------------

# What the check must report for each synthetic spec (tests/test_kvcache.py): the layers checked and
# whether a read-back check runs (state updates, shared storage, MLA indexer keys).
SYNTHETIC_CHECKS = {
    "mamba2": (["0 mamba2", "1 full"], True),
    "gdn": (["0 gdn", "2 full"], True),
    "short_conv": (["0 short_conv", "1 full"], True),
    "linear_attention": (["0 linear_attention", "1 full"], True),
    "none": (["1 full", "3 sliding"], None),  # none layers: nothing to check
    "shared": (["0 sliding", "1 sliding", "2 full", "4 shared", "5 shared"], True),
    "geometry": (["0 sliding", "1 sliding", "3 full"], None),
    "mla": (["0 mla", "1 mla"], True),
}


@pytest.mark.parametrize("kind", list(SYNTHETIC))
def test_verify_every_new_kind_on_cpu(tmp_path, kind):
    spec = synthetic_spec(tmp_path, kind)
    r = verifymod.verify(spec, 16, 2, device="cpu")
    # measured (allocated, per layer, and the resident set) equals the kvplan.calc formula
    assert r.formula_bytes == r.allocated_bytes == SYNTHETIC_BYTES[kind] == estimate(spec, 16, 2).total_bytes
    assert r.mismatched_layers == () and abs(r.diff_bytes) <= r.tolerance_bytes
    assert r.decode_alloc_bytes == 0 and r.attention_ok is True
    layers, readback = SYNTHETIC_CHECKS[kind]
    assert [" ".join(note.split()[1:3]) for note in r.attention_checks] == layers
    assert r.readback_ok is readback and r.ok


def test_verify_geometry_override_checks_the_layers_own_heads(tmp_path):
    r = verifymod.verify(synthetic_spec(tmp_path, "geometry"), 16, 1, device="cpu")
    sliding, full = r.attention_checks[0], r.attention_checks[2]
    assert "8 of 8 query heads on 4 of 4 KV heads, d 16, d_v 16" in sliding
    assert "8 of 8 query heads on 2 of 2 KV heads, d 64, d_v 64" in full  # G = 4 on the global layer


def test_verify_shared_layers_read_their_source(tmp_path):
    r = verifymod.verify(synthetic_spec(tmp_path, "shared"), 16, 1, device="cpu")
    assert "layer 4 shared (reads layer 3's sliding cache, same storage;" in r.attention_checks[3]
    assert "layer 5 shared (reads layer 2's full cache, same storage;" in r.attention_checks[4]
    assert r.readback_ok is True and r.ok


def test_verify_mla_indexer_is_allocated_and_read_back(tmp_path):
    r = verifymod.verify(synthetic_spec(tmp_path, "mla"), 16, 1, device="cpu")
    assert r.num_tensors == 4  # latent and index_k per layer
    assert "16 indexer keys of 16 read back exactly" in r.attention_checks[0] and r.readback_ok is True


@pytest.mark.parametrize("kind", ["shared", "mla", "geometry", "mamba2"])
def test_verify_packed_dtype_on_new_kinds(tmp_path, kind):
    spec = synthetic_spec(tmp_path, kind)
    r = verifymod.verify(spec, 16, 3, "q8_0", device="cpu")
    assert r.formula_bytes == r.allocated_bytes == estimate(spec, 16, 3, "q8_0").total_bytes
    # the packed rows are quantized and attended over on every attention kind (shared layers read their
    # source's rows; MLA latents and indexer keys are packed too)
    assert r.attention_ok is True, r.attention_checks
    assert r.readback_ok is True and r.mismatched_layers == () and r.ok


def test_every_state_kind_measured_in_resident_memory():
    # Tensors of 48-512 KiB, most from their own mmap: the resident-set delta is a real measurement.
    spec = build_spec(
        {
            "name": "syn-states", "source": "tests/test_verify.py", "num_layers": 6, "num_q_heads": 4,
            "num_kv_heads": 2, "head_dim": 64, "dtype": "bf16", "max_model_len": 4096,
            "layers": ["mamba", "mamba2", "gdn", "short_conv", "linear_attention", "full"],
            "mamba": {"d_inner": 4096, "d_conv": 4, "d_state": 16, "conv_dtype": "fp32", "ssm_dtype": "bf16"},
            "mamba2": {
                "num_heads": 32, "head_dim": 64, "d_state": 64, "n_groups": 2, "d_conv": 4, "conv_dtype": "fp32",
                "ssm_dtype": "bf16",
            },
            "gdn": {"num_k_heads": 8, "num_v_heads": 16, "head_k_dim": 64, "head_v_dim": 64, "d_conv": 4},
            "short_conv": {"d_inner": 8192, "d_conv": 3},
            "linear_attention": {"num_heads": 16, "head_dim": 64},
        },
        "syn-states",
    )  # fmt: skip
    r = verifymod.verify(spec, 512, 2, device="cpu")
    # 2 requests × (mamba 4096 × 3 × 4 B + 4096 × 16 × 2 B = 180,224; mamba2 3 × (2048 + 2·2·64) × 4 B
    # + 32 × 64 × 64 × 2 B = 289,792; gdn 3 × (2·8·64 + 16·64) × 2 B + 16 × 64 × 64 × 2 B = 143,360;
    # short_conv 2 × 8192 × 2 B = 32,768; linear_attention 16 × 64 × 64 × 2 B = 131,072;
    # full 2 × 2 × 64 × 2 B × 512 = 262,144)
    assert r.formula_bytes == 2 * (180_224 + 289_792 + 143_360 + 32_768 + 131_072 + 262_144) == 2_078_720
    assert r.formula_bytes == estimate(spec, 512, 2).total_bytes == r.allocated_bytes
    assert r.num_tensors == 10 and r.formula_bytes > 20 * r.tolerance_bytes  # tolerance: 2 pages × 10
    assert abs(r.diff_bytes) <= r.tolerance_bytes, r
    assert r.readback_ok is True and r.attention_ok is True and r.ok
    assert len(r.attention_checks) == 6


def test_a_shared_layer_reading_a_copy_fails_the_check(tmp_path, monkeypatch):
    # The read-back check can fail: a shared layer that reads a copy, not its source's storage.
    real = StaticKVCache.read

    def copying_read(self, index, end):
        k, v, pos = real(self, index, end)
        return (k.clone(), v.clone(), pos) if self.layers[index].kind == "shared" else (k, v, pos)

    monkeypatch.setattr(StaticKVCache, "read", copying_read)
    r = verifymod.verify(synthetic_spec(tmp_path, "shared"), 16, 1, device="cpu")
    assert r.attention_ok is True and r.readback_ok is False and not r.ok


def test_a_layer_off_its_formula_fails(tmp_path, monkeypatch):
    real = StaticKVCache.layer_formula_bytes
    monkeypatch.setattr(StaticKVCache, "layer_formula_bytes", lambda self, i: real(self, i) + (i == 1))
    r = verifymod.verify(synthetic_spec(tmp_path, "gdn"), 16, 1, device="cpu", check_attention=False)
    assert r.mismatched_layers == ((1, 896, 897),) and not r.ok


def test_cli_verify_new_kind_json(cli, tmp_path):
    synthetic_spec(tmp_path, "gdn")
    code, out, err = cli("verify", str(tmp_path / "syn-gdn.yaml"), "--seq", "16", "--device", "cpu", "--json")
    assert code == 0, err
    r = json.loads(out)
    assert r["formula_bytes"] == r["allocated_bytes"] == 3_840 and r["ok"] is True
    assert r["readback_ok"] is True and r["mismatched_layers"] == []
    assert r["attention_checks"][0].startswith("layer 0 gdn (conv (1, 3, 64) bfloat16, ssm (1, 4, 8, 8) bfloat16)")


# --- packed KV dtypes: real quantization into the cache's rows ----------------------------------------


@pytest.mark.parametrize("name", ["q8_0", "q4_0", "q4_1", "q5_0", "q5_1"])
def test_ggml_rows_are_bit_for_bit_llama_cpps(name):
    # Oracle: llama.cpp's own gguf-py (gguf.quants), whose quantizers reproduce ggml-quants.c's reference
    # ones. One row of 2 heads × 128 values = 8 blocks of 32, with an all-zero and a constant block.
    import numpy as np
    from gguf import GGMLQuantizationType, quants

    from kvplan.dtypes import get_kv_dtype

    x = torch.randn(6, 256, generator=torch.Generator().manual_seed(1)) * 3
    x[0, :32] = 0
    x[1, 32:64] = 2.0
    fmt = verifymod.PackedFormat(get_kv_dtype(name))
    rows, deq, slack = fmt.pack(x, 2)
    qtype = getattr(GGMLQuantizationType, name.upper())
    want = quants.quantize(x.numpy(), qtype)
    assert rows.shape == (6, get_kv_dtype(name).row_bytes(256, 2)) and np.array_equal(rows.numpy(), want)
    back = fmt.unpack(rows, 256, 2)
    assert np.array_equal(back.numpy(), quants.dequantize(want, qtype)) and torch.equal(back, deq)
    assert (slack <= 0).all()  # every value within the format's bound (verify.QUANT_BOUND)


def test_nvfp4_and_per_head_rows_by_hand():
    from kvplan.dtypes import get_kv_dtype

    # NVFP4, 16 values: A = 6, scale s = 6/6 = 1.0 (E4M3 0x38); E2M1 codes: 6 → 7, −3 → 8|5 = 13,
    # 1.5 → 3, 0.25 → 0 (tie between 0 and 0.5: the smaller); two codes per byte, the first in the low
    # nibble: 7 | 13 << 4 = 0xD7, 3 | 0 << 4 = 0x03. ceil(16/2) + ceil(16/16) = 9 B.
    x = torch.zeros(1, 16)
    x[0, :4] = torch.tensor([6.0, -3.0, 1.5, 0.25])
    fmt = verifymod.PackedFormat(get_kv_dtype("nvfp4"))
    rows, deq, slack = fmt.pack(x, 1)
    assert rows.tolist() == [[0xD7, 0x03, 0, 0, 0, 0, 0, 0, 0x38]]
    assert deq[0, :4].tolist() == [6.0, -3.0, 1.5, 0.0] and slack.item() <= 0
    assert torch.equal(fmt.unpack(rows, 16, 1), deq)
    # int8, two heads of 2: head 0 max |x| = 127 → s = 1.0, codes 127, −64 (−63.5 rounds away from 0);
    # head 1 all zero → s = 0, codes 0. Row: 4 int8 then 2 fp32 scales (1.0 = 00 00 80 3f) = 12 B.
    x = torch.tensor([[127.0, -63.5, 0.0, 0.0]])
    fmt = verifymod.PackedFormat(get_kv_dtype("int8"))
    rows, deq, _ = fmt.pack(x, 2)
    assert rows.tolist() == [[127, 256 - 64, 0, 0, 0, 0, 0x80, 0x3F, 0, 0, 0, 0]]
    assert deq.tolist() == [[127.0, -64.0, 0.0, 0.0]] and torch.equal(fmt.unpack(rows, 4, 2), deq)


def test_every_packed_dtype_has_a_layout():
    from kvplan.dtypes import get_kv_dtype, kv_dtype_names
    from kvplan.kvcache import torch_dtype_of

    packed = [n for n in kv_dtype_names() if torch_dtype_of(get_kv_dtype(n)) is None]
    assert sorted(packed) == sorted(verifymod.PACKED) == sorted(verifymod.QUANT_BOUND)


def test_a_wrong_packed_layout_fails_the_attention_check(monkeypatch):
    # Read the rows one byte off (a scale taken for data): the dequantized cache no longer matches.
    real = verifymod.PackedFormat.unpack
    monkeypatch.setattr(verifymod.PackedFormat, "unpack", lambda self, rows, E, h: real(self, rows.roll(1, -1), E, h))
    r = verifymod.verify(load_bundled("llama3-8b"), 64, 1, "q8_0", device="cpu", layers=1)
    assert r.attention_ok is False and r.attention_max_abs_err > 0.1 and not r.ok


def test_cli_verify_q8_0_checks_attention(cli):
    code, out, err = cli("verify", "llama3-8b", "--seq", "64", "--kv-dtype", "q8_0", "--device", "cpu", "--layers", "2")
    assert code == 0, err
    assert "attention vs fp32 SDPA: max |err|" in out and "over 2 layer check(s): ok" in out
    assert "q8_0 rows quantized with their scales" in out and out.rstrip().splitlines()[-1].startswith("verify: OK")


def test_batch_above_the_bound_is_the_estimate_error(cli):
    # kvplan's bound on concurrent requests (kvplan.units.MAX_BATCH): the same one line as estimate, before any
    # memory check
    est = cli("estimate", "llama3-8b", "--seq", "16", "--batch", "2000000000")
    ver = cli("verify", "llama3-8b", "--seq", "16", "--batch", "2000000000")
    assert est == ver == (2, "", "kvplan: error: --batch: 2,000,000,000 is beyond kvplan's bound of 1,000,000,000 "
                                 "concurrent requests\n")  # fmt: skip


def test_seq_beyond_context_that_cannot_be_allocated_is_one_message(cli):
    # 10^9 tokens × 131,072 B: nothing is allocated, and nothing may claim it was ("allocated anyway")
    code, out, err = cli("verify", "llama3-8b", "--seq", "1000000000")
    assert (code, out, err.count("\n")) == (1, "", 1)
    assert "allocated anyway" not in err and "warning" not in err
    assert err.startswith("kvplan: error: verify llama3-8b --seq 1000000000 --batch 1 --kv-dtype bf16: the cache needs")
    assert "nothing was allocated" in err
    assert err.endswith("(--seq 1,000,000,000 is beyond llama3-8b's max context of 8,192 tokens)\n")


def test_seq_beyond_context_that_is_allocated_warns_after(cli):
    code, out, err = cli("verify", "llama3-8b", "--seq", "8200", "--layers", "1", "--json")
    assert code == 0, err
    assert json.loads(out)["seq_len"] == 8200
    assert err == "kvplan: warning: --seq 8,200 is beyond llama3-8b's max context of 8,192 tokens (allocated anyway)\n"
