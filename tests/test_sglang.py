"""``kvplan fit/fleet/sweep --engine sglang`` beyond the golden rows (kvplan.engines.sglang).

tests/test_sglang_golden.py checks the rules row by row against SGLang 0.5.23's own planning
(tests/fixtures/sglang_golden.json); here: the bundled specs plan as the config.json SGLang read, the sweep and
fleet use the same pools and cap, and the SGLang flags parse, print and refuse as the CLI should.
"""

from __future__ import annotations

import json

import pytest

from kvplan.engines import sglang as sglang_rules
from kvplan.fit import Engine, FitOptions, plan_fit
from kvplan.fleet import plan_fleet, workload_from_data
from kvplan.gpus import get_gpu
from kvplan.loader import load_bundled
from kvplan.sweep import sweep
from tests import test_sglang_golden as golden

GIB = 1 << 30
# bundled spec -> the fixture model of the same config.json
BUNDLED = {
    "llama3.1-8b": "llama3.1-8b", "qwen3-30b-a3b": "qwen3-30b-a3b", "mistral-7b-v0.1": "mistral-7b-v0.1",
    "gemma2-9b": "gemma2-9b", "gemma4-26b-a4b": "gemma4-26b-a4b", "gemma4-31b": "gemma4-31b-nvfp4",
    "gpt-oss-20b": "gpt-oss-20b", "gpt-oss-120b": "gpt-oss-120b", "llama4-scout": "llama4-scout",
    "deepseek-v3": "deepseek-v3", "deepseek-v3.2": "deepseek-v3.2", "kimi-k2": "kimi-k2",
    "qwen3-next-80b-a3b": "qwen3-next-80b-a3b", "qwen3.5-0.8b": "qwen3.5-0.8b", "qwen3.5-122b-a10b": "qwen3.5-122b-a10b",
    "nemotron-3-nano-30b-a3b": "nemotron-3-nano-30b-a3b", "granite-4.0-h-tiny": "granite-4.0-h-tiny",
    "falcon-h1-7b": "falcon-h1-7b",
}  # fmt: skip


def rows(model: str, **match) -> list[dict]:
    """The fixture's planned KV rows of ``model`` with default flags (and the given fields)."""
    return [
        r for r in golden.FIXTURE["kv_rows"]
        if r["model"] == model and r["ok"] and not r["flags"] and all(r[k] == v for k, v in match.items())
    ]  # fmt: skip


def opts_of(row: dict, **kw) -> FitOptions:
    return FitOptions(
        engine=Engine.sglang, tensor_parallel_size=row["tp"], block_size=row["page_size"],
        kv_dtype=None if row["kv_cache_dtype"] == "auto" else row["kv_cache_dtype"],
        max_model_len=row["context_length"], kv_cache_memory_bytes=golden.pool_budget(row), **kw,
    )  # fmt: skip


@pytest.mark.parametrize("bundled", list(BUNDLED))
def test_bundled_specs_plan_as_the_config_sglang_read(bundled):
    # a bundled spec carries what SGLang's rules read (architecture, multimodal encoder) so that `kvplan fit
    # gemma4-26b-a4b --engine sglang` gets the pools of SGLang's run on its config.json
    spec = load_bundled(bundled)
    checked = 0
    for r in rows(BUNDLED[bundled], context_length=4096, page_size=1):
        fit = plan_fit(spec, get_gpu("h100"), opts_of(r))
        assert fit.kv_capacity_tokens == r["result"]["max_total_num_tokens"], (bundled, r["tp"], r["kv_cache_dtype"])
        assert fit.max_num_seqs == r["result"]["max_running_requests"]
        if r["result"].get("swa_max_total_num_tokens") is not None:
            assert dict((n, c) for n, c, _ in fit.pools)["swa tokens"] == r["result"]["swa_max_total_num_tokens"]
        checked += 1
    assert checked >= 8
    assert sglang_rules.is_multimodal(spec) == golden.FIXTURE["models"][BUNDLED[bundled]]["resolved_common"][
        "is_multimodal"]  # fmt: skip


def test_sweep_applies_the_same_pools_and_cap():
    # the vectorized sweep gives SGLang's rows too: its tokens, and the requests plan_fit counts (capped at
    # max_running_requests, the Mamba slots // 5 for the hybrids)
    names = ["qwen3-next-80b-a3b", "gpt-oss-20b", "nemotron-3-nano-30b-a3b", "llama3.1-8b", "deepseek-v3.2"]
    specs = {golden.spec(n).name: n for n in names}
    opts = FitOptions(engine=Engine.sglang, kv_cache_memory_bytes=10 * GIB)
    result = sweep([golden.spec(n) for n in names], [4096, 32768], [get_gpu("h100")], ["auto", "fp8_e4m3"], [1, 2],
                   opts)  # fmt: skip
    fields = ("model", "seq", "tp", "kv_dtype", "kv_capacity_tokens", "max_concurrent_requests", "limit")
    compared = 0
    for row in result.rows(fields=fields):
        name = specs[row["model"]]
        dtype = "fp8_e4m3" if row["kv_dtype"] == "fp8_e4m3" else "auto"
        page = 64 if name == "deepseek-v3.2" else 1
        found = rows(name, tp=row["tp"], page_size=page, context_length=row["seq"], kv_cache_dtype=dtype, budget=10 * GIB)
        if not found:  # the fixture has 32k rows for some models only
            continue
        (want,) = found
        fit = plan_fit(golden.spec(name), get_gpu("h100"), opts_of(want))
        assert row["kv_capacity_tokens"] == want["result"]["max_total_num_tokens"] == fit.kv_capacity_tokens
        assert row["max_concurrent_requests"] == fit.max_concurrent_requests
        assert row["limit"] == ("max_running_requests" if fit.limited_by_max_num_seqs else "memory")
        compared += 1
    assert compared >= 20


def test_sweep_labels_the_cap_max_running_requests():
    # llama3.1-8b at 1,024 tokens with --max-running-requests 16: 81,920 tokens hold 80 requests, SGLang runs 16
    spec = golden.spec("llama3.1-8b")
    opts = FitOptions(engine=Engine.sglang, kv_cache_memory_bytes=10 * GIB, max_num_seqs=16)
    (row,) = sweep([spec], [1024], [get_gpu("h100")], opts=opts).rows()
    assert (row["kv_capacity_tokens"], row["max_concurrent_requests"], row["limit"]) == (81_920, 16, "max_running_requests")



def plain_tp(rows, tp: int):
    """The plain ``TP tp`` row of a fleet plan (MoE models are tried with SGLang's EP / DP-attention layouts too)."""
    (row,) = [r for r in rows if r.layout == f"TP {tp}"]
    return row

def test_fleet_packs_sglangs_pools():
    # gpt-oss-120b TP 2 on H100 with a 10 GiB budget: SGLang's pools are 323,634 full and 258,907 SWA tokens (the
    # fixture); a request of 8k takes 8,192 full and min(8,192, 127 + 128 + 2) = 257 SWA tokens, so a replica holds
    # min(323,634 // 8,192, 258,907 // 257) = 39 requests: 200 requests need ceil(200 / 39) = 6 replicas
    (want,) = rows("gpt-oss-120b", tp=2, page_size=1, kv_cache_dtype="auto", context_length=4096, budget=10 * GIB)
    full, swa = want["result"]["full_max_total_num_tokens"], want["result"]["swa_max_total_num_tokens"]
    assert (full, swa) == (323_634, 258_907)
    per = min(full // 8192, swa // 257)
    opts = FitOptions(engine=Engine.sglang, kv_cache_memory_bytes=10 * GIB)
    wl = workload_from_data({"name": "w", "classes": [{"name": "c", "concurrency": 200, "tokens": "8k"}]}, "w")
    row = plain_tp(plan_fleet(golden.spec("gpt-oss-120b"), wl, [get_gpu("h100")], opts, tps=[2], pps=[1]), 2)
    assert (per, row.replicas, row.requests_per_replica, row.limit) == (39, 6, 39, "memory")
    # Qwen3-Next TP 1, 10 GiB: SGLang runs 12 requests per replica (64 Mamba slots // 5), though 232,546 tokens would
    # hold 56 of 4k: 100 requests need ceil(100 / 12) = 9 replicas, not ceil(100 / 56) = 2
    (want,) = rows("qwen3-next-80b-a3b", tp=1, page_size=1, kv_cache_dtype="auto", context_length=4096, budget=10 * GIB)
    assert want["result"]["max_running_requests"] == 12
    wl = workload_from_data({"name": "w", "classes": [{"name": "c", "concurrency": 100, "tokens": "4k"}]}, "w")
    row = plain_tp(plan_fleet(golden.spec("qwen3-next-80b-a3b"), wl, [get_gpu("h100")], opts, tps=[1], pps=[1]), 1)
    assert (row.replicas, row.requests_per_replica) == (-(-100 // 12), 12)
    # with --max-running-requests 8 the cap binds before the state pool: ceil(100 / 8) = 13 replicas
    capped = FitOptions(engine=Engine.sglang, kv_cache_memory_bytes=10 * GIB, max_num_seqs=8)
    row = plain_tp(plan_fleet(golden.spec("qwen3-next-80b-a3b"), wl, [get_gpu("h100")], capped, tps=[1], pps=[1]), 1)
    assert (row.replicas, row.limit) == (13, "max_running_requests")


def test_fleet_refuses_where_sglang_does():
    # Nemotron-H-56B TP1 with 10 GiB: 4 state slots serve 4 // 5 = 0 requests; SGLang stops at start-up
    opts = FitOptions(engine=Engine.sglang, kv_cache_memory_bytes=10 * GIB)
    wl = workload_from_data({"name": "w", "classes": [{"name": "c", "concurrency": 10, "tokens": "4k"}]}, "w")
    row = plain_tp(plan_fleet(golden.spec("nemotron-h-56b"), wl, [get_gpu("h100")], opts, tps=[1], pps=[1]), 1)
    assert not row.fits and "4 // 5 = 0 requests" in row.reason


def test_fit_prints_sglangs_settings_and_pools(cli, tmp_path):
    code, out, err = cli("fit", "qwen3-next-80b-a3b", "--gpu", "h100", "--engine", "sglang", "--max-model-len", "4k",
                         "--kv-cache-memory", "10GiB")  # fmt: skip
    assert code == 0 and err == ""
    assert "max_running_requests 12 (the Mamba state cache: 64 slots // 5 per request)" in out
    assert "State pool: 64 Mamba slots (+1 padding) of 77,266,944 B (SSM float32)" in out
    assert "Engine log: Mamba Cache is allocated. max_mamba_cache_size: 64, conv_state size: 0.11GB" in out
    assert "KV capacity: 232,546 tokens" in out and "Max concurrent requests of 4,096 tokens: 12\n" in out
    # the request table, outside the KV budget: (12 + 1) × (4,096 + 4) × 4 B
    assert "Request table (req_to_token, int32, outside the KV budget): 213,200 B" in out
    d = json.loads(cli("fit", "qwen3-next-80b-a3b", "--gpu", "h100", "--engine", "sglang", "--max-model-len", "4k",
                       "--kv-cache-memory", "10GiB", "--json")[1])  # fmt: skip
    assert (d["max_num_seqs"], d["request_table_bytes"], d["engine_settings"]["mamba_slots"]) == (12, 213_200, 64)
    assert d["pools"] == [["full tokens", 232_546, 24_576], ["mamba slots", 64, 77_266_944]]
    # the default mem_fraction_static, resolved as SGLang does on an H100 (TP 1: 0.83)
    code, out, _ = cli("fit", "llama3.1-8b", "--gpu", "h100", "--engine", "sglang", "--max-model-len", "4k")
    assert "mem_fraction_static 0.83 = round((81559 MiB − 13904 MiB reserved) / 81559 MiB, 3)" in out


@pytest.mark.parametrize(
    "args, message",
    [
        (["--swa-full-tokens-ratio", "0"], "--swa-full-tokens-ratio: 0.0 must be in (0, 1]"),
        (["--swa-full-tokens-ratio", "1.5"], "--swa-full-tokens-ratio: 1.5 must be in (0, 1]"),
        (["--mamba-full-memory-ratio", "-1"], "--mamba-full-memory-ratio: -1.0 must be a number in (0, 1000]"),
        (["--max-mamba-cache-size", "0"], "--max-mamba-cache-size: 0 must be an integer >= 1"),
        (["--max-mamba-cache-size", str(1 << 25)], "--max-mamba-cache-size: 33,554,432 is beyond what kvplan plans"),
        (["--max-total-tokens", "0"], "--max-total-tokens"),
        (["--mamba-ssm-dtype", "int8"], "--mamba-ssm-dtype: 'int8'; allowed: float32, bfloat16, float16"),
        (["--max-running-requests", "0"], "--max-num-seqs: 0 must be an integer >= 1"),
        (["--kv-dtype", "q4_0"], "--kv-dtype: SGLang has no 'q4_0' KV cache; allowed: auto, bf16, bfloat16"),
    ],
)
def test_bad_sglang_values_are_one_line_errors(cli, args, message):
    code, out, err = cli("fit", "qwen3-next-80b-a3b", "--gpu", "h100", "--engine", "sglang", *args)
    assert (code, out, err.count("\n")) == (2, "", 1) and err.startswith("kvplan: error: ") and message in err, err


def test_sglang_flags_are_refused_with_another_engine(cli):
    for flag in (["--disable-radix-cache"], ["--mamba-full-memory-ratio", "0.5"], ["--max-total-tokens", "50k"]):
        code, out, err = cli("fit", "qwen3-next-80b-a3b", "--gpu", "h100", *flag)
        assert (code, out) == (2, "") and err == f"kvplan: error: {flag[0]}: SGLang's setting; give it with --engine sglang\n"


def test_sglang_spellings_reach_the_plan(cli):
    # --disable-hybrid-swa-memory (SGLang's) is --swa-full; --chunked-prefill-size is --max-num-batched-tokens
    base = ["fit", "gpt-oss-20b", "--gpu", "h100", "--engine", "sglang", "--max-model-len", "4k", "--kv-cache-memory",
            "10GiB", "--json"]  # fmt: skip
    d = json.loads(cli(*base, "--disable-hybrid-swa-memory")[1])
    assert [p[0] for p in d["pools"]] == ["full tokens"] and d["engine_settings"]["pool_configurator"] == (
        "DefaultPoolConfigurator")  # fmt: skip
    d = json.loads(cli(*base, "--chunked-prefill-size", "4096", "--disable-radix-cache", "--max-running-requests",
                       "32")[1])  # fmt: skip
    # SGLang's request-cap SWA pool: 32 × (127 + 128 + 1 + 1) + 2 × 4,096 + 1 = 16,417 tokens
    assert d["engine_settings"]["swa_tokens"] == 32 * (127 + 128 + 2) + 2 * 4096 + 1 == 16_417
    assert d["engine_settings"]["chunked_prefill_size"] == 4096 and d["max_num_seqs"] == 32


# --- attention DP, the served length, the KV-head split's source (issue 16 audit) ---------------------------------


def budget_row(gpu: str, model: str, tp: int, flags: list[str]) -> dict:
    (row,) = [r for r in golden.FIXTURE["budget"]["rows"]
              if (r["gpu"], r["model"], r["tp"], r["flags"]) == (gpu, model, tp, flags)]  # fmt: skip
    return row


def test_dp_attention_settings_are_sglangs(cli):
    # SGLang 0.5.23 on an H200, DeepSeek-V3 at TP 8 with --enable-dp-attention --dp-size 2: mem_fraction_static 0.854
    # (its DP-attention graph reserve) and chunked_prefill_size 8192 // 2 = 4096 (the fixture's budget row)
    want = budget_row("H200", "deepseek-v3", 8, ["--enable-dp-attention", "--dp-size", "2"])
    assert (want["mem_fraction_static"], want["chunked_prefill_size"]) == (0.854, 4096)
    for flags in (["--enable-dp-attention", "--dp-size", "2"], ["--attn-dp-size", "2"]):
        d = json.loads(cli("fit", "deepseek-v3", "--gpu", "h200", "--tp", "8", "--engine", "sglang", *flags,
                           "--json")[1])  # fmt: skip
        assert (d["gpu_memory_utilization"], d["max_num_batched_tokens"]) == (0.854, 4096)
        assert d["data_parallel_size"] == 2 and d["attention_tensor_parallel_size"] == 4
    code, out, _ = cli("fit", "deepseek-v3", "--gpu", "h200", "--tp", "8", "--engine", "sglang", "--attn-dp-size", "2")
    assert "chunked_prefill_size 4,096 (8,192 // attn_dp_size 2)" in out
    assert "mem_fraction_static 0.854 = round((143771 MiB − 20992 MiB reserved) / 143771 MiB, 3)" in out


def test_each_dp_group_holds_its_own_requests():
    # SGLang's resolve_max_num_reqs is per DP worker: --max-running-requests 64 at --dp-size 8 gives each group 8,
    # while its default (clamp(...), 4,096 here) is not divided (the fixture's DP rows: DeepSeek-V3 TP 8, 10 GiB)
    dp8 = ["--enable-dp-attention", "--dp-size", "8"]
    rows_ = {tuple(r["flags"][3:]): r for r in golden.FIXTURE["kv_rows"] if r["model"] == "deepseek-v3"
             and r["tp"] == 8 and r["flags"][:3] == dp8 and r["budget"] == 10 * GIB}  # fmt: skip
    assert rows_[()]["result"]["max_running_requests"] == 4096
    assert rows_[("--max-running-requests", "64")]["result"]["max_running_requests"] == 8
    tokens = rows_[()]["result"]["max_total_num_tokens"]  # 152,797: one GPU's latent pool, attention TP 1
    spec = golden.spec("deepseek-v3")
    opts = FitOptions(engine=Engine.sglang, kv_cache_memory_bytes=10 * GIB)
    # 4,500 requests of 256 tokens: a group holds min(tokens // 256, 4,096) = 596, a replica 8 × 596 = 4,768; with
    # the default cap divided by 8 (512 a group, 4,096 a replica) two replicas would be needed
    wl = workload_from_data({"name": "w", "classes": [{"name": "c", "concurrency": 4500, "tokens": 256}]}, "w")
    (row,) = [
        r for r in plan_fleet(spec, wl, [get_gpu("h100")], opts, tps=[8], pps=[1]) if r.layout == "TP 1 × DP 8, EP 8"
    ]
    assert tokens // 256 == 596 and (row.replicas, row.requests_per_replica) == (1, 4500)
    capped = FitOptions(engine=Engine.sglang, kv_cache_memory_bytes=10 * GIB, max_num_seqs=64)
    (row,) = [r for r in plan_fleet(spec, wl, [get_gpu("h100")], capped, tps=[8], pps=[1])
              if r.layout == "TP 1 × DP 8, EP 8"]  # fmt: skip
    assert (row.replicas, row.limit) == (-(-4500 // 64), "max_running_requests")


def test_sglang_serves_requests_the_pool_holds(cli):
    # no --max-model-len: SGLang starts with a pool of 232,546 tokens under a context_len of 262,144, warns, and
    # admits requests of max_req_len 232,545 (the fixture's example row, run through get_worker_info)
    (want,) = [
        r for r in golden.FIXTURE["examples"] if r["model"] == "qwen3-next-80b-a3b" and r["context_length"] is None
    ]
    assert want["ok"] and want["result"]["max_req_len"] == 232_545
    args = ("fit", "qwen3-next-80b-a3b", "--gpu", "h100", "--engine", "sglang", "--kv-cache-memory", "10GiB")
    code, out, err = cli(*args)
    assert code == 0
    assert 'SGLang starts with "KV pool holds 232546 tokens, fewer than --context-length 262144"' in err
    assert "max_model_len 232,545" in out and "Max concurrent requests of 232,545 tokens: 1\n" in out
    rows_, cols = want["result"]["req_to_token_shape"]
    assert f"= ({rows_ - 1} + 1) × ({cols - 4:,} + 4) × 4" in out  # the request table keeps SGLang's context_len
    # a given length is kept: none of 262,144 fits, and the message says which pool and what took the rest
    code, out, err = cli(*args, "--max-model-len", "256k")
    assert code == 1 and out == ""
    assert (
        "one request of max_model_len 262,144 needs 262,144 tokens of the full-layer pool (6 GiB), which holds "
        "232,546 (5.3226 GiB): of the 10 GiB KV budget, the Mamba state pool 64 slots + 1 padding"
    ) in err
    assert "serves requests up to max_req_len 232,545 tokens" in err and "but the KV budget is" not in err


def test_the_kv_head_split_cites_sglang(cli):
    # Qwen3-30B-A3B (4 KV heads) at TP 8 with EP: SGLang's own get_num_kv_heads, not vLLM's, is cited
    code, out, _ = cli("fit", "qwen3-30b-a3b", "--gpu", "h100", "--tp", "8", "--engine", "sglang", "--ep-size", "8",
                       "--max-model-len", "32k")  # fmt: skip
    assert code == 0 and "vLLM" not in out.split("KV replicated:")[1].splitlines()[0]
    assert "(SGLang ModelConfig.get_num_kv_heads(attn_tp_size), configs/model_config.py:1700: max(1, H_kv // TP)" in out
    code, out, _ = cli("fit", "deepseek-v3", "--gpu", "h200", "--tp", "8", "--engine", "sglang", "--attn-dp-size", "2")
    assert "an MLA latent is cached whole on each of the 4 GPUs (SGLang MLA pool" in out
