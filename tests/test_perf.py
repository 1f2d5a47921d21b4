"""Speed figures (kvplan.perf): hand-computed checks, properties, fleet SLOs, CLI.

The hand checks below redo the formulas with the arithmetic written out (at the limit, MBU = MFU = 1). The
published measurements are tests/test_speed_validation.py's.
"""

from __future__ import annotations

import json
import math
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvplan import perf
from kvplan.errors import SpecError, UsageError
from kvplan.fit import FitOptions, plan_fit
from kvplan.fleet import SLO, plan_layout, workload_from_data
from kvplan.gpus import get_gpu
from kvplan.loader import load_bundled
from kvplan.specs import build_spec


def bound(model: str, gpu: str, tp: int, n: int, t: int, mbu=1.0, mfu=1.0, **opts) -> perf.PerfResult:
    spec, g = load_bundled(model), get_gpu(gpu)
    f = plan_fit(spec, g, FitOptions(tensor_parallel_size=tp, max_model_len=max(t, 16), **opts))
    return perf.bound(spec, g, f, n, t, mbu=mbu, mfu=mfu)


# --- hand computations ---------------------------------------------------------------------------


def test_dense_gqa_llama3_8b():
    r = bound("llama3-8b", "h100", 1, 4, 1000)
    # weights 8.03e9 params × 2 B = 16,060,000,000 B, less the input embedding a lookup does not read (one row
    # per token): 128,256 vocab × 4,096 × 2 B = 1,050,673,152 → 15,009,326,848 B read.
    # KV per token 32 layers × 2 × 8 heads × 128 × 2 B = 131,072; 4 requests × 1,000 tokens = 524,288,000 B
    assert r.weights_read_bytes == 15_009_326_848
    assert r.kv_read_bytes == 524_288_000
    assert r.decode_step_bytes == 15_533_614_848
    # FLOPs: 2 × 8.03e9 × 4 = 64,240,000,000 linear; attention 2 × 32 heads × (128 + 128) × 1,000 tokens
    # = 16,384,000 per layer and request, × 32 layers × 4 = 2,097,152,000
    assert r.decode_step_flops == 64_240_000_000 + 2_097_152_000
    # memory-bound: 15,533,614,848 B / 3.35e12 B/s = 4.636900 ms; compute 66.337e9 / 989e12 = 0.067 ms
    assert r.bound_by == "memory" and r.figure == "given"
    assert r.tpot_ms == pytest.approx(15_533_614_848 / 3.35e12 * 1e3, rel=1e-12)
    assert r.decode_tokens_per_s == pytest.approx(4 / (15_533_614_848 / 3.35e12), rel=1e-12)
    # TP 2: half the weights (and half the embedding table) and KV heads per GPU; all-reduce 2 per layer ×
    # 2(2−1)/2 × 4 tokens × 4,096 × 2 B × 32 layers = 2,097,152 B over NVLink 450 GB/s = 4.66 µs
    r2 = bound("llama3-8b", "h100", 2, 4, 1000)
    assert r2.weights_read_bytes == 8_030_000_000 - 525_336_576 and r2.kv_read_bytes == 262_144_000
    assert r2.allreduce_bytes == 2_097_152
    assert r2.tpot_ms == pytest.approx((7_766_807_424 / 3.35e12 + 2_097_152 / 450e9) * 1e3, rel=1e-12)


def test_the_limit_is_the_default_and_the_estimate_is_slower():
    spec, g = load_bundled("llama3-8b"), get_gpu("h100")
    f = plan_fit(spec, g, FitOptions(max_model_len=4096))
    lim = perf.bound(spec, g, f, 8, 2048)
    assert lim.figure == "limit" and lim.mbu == lim.mfu == 1.0 and lim.fixed_ms == 0
    est = perf.estimate(spec, g, f, 8, 2048)
    assert est.figure == "estimate" and est.efficiency.basis == "vllm on nvidia-hopper"
    assert est.tpot_ms > lim.tpot_ms and est.fixed_ms > 0 and est.mbu < 1
    # the estimate's error is stated: the calibration's median |error| on the published measurements
    assert 0 < est.efficiency.median_abs_error < 1 and est.efficiency.measurements >= 30


def test_done_when_llama3_8b_h100_cli(cli):
    code, out, err = cli("fit", "llama3-8b", "--gpu", "h100", "--concurrency", "1", "--context", "4096", "--json")
    assert code == 0, err
    d = json.loads(out)
    # (weights − the input embedding + 4,096-token KV) / catalog bandwidth: (16,060,000,000 − 1,050,673,152 +
    # 4,096 × 131,072) / 3.35e12 = 4.640656 ms, the limit
    expected = (d["weights_bytes"] - 128_256 * 4096 * 2 + 4096 * 131_072) / (get_gpu("h100").bandwidth_tbs * 1e12) * 1e3
    assert abs(d["tpot_ms_limit"] / expected - 1) < 1e-3
    assert d["tpot_ms_estimate"] > d["tpot_ms_limit"] and d["mbu"] < 1
    for key in ("decode_step_bytes", "decode_step_flops", "decode_tokens_per_s_limit", "ttft_ms_limit",
                "decode_tokens_per_s_estimate", "ttft_ms_estimate", "estimate_median_abs_error"):  # fmt: skip
        assert d[key] > 0, key
    assert d["throughput"]["limit"]["concurrency"] == 1 and d["throughput"]["estimate"]["context_tokens"] == 4096
    assert d["throughput"]["limit"]["figure"] == "limit" and d["throughput"]["estimate"]["figure"] == "estimate"


def test_mla_deepseek_v3():
    r = bound("deepseek-v3", "h200", 8, 2, 1000)
    # one latent of 512 + 64 = 576 elements × 2 B = 1,152 B per token and layer, whole on every TP rank:
    # 61 layers × 1,152 = 70,272 B per token; 2 requests × 1,000 tokens × 70,272 = 140,544,000 B per GPU
    assert r.kv_read_bytes == 140_544_000
    # absorbed MLA decode: 2 × (2 × 512 + 64) = 2,176 FLOPs per head and cached token; 128 / 8 = 16 heads per GPU:
    # 2,176 × 1,000 × 16 × 61 layers × 2 requests = 4,247,552,000; linear 2 × 37,525,878,272 active × 2 / 8
    # = 18,762,939,136
    assert r.decode_step_flops == 18_762_939_136 + 4_247_552_000
    assert r.compute_dtype == "fp8"  # FP8 weights on Hopper: 2 × 989 TFLOP/s
    assert r.peak_tflops == pytest.approx(1978)


def test_sliding_window_reads_at_most_the_window():
    # Mistral-7B-v0.1: every layer slides over 4,096 tokens; 131,072 B per token → 536,870,912 B per request
    a = bound("mistral-7b-v0.1", "h100", 1, 3, 10_000)
    b = bound("mistral-7b-v0.1", "h100", 1, 3, 4096)
    assert a.kv_read_bytes == b.kv_read_bytes == 3 * 4096 * 131_072 == 1_610_612_736
    # Gemma 3 27B at 8,192: 10 full layers × 2 × 16 × 128 × 2 B = 81,920 B/token over 8,192 tokens, and 52 sliding
    # layers × 8,192 B = 425,984 B/token over 1,024 tokens: 671,088,640 + 436,207,616
    assert bound("gemma3-27b", "h200", 1, 1, 8192).kv_read_bytes == 1_107_296_256
    # prefill pairs: causal 10 tokens = 55; window 4: 4·5/2 + 6 × 4 = 34; chunks of 4: 2 × 10 + 3 = 23
    assert perf.causal_pairs(10, None) == 55
    assert perf.causal_pairs(10, 4) == 34
    assert perf.causal_pairs(10, 4, chunked=True) == 23


def test_moe_mixtral_experts_touched():
    # Mixtral 8x7B: one expert 176,160,768 params × 2 B = 352,321,536 B; 32 MoE layers, E = 8, k = 2.
    one = bound("mixtral-8x7b", "h200", 1, 1, 100)
    # N = 1 touches k = 2 experts: 93,400,000,000 − 32 × 6 × 352,321,536 = 25,754,265,088 B, less the input
    # embedding a lookup does not read (32,000 × 4,096 × 2 B = 262,144,000): 25,492,121,088 B
    assert one.experts_touched == pytest.approx(2)
    assert one.weights_read_bytes == 25_492_121_088
    # FLOPs: 2 × active 12,877,132,544 + attention 2 × 32 × 256 × 100 × 32 = 52,428,800
    assert one.decode_step_flops == 25_754_265_088 + 52_428_800
    # N = 2: 8 × (1 − (6/8)²) = 3.5 experts; 93.4e9 − 4.5 × 32 × 352,321,536 − 262,144,000 = 42,403,554,816
    two = bound("mixtral-8x7b", "h200", 1, 2, 100)
    assert two.experts_touched == pytest.approx(3.5)
    assert two.weights_read_bytes == 42_403_554_816
    assert perf.experts_touched(8, 2, 10**6) == pytest.approx(8)
    assert perf.experts_touched(8, 8, 1) == 8 and perf.experts_touched(8, 2, 0) == 0


def test_hybrid_state_jamba():
    r = bound("jamba-v0.1", "h200", 1, 3, 1000)
    # 4 attention layers × 2 × 8 × 128 × 2 B = 16,384 B/token: 3 × 1,000 × 16,384 = 49,152,000 B
    assert r.kv_read_bytes == 49_152_000
    # 28 Mamba layers, each conv (3, 8,192) + ssm (8,192, 16) in bf16 = (24,576 + 131,072) × 2 = 311,296 B,
    # read and written: 2 × 28 × 311,296 = 17,432,576 B per request, × 3
    assert r.state_rw_bytes == 52_297_728
    # MoE on 16 layers, E = 16, k = 2: 16 (1 − (14/16)³) = 5.28125 experts; 104e9 − 10.71875 × 16 × 352,321,536,
    # less the input embedding (65,536 × 4,096 × 2 B = 536,870,912)
    assert r.experts_touched == pytest.approx(5.28125)
    assert r.weights_read_bytes == 104_000_000_000 - 60_423_143_424 - 536_870_912
    assert any("state layers" in n for n in r.notes)


# --- properties ----------------------------------------------------------------------------------

MODELS = ["llama3-8b", "gemma3-27b", "deepseek-v2-lite", "mixtral-8x7b", "jamba-v0.1", "gpt-oss-20b", "llama4-scout"]
_FITS: dict = {}


def _fit(model: str, tp: int):
    key = (model, tp)
    if key not in _FITS:
        spec, g = load_bundled(model), get_gpu("h200")
        _FITS[key] = (spec, g, plan_fit(spec, g, FitOptions(tensor_parallel_size=tp, max_model_len=8192)))
    return _FITS[key]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    model=st.sampled_from(MODELS),
    tp=st.sampled_from([1, 2]),
    n=st.integers(1, 4096),
    dn=st.integers(0, 4096),
    t=st.integers(0, 300_000),
    dt=st.integers(0, 300_000),
    mbu=st.floats(0.05, 1.0),
)
def test_more_context_or_concurrency_never_lowers_tpot(model, tp, n, dn, t, dt, mbu):
    spec, g, f = _fit(model, tp)
    base = perf.bound(spec, g, f, n, t, mbu=mbu).tpot_ms
    assert perf.bound(spec, g, f, n + dn, t, mbu=mbu).tpot_ms >= base
    assert perf.bound(spec, g, f, n, t + dt, mbu=mbu).tpot_ms >= base
    assert perf.bound(spec, g, f, n + dn, t + dt, mbu=mbu).tpot_ms >= base


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    tpot=st.floats(8.0, 200.0),
    tighter=st.floats(0.3, 1.0),
    conc=st.integers(1, 20_000),
    tokens=st.integers(256, 16_384),
    model=st.sampled_from(["llama3-8b", "mixtral-8x7b"]),
)
def test_a_tighter_slo_never_lowers_the_gpu_count(tpot, tighter, conc, tokens, model):
    spec, g = load_bundled(model), get_gpu("h200")
    wl = workload_from_data({"classes": [{"name": "a", "concurrency": conc, "tokens": tokens}]}, "w")
    opts = FitOptions(tensor_parallel_size=2)
    loose = plan_layout(spec, g, wl, opts, slo=SLO(tpot_ms=tpot))
    tight = plan_layout(spec, g, wl, opts, slo=SLO(tpot_ms=tpot * tighter))
    if not tight.fits:
        return  # the tighter target cannot be met at all: no GPU count serves it
    assert loose.fits and tight.gpus >= loose.gpus


# --- fleet with SLOs ---------------------------------------------------------------------------


def _estimated_tpot(spec, g, fit, n: int, prompt: int, output: int) -> float:
    """TPOT (s) of n requests decoding at prompt + output // 2 with their successors' prefill mixed in: the
    estimate's decode step plus n × the prompt's prefill FLOPs time over its output steps."""
    hw = perf.hardware(g, fit.weights_dtype, eff=perf.estimate_efficiency(fit.engine, g))
    step = perf.step_bound(spec, fit, hw, [(n, prompt + output // 2)]).seconds
    return step + n * perf.prefill_interference_s(spec, fit, hw, prompt, output)


def test_fleet_sizes_by_the_tighter_of_memory_and_slo():
    spec, g = load_bundled("llama3-8b"), get_gpu("h200")
    wl = workload_from_data({"classes": [{"name": "chat", "concurrency": 50_000, "prompt_tokens": 768,
                                          "output_tokens": 256}]}, "w")  # fmt: skip
    assert wl.classes[0].tokens == 1024  # derived from the split
    opts = FitOptions()
    memory = plan_layout(spec, g, wl, opts, slo=SLO(max_num_seqs=False))
    assert memory.limit == "memory"
    fit = plan_fit(spec, g, FitOptions(max_model_len=1024))
    # the most requests whose estimated TPOT (their step + their successors' prefill) is within 25 ms
    cap = next(n for n in range(1, 100_000) if _estimated_tpot(spec, g, fit, n + 1, 768, 256) > 0.025)
    slo = plan_layout(spec, g, wl, opts, slo=SLO(tpot_ms=25, max_num_seqs=False))
    assert slo.replicas == max(memory.replicas, math.ceil(50_000 / cap))
    assert slo.limit == ("SLO" if slo.replicas > memory.replicas else "memory")
    assert slo.tpot_ms_estimate <= 25 and slo.requests_per_replica <= cap
    assert slo.tpot_ms_limit < slo.tpot_ms_estimate
    # max_num_seqs (vLLM 0.33 on H200: 1,024) holds a replica too
    seqs = plan_layout(spec, g, wl, opts)
    assert seqs.requests_per_replica <= fit.max_num_seqs
    assert seqs.limit in ("memory", "max_num_seqs")


def test_fleet_slo_misses_are_reasons():
    spec, g = load_bundled("llama3-8b"), get_gpu("l4")
    wl = workload_from_data({"classes": [{"name": "a", "concurrency": 10, "tokens": 4096}]}, "w")
    row = plan_layout(spec, g, wl, FitOptions(), slo=SLO(tpot_ms=1))
    assert not row.fits and row.reason.startswith("TPOT limit ") and "exceeds its target 1 ms" in row.reason
    assert row.reason.endswith("(no system is faster)")
    # above the limit but below the estimate: the estimate's reason
    lim = bound("llama3-8b", "l4", 1, 1, 4096).tpot_ms
    row = plan_layout(spec, g, wl, FitOptions(), slo=SLO(tpot_ms=lim * 1.05))
    assert not row.fits and row.reason.startswith("TPOT estimate ") and "no system" not in row.reason
    row = plan_layout(spec, g, wl, FitOptions(), slo=SLO(ttft_ms=1))
    assert not row.fits and "exceeds its target 1 ms" in row.reason and row.reason.startswith("TTFT limit")


def test_fleet_cli_slo_and_prices(cli):
    code, out, err = cli("fleet", "llama3-8b", "--concurrency", "5000", "--seq", "2k", "--gpu", "h100", "--tp", "1",
                         "--pp", "1", "--tpot-ms", "30", "--prompt-len", "1k", "--price", "h100=2", "--json")  # fmt: skip
    assert code == 0, err
    row = json.loads(out)["layouts"][0]
    assert row["tpot_ms_estimate"] <= 30 and row["limit"] in ("memory", "SLO", "max_num_seqs")
    per_hour = row["output_tokens_per_s_per_gpu"] * row["gpus"] * 3600
    assert row["usd_per_million_output_tokens"] == pytest.approx(row["cost_usd_per_hour"] / per_hour * 1e6)
    code, out, err = cli("fleet", "llama3-8b", "--concurrency", "5000", "--seq", "2k", "--gpu", "h100", "--tp", "1",
                         "--pp", "1", "--tpot-ms", "30", "--ttft-ms", "500")  # fmt: skip
    assert code == 0, err
    assert "limit (no system is faster) / estimate (sized with)" in out and "limit" in out
    code, _, err = cli("fleet", "llama3-8b", "--concurrency", "5", "--seq", "2k", "--tpot-ms", "-1")
    assert code == 2 and err == "kvplan: error: --tpot-ms: -1.0 must be a number of milliseconds > 0\n"


def test_workload_prompt_output_split():
    wl = workload_from_data({"classes": [{"concurrency": 1, "tokens": "2k", "output_tokens": 512}]}, "w.yaml")
    c = wl.classes[0]
    assert (c.prompt_tokens, c.output_tokens) == (1536, 512)
    assert SLO().context(c) == 1536 + 256 and SLO().prompt(c) == 1536
    plain = workload_from_data({"classes": [{"concurrency": 1, "tokens": 2048}]}, "w.yaml").classes[0]
    assert SLO().context(plain) == 2048 and SLO(prompt_len=1024).context(plain) == 1024 + 512
    with pytest.raises(UsageError, match=r"classes\[0\]: prompt_tokens \+ output_tokens must equal tokens=2048"):
        workload_from_data({"classes": [{"concurrency": 1, "tokens": 2048, "prompt_tokens": 100,
                                         "output_tokens": 100}]}, "w.yaml")  # fmt: skip


# --- fit CLI, spec moe block, plot ----------------------------------------------------------------


def test_fit_speed_section_only_when_asked(cli):
    code, out, _ = cli("fit", "llama3-8b", "--gpu", "h100")
    assert code == 0 and "Speed bound" not in out
    code, out, _ = cli("fit", "mixtral-8x7b", "--gpu", "h200", "--concurrency", "8", "--context", "2k")
    assert code == 0
    assert "limit (MBU = MFU = 1, no fixed costs: no system is faster):" in out and "TTFT >=" in out
    assert "estimate (vllm on nvidia-hopper: MBU " in out and "median |error|" in out
    assert "distinct experts per layer" in out


def test_fit_speed_errors(cli):
    code, _, err = cli("fit", "llama3-8b", "--gpu", "h100", "--mbu", "1.5")
    assert code == 2 and err == "kvplan: error: --mbu: 1.5 must be a number in [0.01, 1] (1 = the physical limit)\n"
    for flag, value in (("--mfu", "1e-320"), ("--mbu", "1e-300"), ("--mbu", "0.001")):
        code, out, err = cli("fit", "llama3-8b", "--gpu", "h100", flag, value, "--json")
        assert code == 2 and out == "" and err.count("\n") == 1 and "[0.01, 1]" in err
    code, _, err = cli("fit", "llama3-8b", "--gpu", "80GiB", "--concurrency", "2")
    assert code == 2 and "no memory bandwidth known, so no speed figures" in err
    code, out, err = cli("fit", "llama3-8b", "--gpu", "80GiB", "--json")  # no flag: keys null, no error
    assert code == 0 and json.loads(out)["tpot_ms_limit"] is None and json.loads(out)["tpot_ms_estimate"] is None
    code, _, err = cli("fit", "llama3-8b", "--gpu", "h100", "--concurrency", "5000", "--context", "8k")
    assert code == 0 and "kvplan: warning: --concurrency 5,000: only" in err


def _spec(**moe):
    data = {"name": "m", "source": "x", "num_layers": 2, "num_q_heads": 4, "num_kv_heads": 2, "head_dim": 8,
            "dtype": "bf16", "max_model_len": 64, "param_count": 1000, "moe": moe}  # fmt: skip
    return build_spec(data, "m.yaml")


def test_spec_moe_block():
    s = _spec(num_experts=4, experts_per_token=2, expert_param_count=100)
    assert s.moe.num_moe_layers == 2 and s.active_param_count == 1000 - 2 * 2 * 100
    s = _spec(num_experts=4, experts_per_token=1, expert_param_count=50, num_shared_experts=1, num_moe_layers=1)
    assert s.moe.shared_param_count == 50 and s.active_param_count == 1000 - 3 * 50
    for moe, message in (
        ({"num_experts": 4, "experts_per_token": 5, "expert_param_count": 1}, "moe.experts_per_token=5 must not exceed"),
        ({"num_experts": 4, "experts_per_token": 1}, "moe.expert_param_count is missing"),
        ({"num_experts": 4, "experts_per_token": 1, "expert_param_count": 1, "num_moe_layers": 3}, "must not exceed num_layers=2"),
        ({"num_experts": 8, "experts_per_token": 1, "expert_param_count": 100}, "more than param_count=1,000"),
        ({"num_experts": 4, "experts_per_token": 1, "expert_param_count": 1, "top_k": 2}, "unknown key moe.'top_k'"),
    ):  # fmt: skip
        with pytest.raises(SpecError, match=re.escape(message)):
            _spec(**moe)


def test_bundled_moe_active_params_match_model_cards():
    # active parameters the model cards give (billions), within the rounding of param_count
    for name, active in (("mixtral-8x7b", 12.9), ("qwen3-30b-a3b", 3.3), ("qwen3-235b-a22b", 22), ("deepseek-v3", 37)):
        assert load_bundled(name).active_param_count / 1e9 == pytest.approx(active, rel=0.03)


def test_plot_throughput(tmp_path):
    pytest.importorskip("matplotlib")
    from kvplan import plot

    out = tmp_path / "t.png"
    path, data = plot.plot_throughput(load_bundled("llama3-8b"), [get_gpu("h100"), get_gpu("l4")], 4096, out)
    assert path == out and out.stat().st_size > 0
    h100 = data.curves[0]
    assert h100.memory_wall in data.points and all(
        a <= b for a, b in zip(h100.tokens_per_s, h100.limit_tokens_per_s, strict=True)
    )
    assert list(h100.tokens_per_s) == sorted(h100.tokens_per_s)  # more requests never lower the bound


def test_chunked_layers_read_at_most_one_chunk_per_decode_step():
    # Llama 4 Scout (text_config: 48 layers, every 4th (NoPE) global, the other 36 chunked attention of
    # attention_chunk_size 8,192; 8 KV heads of 128, bf16). At TP 4 a GPU holds 2 KV heads: 2 × 2 × 128 × 2 B =
    # 1,024 B per token and layer. One request with 131,072 tokens cached reads
    #   12 global layers × 131,072 + 36 chunked layers × 8,192 (at most one chunk) = 1,867,776 token-layers
    #   × 1,024 B = 1,912,602,624 B per GPU (reading every token in every layer would be 6,442,450,944 B)
    spec, g = load_bundled("llama4-scout"), get_gpu("h200")
    f = plan_fit(spec, g, FitOptions(tensor_parallel_size=4, max_model_len=131072))
    r = perf.bound(spec, g, f, 1, 131072)
    assert r.kv_read_bytes == 1_912_602_624
    assert perf.bound(spec, g, f, 1, 8192).kv_read_bytes == 48 * 8192 * 1024  # within one chunk: every token
