"""kvplan fleet (issue 18): exact latency packing, the layouts engines offer (TP × PP, expert and attention data
parallelism), the engines' load-time checks, per-class SLOs, disaggregated prefill/decode."""

from __future__ import annotations

import json
import math
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvplan import perf
from kvplan.api import fit as api_fit
from kvplan.errors import LoadRefused, UsageError
from kvplan.fit import FitOptions, plan_fit
from kvplan.fleet import (
    SLO,
    low_end_gpus,
    pack_limited,
    plan_disaggregated,
    plan_fleet,
    plan_layout,
    workload_from_data,
)
from kvplan.gpus import get_gpu
from kvplan.loader import load_bundled
from kvplan.options import Engine

GIB = 1 << 30


def single(conc: int, tokens, **extra):
    return workload_from_data({"classes": [{"name": "c", "concurrency": conc, "tokens": tokens, **extra}]}, "w")


# --- 1. the SLO bug: a target the plan meets changes nothing -------------------------------------------------


@pytest.mark.parametrize("conc", [250, 280, 320, 325])
def test_a_loose_tpot_target_never_doubles_the_replicas_70b(conc):
    # the cases: Llama-3.1-70B, 8k tokens, one H200 node at TP 8, --tpot-ms 1000 gave 2 replicas at 280
    # and 325 (each request's share of a replica's time was rounded up, so n requests of a class capped at n
    # cost more than the whole replica)
    spec, g = load_bundled("llama3.1-70b"), get_gpu("h200")
    wl, opts = single(conc, "8k"), FitOptions(tensor_parallel_size=8)
    plain = plan_layout(spec, g, wl, opts)
    slo = plan_layout(spec, g, wl, opts, slo=SLO(tpot_ms=1000))
    assert plain.replicas == slo.replicas == 1 and slo.limit == "memory"
    assert slo.requests_per_replica == conc


@pytest.mark.parametrize("conc", [7, 13, 29, 31, 37, 41, 43, 47])
def test_a_loose_tpot_target_never_doubles_the_replicas_8b(conc):
    # the same on one H100 with Llama-3.1-8B (concurrencies that do not divide 10^12)
    spec, g = load_bundled("llama3.1-8b"), get_gpu("h100")
    wl = single(conc, "8k")
    assert plan_layout(spec, g, wl, FitOptions()).replicas == 1
    assert plan_layout(spec, g, wl, FitOptions(), slo=SLO(tpot_ms=1000)).replicas == 1


def test_pack_limited_asks_the_time_check_about_the_mix_a_replica_holds():
    # memory: 10 units; class 0 takes 1, class 1 takes 2. The check allows 6 requests of weight 1 (class 0) or
    # 2 (class 1) per replica: 4 of class 1 (weight 8) is too many; 3 (6) fits; then class 0 fills nothing
    # more; a fresh replica takes 1 of class 1 and 4 of class 0 (2 + 4 = 6); the last 2 of class 0 a third.
    def ok(counts: dict) -> bool:
        return counts.get(0, 0) + 2 * counts.get(1, 0) <= 6

    replicas, used, most, groups = pack_limited(10, [(6, 1, 0), (4, 2, 0)], time_ok=ok)
    assert replicas == 3
    assert sorted(sorted(c.items()) for _, c in groups) == [[(0, 2)], [(0, 4), (1, 1)], [(1, 3)]]
    assert used == (6 * 1 + 4 * 2,) and most == 5
    # a check that never binds gives the plain packing
    assert (
        pack_limited(10, [(6, 1, 0), (4, 2, 0)], time_ok=lambda c: True)[:3]
        == pack_limited(10, [(6, 1, 0), (4, 2, 0)])[:3]
    )


CLASS = st.fixed_dictionaries(
    {
        "concurrency": st.integers(1, 3000),
        "prompt_tokens": st.integers(16, 12_000),
        "output_tokens": st.integers(1, 4000),
        "shared_prefix": st.sampled_from([0, 0, 256]),
    }
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    classes=st.lists(CLASS, min_size=1, max_size=3),
    model=st.sampled_from(["llama3-8b", "mixtral-8x7b", "qwen3-30b-a3b"]),
    gpu=st.sampled_from(["h100", "h200", "l40s"]),
    tp=st.sampled_from([1, 2]),
    margin=st.floats(1.0001, 50.0),  # above the plan's own TPOT (equal to it is float rounding away)
)
def test_a_target_above_the_plans_own_tpot_never_changes_the_plan(classes, model, gpu, tp, margin):
    spec, g = load_bundled(model), get_gpu(gpu)
    data = [dict(c, name=f"c{i}", shared_prefix=min(c["shared_prefix"], c["prompt_tokens"] - 1))
            for i, c in enumerate(classes)]  # fmt: skip
    wl = workload_from_data({"classes": data}, "w")
    opts = FitOptions(tensor_parallel_size=tp)
    plain = plan_layout(spec, g, wl, opts)
    if not plain.fits:
        return
    target = plain.tpot_ms_estimate * margin
    for slo, w in (
        (SLO(tpot_ms=target), wl),  # the flag
        (SLO(), workload_from_data({"classes": [dict(c, tpot_ms=target) for c in data]}, "w")),  # per class
    ):
        row = plan_layout(spec, g, w, opts, slo=slo)
        assert (row.replicas, row.requests_per_replica, row.kv_bytes_needed_per_gpu) == (
            plain.replicas,
            plain.requests_per_replica,
            plain.kv_bytes_needed_per_gpu,
        )
        assert row.limit == plain.limit and row.tpot_ms_estimate == pytest.approx(plain.tpot_ms_estimate)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    conc=st.integers(1, 20_000),
    more=st.integers(1, 5_000),
    prompt=st.integers(64, 8192),
    output=st.integers(16, 2048),
    tpot=st.floats(10.0, 400.0),
    model=st.sampled_from(["llama3-8b", "mixtral-8x7b"]),
)
def test_more_concurrency_never_needs_fewer_replicas(conc, more, prompt, output, tpot, model):
    spec, g = load_bundled(model), get_gpu("h200")
    opts, slo = FitOptions(), SLO(tpot_ms=tpot)
    a = plan_layout(spec, g, single(conc, prompt + output, prompt_tokens=prompt), opts, slo=slo)
    b = plan_layout(spec, g, single(conc + more, prompt + output, prompt_tokens=prompt), opts, slo=slo)
    assert a.fits == b.fits
    if a.fits:
        assert b.replicas >= a.replicas
        assert b.tpot_ms_estimate <= tpot and a.tpot_ms_estimate <= tpot


# --- 5. per-class SLOs in the workload ---------------------------------------------------------------------


def test_workload_per_class_targets_and_derived_tokens():
    wl = workload_from_data(
        {
            "classes": [
                {"name": "chat", "concurrency": 10, "prompt_tokens": "1k", "output_tokens": 256, "tpot_ms": 40},
                {"name": "batch", "concurrency": 5, "tokens": "8k", "ttft_ms": 5000},
            ]
        },  # fmt: skip
        "w.yaml",
    )
    chat, batch = wl.classes
    assert (chat.tokens, chat.tpot_ms, chat.ttft_ms) == (1280, 40.0, None)
    slo = SLO(tpot_ms=100, ttft_ms=900)
    assert (slo.tpot(chat), slo.ttft(chat), slo.tpot(batch), slo.ttft(batch)) == (40.0, 900, 100, 5000.0)
    for data, message in (
        ({"concurrency": 1, "prompt_tokens": 100}, "classes[0] is missing tokens (or prompt_tokens and output_tokens"),
        ({"concurrency": 1, "tokens": 10, "tpot_ms": 0}, "classes[0].tpot_ms: 0 must be a number of milliseconds > 0"),
        ({"concurrency": 1, "tokens": 10, "ttft_ms": "fast"}, "classes[0].ttft_ms: 'fast' must be a number"),
        (
            {"concurrency": 1, "tokens": 10, "prompt_tokens": 4, "output_tokens": 4},
            "classes[0]: prompt_tokens + output_tokens must",
        ),
    ):
        with pytest.raises(UsageError, match=re.escape("w.yaml: " + message)):
            workload_from_data({"classes": [data]}, "w.yaml")


def test_per_class_targets_hold_each_class():
    # a tight target for one class only: its requests sit in replicas that meet it, the other class's do not
    # need to (mixing them would hold the loose class to the tight target)
    spec, g = load_bundled("llama3-8b"), get_gpu("h100")
    loose = plan_layout(spec, g, workload_from_data({"classes": [
        {"name": "a", "concurrency": 400, "prompt_tokens": 1000, "output_tokens": 200},
        {"name": "b", "concurrency": 400, "prompt_tokens": 1000, "output_tokens": 200}]}, "w"), FitOptions())  # fmt: skip
    tight = plan_layout(spec, g, workload_from_data({"classes": [
        {"name": "a", "concurrency": 400, "prompt_tokens": 1000, "output_tokens": 200, "tpot_ms": 12},
        {"name": "b", "concurrency": 400, "prompt_tokens": 1000, "output_tokens": 200}]}, "w"), FitOptions())  # fmt: skip
    assert tight.fits and tight.replicas > loose.replicas and tight.limit == "SLO"


# --- 2, 3. the layouts engines offer --------------------------------------------------------------------


def test_deepseek_v3_on_h20_finds_pipeline_parallelism_by_default():
    spec, g = load_bundled("deepseek-v3"), get_gpu("h20")
    from kvplan.fleet import load_workload

    from .conftest import ROOT

    wl = load_workload(ROOT / "examples/chat-and-rag.yaml")
    rows = [r for r in plan_fleet(spec, wl, [g], FitOptions()) if r.fits]
    best = rows[0]
    tp8 = next(r for r in rows if r.layout == "TP 8")
    tp8pp2 = next(r for r in rows if r.layout == "TP 8 × PP 2")
    assert best.best_for_gpu and best.pipeline_parallel_size > 1 and best.gpus * 10 < tp8.gpus
    # PP alone (the weights halve per GPU: of ~88 GiB usable on an H20, TP 8 leaves ~6.1 GiB of KV budget,
    # TP 8 × PP 2 ~45 GiB, over 7×) already needs far fewer GPUs than TP 8
    assert tp8pp2.gpus * 5 < tp8.gpus and tp8pp2.kv_budget_bytes_per_gpu > 7 * tp8.kv_budget_bytes_per_gpu
    assert best.why.startswith(f"{best.gpus:,} GPUs vs {tp8.gpus:,} for TP 8: KV budget")


def test_vllm_layouts_and_expert_split_weights():
    from kvplan import engines

    spec = load_bundled("deepseek-v3")
    eng = engines.get("vllm")
    layouts = eng.layouts(spec, [1, 8], [1])
    assert dict(tensor_parallel_size=8, pipeline_parallel_size=1) in layouts
    assert dict(tensor_parallel_size=8, pipeline_parallel_size=1, enable_expert_parallel=True) in layouts
    assert (
        dict(tensor_parallel_size=1, pipeline_parallel_size=1, data_parallel_size=8, enable_expert_parallel=True)
        in layouts
    )
    assert eng.layouts(load_bundled("llama3-8b"), [1, 8], [1]) == [
        dict(tensor_parallel_size=t, pipeline_parallel_size=1) for t in (1, 8)
    ]
    g = get_gpu("h200")
    dp = plan_fit(spec, g, FitOptions(data_parallel_size=8, enable_expert_parallel=True, max_model_len=32768))
    tp = plan_fit(spec, g, FitOptions(tensor_parallel_size=8, max_model_len=32768))

    # weights: routed experts 58 layers × 256 × 44,040,192 params, FP8, split over EP 8 (32 experts each); the
    # rest (671e9 − 653,894,770,176 = 17,105,229,824 params, 1,853,358,080 of them kept in bf16) on every GPU
    # (FP8: 1 B per parameter + an fp32 scale per 128 × 128 block, 4 × ceil(params / 16,384))
    def fp8(params):
        return params + 4 * -(-params // 16_384)

    routed = 58 * 256 * 44_040_192
    total = fp8(671_000_000_000 - 1_853_358_080) + 2 * 1_853_358_080
    rest_bytes = total - fp8(routed)
    assert dp.weights_bytes == rest_bytes + -(-fp8(routed) * 32 // 256)
    assert tp.weights_bytes == -(-total // 8)
    assert (dp.data_parallel_size, dp.expert_parallel_size, dp.gpus_per_replica) == (8, 8, 8)
    # the MLA latent is on every TP rank, so TP 8 holds each request 8 times; DP attention holds it once:
    # per replica 8 groups × their own requests
    assert dp.kv_bytes_per_request == tp.kv_bytes_per_request  # one latent per GPU per request either way
    assert 8 * dp.max_concurrent_requests > 4 * tp.max_concurrent_requests


def test_sglang_layouts_and_its_refusals():
    from kvplan import engines

    eng = engines.get("sglang")
    spec = load_bundled("qwen3-235b-a22b")
    assert dict(tensor_parallel_size=8, pipeline_parallel_size=1, expert_parallel_size=8, data_parallel_size=8) in (
        eng.layouts(spec, [8], [1])
    )
    par = eng.parallel(spec, FitOptions(engine=Engine.sglang, tensor_parallel_size=8, data_parallel_size=4,
                                        expert_parallel_size=8))  # fmt: skip
    assert (par.attn_tp, par.attn_dp, par.ep, par.moe_tp, par.gpus) == (2, 4, 8, 1, 8)
    for opts, message in (
        (
            dict(tensor_parallel_size=8, data_parallel_size=3),
            "--attn-dp-size 3: SGLang runs attention DP inside the TP",
        ),
        (dict(tensor_parallel_size=8, expert_parallel_size=3), "--ep-size: tp_size 8 must be divisible by ep_size 3"),
    ):
        with pytest.raises(UsageError, match=message):
            eng.parallel(spec, FitOptions(engine=Engine.sglang, **opts))
    with pytest.raises(UsageError, match="no moe facts"):
        eng.parallel(load_bundled("llama3-8b"), FitOptions(engine=Engine.sglang, tensor_parallel_size=2,
                                                           expert_parallel_size=2))  # fmt: skip


def test_other_engines_refuse_data_and_expert_parallelism():
    with pytest.raises(UsageError, match="expert and attention data parallelism for vLLM and SGLang only"):
        api_fit("mixtral-8x7b", "h100", engine="trtllm", tp=2, enable_expert_parallel=True)


# --- 4. the engines' load-time checks -----------------------------------------------------------------------

SGLANG_FP8_MESSAGE = (
    '"For quantized MoE models, please make sure (moe_intermediate_size=1536 / moe_tp_size=8) % '
    "weight_block_size_n=128 == 0 where moe_tp_size is equal to tp_size (8) divided by ep_size (1). You can fix "
    'this by setting arguments `--tp` and `--ep` correctly."'
)


def test_qwen3_235b_fp8_at_tp8_refused_with_the_engines_reason_and_works_with_ep():
    # SGLang 0.5.23 model_runner_components/moe_ep_setup.py check_quantized_moe_compatibility: 1536 / 8 = 192
    with pytest.raises(LoadRefused) as e:
        api_fit("qwen3-235b-a22b-fp8", "h200", engine="sglang", tp=8)
    assert str(e.value).endswith(SGLANG_FP8_MESSAGE)
    ok = api_fit("qwen3-235b-a22b-fp8", "h200", engine="sglang", tp=8, ep_size=8)
    assert ok.fits and ok.expert_parallel_size == 8 and ok.moe_tensor_parallel_size == 1
    # vLLM before 0.29: validate_fp8_block_shape_moe refuses; with EP each GPU holds whole experts (1536 wide)
    with pytest.raises(LoadRefused, match=r"The output_size of gate's and up's weight = 192 is not divisible by "
                                          r"weight quantization block_n = 128\."):  # fmt: skip
        api_fit("qwen3-235b-a22b-fp8", "h200", tp=8, engine_version="0.28")
    assert api_fit("qwen3-235b-a22b-fp8", "h200", tp=8, engine_version="0.28", enable_expert_parallel=True).fits
    # vLLM 0.33 loads it, refining the scales to gcd(128, 128, 192, 4096) = 64 (fused_moe/oracle/fp8.py)
    r = api_fit("qwen3-235b-a22b-fp8", "h200", tp=8)
    assert r.fits and r.load_notes and "[64, 64]" in r.load_notes[0]
    # the BF16 release has no blocks to check; TP 4 slices 384 = 3 × 128 columns
    assert api_fit("qwen3-235b-a22b", "h200", engine="sglang", tp=8).fits
    assert api_fit("qwen3-235b-a22b-fp8", "h200", engine="sglang", tp=4).fits


def test_fp8_refusal_in_fit_and_fleet(cli):
    code, out, err = cli("fit", "qwen3-235b-a22b-fp8", "--gpu", "h200", "--engine", "sglang", "--tp", "8")
    assert (code, out) == (2, "") and err.count("\n") == 1 and SGLANG_FP8_MESSAGE in err
    code, out, err = cli("fit", "qwen3-235b-a22b-fp8", "--gpu", "h200", "--engine", "sglang", "--tp", "8", "--ep", "8")
    assert code == 0, err
    code, out, err = cli("fleet", "qwen3-235b-a22b-fp8", "--concurrency", "100", "--seq", "8k", "--gpu", "h200",
                         "--engine", "sglang", "--tp", "8", "--pp", "1", "--all", "--json")  # fmt: skip
    assert code == 0, err
    rows = {r["layout"]: r for r in json.loads(out)["layouts"]}
    assert not rows["TP 8"]["fits"] and rows["TP 8"]["reason"].endswith(SGLANG_FP8_MESSAGE)
    assert rows["TP 8, EP 8"]["fits"] and rows["TP 1 × DP 8, EP 8"]["fits"]


def test_fp8_dense_row_parallel_check():
    # vLLM 0.33 / SGLang validate_fp8_block_shape: a row-parallel layer's input slice must be a multiple of
    # block_k. DeepSeek-V3's dense MLP (intermediate 18,432) at TP 32: 576 per GPU = 4.5 blocks of 128
    from kvplan.engines.base import fp8_dense_checks

    spec = load_bundled("deepseek-v3")
    fp8_dense_checks(spec, 16, "vLLM", "fp8_utils.py")  # 1,152 = 9 × 128
    with pytest.raises(LoadRefused, match=r"down_proj: 18432 / 32 = 576 per GPU.*input_size_per_partition = 576 is "
                                          r"not divisible by weight quantization block_k = 128"):  # fmt: skip
        fp8_dense_checks(spec, 32, "vLLM", "fp8_utils.py")


def test_readers_take_block_size_and_moe_width_from_config_json():
    from kvplan.readers import spec_from_hf_config

    from .conftest import ROOT

    config = json.loads((ROOT / "tests/fixtures/hf_configs/deepseek-v3.json").read_text())
    spec = spec_from_hf_config(config, "deepseek-ai/DeepSeek-V3/config.json")
    assert (spec.weight_block_size, spec.moe_intermediate_size) == ((128, 128), 2048)


# --- fit takes the same flags, engine spellings too -------------------------------------------------------


def test_fit_takes_the_layout_flags(cli):
    code, out, err = cli("fit", "deepseek-v3", "--gpu", "h200", "-dp", "8", "--enable-expert-parallel",
                         "--max-model-len", "32k", "--json")  # fmt: skip
    assert code == 0, err
    d = json.loads(out)
    assert (d["data_parallel_size"], d["expert_parallel_size"], d["attention_tensor_parallel_size"]) == (8, 8, 1)
    assert d["parallel_flags"] == "--data-parallel-size 8 --enable-expert-parallel"
    code, out, err = cli("fit", "qwen3-235b-a22b", "--gpu", "h200", "--engine", "sglang", "--tp-size", "8",
                         "--dp-size", "8", "--enable-dp-attention", "--expert-parallel-size", "8", "--json")  # fmt: skip
    assert code == 0, err
    d = json.loads(out)
    assert (d["data_parallel_size"], d["attention_tensor_parallel_size"], d["expert_parallel_size"]) == (8, 1, 8)
    code, out, err = cli("fit", "qwen3-235b-a22b", "--gpu", "h200", "--engine", "sglang", "--dp-size", "8")
    assert code == 2 and "--dp-size: SGLang's --dp-size alone runs that many replicas" in err


# --- disaggregated prefill / decode ------------------------------------------------------------------------


def test_disaggregated_plans_both_pools_and_the_kv_transfer():
    spec, g = load_bundled("llama3.1-8b"), get_gpu("h100")
    wl = workload_from_data({"classes": [{"name": "chat", "concurrency": 2000, "prompt_tokens": 1024,
                                          "output_tokens": 512}]}, "w")  # fmt: skip
    plan = plan_disaggregated(spec, wl, [g], FitOptions(), tps=[1], pps=[1], slo=SLO(tpot_ms=50, ttft_ms=1000))
    pre = next(r for r in plan.prefill if r.fits)
    dec = next(r for r in plan.decode if r.fits)
    assert plan.gpus == pre.gpus + dec.gpus and plan.aggregated is not None
    # KV of a 1,024-token prompt under vLLM 0.33 (16-token blocks): 64 blocks × 16 × 131,072 B = 134,217,728 B
    (x,) = plan.transfers
    assert x.bytes_per_request == x.bytes_per_gpu == 1024 * 131_072
    assert x.transfer_ms == pytest.approx(1024 * 131_072 / 50e9 * 1e3)
    # Little's law: requests finish at the decode fleet's tokens/s over 512 output tokens each
    assert x.requests_per_s == pytest.approx(dec.output_tokens_per_s_per_gpu * dec.gpus / 512)
    assert pre.prompt_tokens_per_s_needed == pytest.approx(x.requests_per_s * 1024)
    assert pre.replicas == math.ceil(pre.prompt_tokens_per_s_needed / pre.prompt_tokens_per_s_per_replica - 1e-9)
    # the decode pool pays no prefill in its steps: its TPOT is below the aggregated plan's at the same mix
    assert dec.tpot_ms_estimate <= 50 and pre.ttft_ms_estimate <= 1000
    # a class without a split cannot be planned apart
    with pytest.raises(UsageError, match="--disaggregated: class c has no prompt/output split"):
        plan_disaggregated(spec, single(10, "4k"), [g], FitOptions())


def test_disaggregated_cli(cli):
    code, out, err = cli("fleet", "llama3.1-8b", "--concurrency", "2000", "--seq", "1536", "--prompt-len", "1024",
                         "--gpu", "h100", "--tp", "1", "--pp", "1", "--disaggregated", "--tpot-ms", "50",
                         "--ttft-ms", "1000")  # fmt: skip
    assert code == 0, err
    assert "prefill: " in out and "decode:  " in out and "KV transfer, class requests: 134,217,728 B per request" in out
    assert "aggregated (same workload and targets):" in out
    code, out, err = cli("fleet", "llama3.1-8b", "--concurrency", "20", "--seq", "1536", "--prompt-len", "1024",
                         "--gpu", "h100", "--tp", "1", "--pp", "1", "--disaggregated", "--json")  # fmt: skip
    assert code == 0, err
    d = json.loads(out)
    assert d["kv_transfer"][0]["bytes_per_request"] == 134_217_728 and d["kv_link_gbs"] == 50.0
    assert d["gpus"] == d["prefill"][0]["gpus"] + d["decode"][0]["gpus"]
    code, _, err = cli("fleet", "llama3.1-8b", "--concurrency", "20", "--seq", "1536", "--disaggregated", "--csv")
    assert code == 2 and "--csv: not with --disaggregated" in err


def test_estimate_is_what_fleet_sizes_with_and_limit_what_it_refuses_with():
    spec, g = load_bundled("llama3-8b"), get_gpu("h100")
    wl = single(100, 2048, prompt_tokens=1024)
    fit = plan_fit(spec, g, FitOptions(max_model_len=2048))
    one_limit = perf.bound(spec, g, fit, 1, 1536).tpot_ms
    row = plan_layout(spec, g, wl, FitOptions(), slo=SLO(tpot_ms=one_limit * 0.99))
    assert not row.fits and "(no system is faster)" in row.reason


def test_a_tie_goes_to_the_layout_whose_gpus_hold_over_the_budget_range():
    # DeepSeek-V3 on H20, 100 × 8k: TP 1 × DP 2 × PP 4, EP 2 ties at 16 GPUs but needs 2 or more replicas of 8
    # over the modelled budget's range (its ends come from the corpus residuals, docs/budget-validation.md, so
    # they are not pinned here); it won by "smaller replica" before. A 16-GPU layout of one replica over the
    # whole range wins now, and the why-line says the range decided it.
    spec, g = load_bundled("deepseek-v3"), get_gpu("h20")
    wl = workload_from_data({"classes": [{"name": "r", "concurrency": 100, "tokens": "8k"}]}, "w.yaml")
    rows = [r for r in plan_fleet(spec, wl, [g], FitOptions()) if r.fits]
    small = next(r for r in rows if r.layout == "TP 1 × DP 2 × PP 4, EP 2")
    assert (small.gpus, small.replicas_low, small.gpus_per_replica) == (16, 2, 8)
    assert small.replicas_high > small.replicas_low
    best = rows[0]
    assert best.best_for_gpu and best.gpus == 16 and best.replicas_low == best.replicas_high == 1
    assert best.layout == "TP 8 × DP 2, EP 16"  # then the existing rule among those: fewest stages, least DP
    assert re.search(
        r"; it holds its 16 GPUs over the budget range, where TP 1 × DP 2 × PP 4, EP 2 \(also 16\) needs 16–(\d+)$",
        best.why,
    ).group(1) == str(8 * small.replicas_high)
    # among equal GPUs the range comes before cost: a cheaper price does not make the multi-replica layout win
    assert all(low_end_gpus(r) >= low_end_gpus(best) for r in rows if r.gpus == best.gpus)


def test_the_budget_range_tie_break_in_the_why_line_against_its_rival():
    from kvplan.fleet import why_best

    spec, g = load_bundled("deepseek-v3"), get_gpu("h20")
    wl = workload_from_data({"classes": [{"name": "r", "concurrency": 100, "tokens": "8k"}]}, "w.yaml")
    rows = [r for r in plan_fleet(spec, wl, [g], FitOptions()) if r.fits]
    pair = [r for r in rows if r.layout in ("TP 1 × DP 2 × PP 4, EP 2", "TP 8 × PP 2")]
    best = next(r for r in pair if r.layout == "TP 8 × PP 2")
    rival = next(r for r in pair if r.layout == "TP 1 × DP 2 × PP 4, EP 2")
    high = rival.replicas_high * rival.gpus_per_replica  # the range's high end: from the residuals, not pinned
    assert why_best(best, pair) == (
        f"ties TP 1 × DP 2 × PP 4, EP 2 at 16 GPUs and holds them over the budget range (16 vs 16–{high} GPUs): "
        + why_best(best, pair).split(": ", 1)[1]
    )
