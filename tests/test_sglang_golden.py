"""kvplan's SGLang rules against SGLang 0.5.23's own planning, row for row (issue 16).

``tests/fixtures/sglang_golden.json`` was written by ``scripts/sglang_golden.py``, which ran SGLang 0.5.23's
``KVCacheConfigurator._resolve_memory_pool_config`` and ``handle_gpu_memory_settings`` on CPU (see the script and
the fixture's ``assumptions``). Every row kvplan can express is planned with ``plan_fit`` and must agree exactly:

- ``kv_rows`` and ``examples`` (an H100 per TP rank, a given budget): the pools (``max_total_num_tokens``, the
  full and SWA split, Mamba slots), ``max_running_requests``, the ``req_to_token`` table, the Mamba pool's bytes,
  the per-token cell, the per-request state, the page and window SGLang resolved, its pool log lines; and for
  the 292 rows SGLang refuses, a refusal naming the same cause (with its numbers); 868 of the rows run with
  attention DP (``--enable-dp-attention --dp-size D``: one group's pools, its share of the requests);
- ``budget.rows``: ``mem_fraction_static`` and ``chunked_prefill_size`` per GPU, TP and flags (attention DP
  included);
- ``budget.profile``: the KV budget from the free memory before and after the weights.

The rows kvplan cannot express are listed in :data:`INEXPRESSIBLE` with the reason, and counted.

The fixture's ``budget`` is SGLang's ``get_available_gpu_memory()`` with no slack; a multimodal model then
reserves 100 MiB (``mm_runtime_reservation_gb``): kvplan's ``--kv-cache-memory`` is what the pools get, so the
test passes ``budget − 100 MiB`` (SGLang's float arithmetic) for those models.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path

import pytest

from kvplan.engines import sglang as S
from kvplan.fit import Engine, FitOptions, fit_plan
from kvplan.gpus import get_gpu
from kvplan.readers import spec_from_hf_config

ROOT = Path(__file__).resolve().parent
FIXTURE = json.loads((ROOT / "fixtures" / "sglang_golden.json").read_text())
GIB = 1 << 30

# SGLang's flags in the fixture -> FitOptions fields
VALUED = {
    "--max-running-requests": ("max_num_seqs", int),
    "--max-total-tokens": ("max_total_tokens", int),
    "--mamba-full-memory-ratio": ("mamba_full_memory_ratio", float),
    "--max-mamba-cache-size": ("max_mamba_cache_size", int),
    "--mamba-ssm-dtype": ("mamba_ssm_dtype", str),
    "--swa-full-tokens-ratio": ("swa_full_tokens_ratio", float),
    "--chunked-prefill-size": ("max_num_batched_tokens", int),
    "--context-length": ("max_model_len", int),
    "--mem-fraction-static": ("gpu_memory_utilization", float),
    "--dp-size": ("data_parallel_size", int),  # with --enable-dp-attention: attention DP (kvplan's --attn-dp-size)
    "--attn-dp-size": ("data_parallel_size", int),
}
BOOLEAN = {"--disable-radix-cache": "disable_radix_cache", "--disable-hybrid-swa-memory": "swa_full",
           "--disable-cuda-graph": "enforce_eager"}  # fmt: skip
MARKERS = {"--enable-dp-attention"}  # makes --dp-size attention DP; every --dp-size of the fixture comes with it
# Rows kvplan cannot express, with the reason: (predicate on the row's flags, reason). Every other row is compared.
INEXPRESSIBLE = {
    "--disable-prefill-cuda-graph": "kvplan has no flag for SGLang's prefill CUDA graph alone (its mem_fraction_static "
    "reserve); --disable-cuda-graph (FitOptions.enforce_eager) turns both graphs off",
    "--cuda-graph-max-bs-decode": "kvplan has no flag for SGLang's decode CUDA-graph batch size",
    "--chunked-prefill-size -1": "chunked prefill turned off: kvplan's --max-num-batched-tokens is at least 1",
}
GPUS = {"H100-80GB": "h100", "H200": "h200", "A100-40GB": "a100-40gb", "A100-80GB": "a100-80gb", "L4": "l4",
        "RTX-4090": "rtx4090", "MI300X": "mi300x"}  # fmt: skip
FAMILIES = {
    "dense MHA": ["llama3.1-8b", "llama3.3-70b", "qwen2.5-7b", "qwen3-8b", "qwen3-30b-a3b", "mistral-7b-v0.1",
                  "mixtral-8x7b", "phi3-medium-4k", "gemma2-9b", "gemma3-1b", "gemma3-27b-modified", "minimax-m2.7"],
    "MLA": ["deepseek-v2-lite", "deepseek-v3", "deepseek-v3.2", "kimi-k2", "glm4.7-flash"],
    "hybrid SWA": ["gemma4-26b-a4b", "gemma4-31b-nvfp4", "gpt-oss-20b", "gpt-oss-120b", "llama4-scout"],
    "Mamba / GDN / KDA hybrids": ["qwen3-next-80b-a3b", "qwen3.5-0.8b", "qwen3.5-122b-a10b", "nemotron-h-56b",
                                  "nemotron-3-nano-30b-a3b", "granite-4.0-h-tiny", "granite-4.0-h-1b", "falcon-h1-7b",
                                  "kimi-linear-48b"],
    "no SGLang class (Transformers fallback)": ["jamba-1.5-mini"],
}  # fmt: skip
# SGLang's refusal messages -> kvplan's refusal codes
REFUSALS = (
    ("Loaded weights leave no GPU memory", S.NO_KV_MEMORY),
    ("Not enough GPU memory for hybrid", S.NO_STATE_SLOT),
    ("cannot hold even one request", S.SWA_TOO_SMALL),
    ("SWA pool cap", S.SWA_CAP_NO_ROOM),
    ("too small to serve any requests", S.NO_REQUEST),
    ("Not enough memory", S.NO_TOKEN),
)


@lru_cache(maxsize=None)
def spec(name: str):
    """The fixture model's config.json (with the keys the script added), read by kvplan."""
    m = FIXTURE["models"][name]
    config = json.loads((ROOT / "fixtures" / "hf_configs" / m["config"]).read_text())
    config.update(m["added_keys"])
    return spec_from_hf_config(config, m["config"])


def inexpressible(flags: list[str]) -> str | None:
    """Why kvplan cannot express a row with these SGLang flags, or None."""
    text = " ".join(flags)
    return next((why for key, why in INEXPRESSIBLE.items() if key in text), None)


def options(flags: list[str], **kw) -> dict:
    """FitOptions keywords of SGLang's flags."""
    assert "--dp-size" not in flags or "--enable-dp-attention" in flags  # SGLang's replicas: not in the fixture
    i = 0
    while i < len(flags):
        if flags[i] in MARKERS:
            i += 1
        elif flags[i] in BOOLEAN:
            kw[BOOLEAN[flags[i]]] = True
            i += 1
        else:
            name, kind = VALUED[flags[i]]
            kw[name] = kind(flags[i + 1])
            i += 2
    return kw


def pool_budget(row: dict) -> int:
    """The bytes SGLang's pools get: the row's budget less a multimodal model's 100 MiB, in SGLang's GiB floats
    (``rest_memory = available − slack − mm_reservation``; ``int(rest × 2^30)``)."""
    if S.is_multimodal(spec(row["model"])):
        return int((row["budget"] / GIB - 100 / 1024) * GIB)
    return row["budget"]


def plan(row: dict):
    """kvplan's (FitResult, SglangPlan) for a KV row on an H100."""
    kw = options(row["flags"], kv_cache_memory_bytes=pool_budget(row))
    opts = FitOptions(
        engine=Engine.sglang, tensor_parallel_size=row["tp"], block_size=row["page_size"],
        kv_dtype=None if row["kv_cache_dtype"] == "auto" else row["kv_cache_dtype"],
        max_model_len=row["context_length"], **kw,
    )  # fmt: skip
    return fit_plan(spec(row["model"]), get_gpu("h100"), opts)


def resolved(row: dict) -> dict:
    r = row["resolved"]
    r = FIXTURE["resolved"][r] if isinstance(r, int) else r
    return {**FIXTURE["models"][row["model"]]["resolved_common"], **r}


def logs(row: dict) -> list[str]:
    return [FIXTURE["log_lines"][i] if isinstance(i, int) else i for i in row.get("log", [])]


def differences(row: dict) -> list:
    """What kvplan says differently from SGLang for one row ([] when every figure agrees)."""
    fit, cache = plan(row)
    res = resolved(row)
    out = []

    def same(what, mine, sglang):
        if mine != sglang:
            out.append((what, mine, sglang))

    # the per-token cell, the state, the page and the window SGLang resolved
    mine = cache.cell if cache.kind == "default" else cache.full_per_token + cache.ratio * cache.swa_per_token
    same("cell_size", mine, res["cell_size"])
    if "mamba_cache_per_req" in res:
        same("mamba_cache_per_req", cache.state_per_request, res["mamba_cache_per_req"])
    if "full_per_token" in res:
        same("full bytes per token", cache.full_per_token, res["full_per_token"] * res["full_layers_num"])
        same("swa bytes per token", cache.swa_per_token, res["swa_per_token"] * res["swa_layers_num"])
    if "page_size" in res:
        same("page_size", fit.block_size, res["page_size"])
    if res.get("is_hybrid_swa"):
        same("sliding_window_size", cache.window, res["sliding_window_size"])
    if "swa_cap" in res:
        same("swa_cap", cache.swa_cap_tokens, -(-res["swa_cap"] // row["page_size"]) * row["page_size"])
    if not row["ok"]:
        code = next(c for key, c in REFUSALS if key in row["error"])
        same("refusal", cache.solve(pool_budget(row))["code"], code)
        same("fits", fit.fits, False)
        for number in re.findall(r"\((\d+) tokens|max_mamba_cache_size=(\d+)", row["error"]):
            n = next(x for x in number if x)
            if n not in fit.engine_refusal:
                out.append(("refusal names", fit.engine_refusal, row["error"]))
        return out
    want = row["result"]
    pools = {name: cap for name, cap, _ in fit.pools}
    same("refused", fit.engine_refusal, "")
    same("max_total_num_tokens", pools["full tokens"], want["max_total_num_tokens"])
    if want.get("swa_max_total_num_tokens") is not None:
        same("full_max_total_num_tokens", pools["full tokens"], want["full_max_total_num_tokens"])
        same("swa_max_total_num_tokens", pools["swa tokens"], want["swa_max_total_num_tokens"])
    else:
        same("one pool", "swa tokens" in pools, False)
    if want.get("max_mamba_cache_size") is not None:
        same("max_mamba_cache_size", pools["mamba slots"], want["max_mamba_cache_size"])
        same("mamba_pool_bytes", fit.engine_settings["mamba_pool_bytes"], want["mamba_pool_bytes"])
    else:
        same("no state pool", "mamba slots" in pools, False)
    same("max_running_requests", fit.max_num_seqs, want["max_running_requests"])
    rows, cols = want["req_to_token_shape"]
    same("req_to_token bytes", fit.request_table_bytes, rows * cols * 4)
    same("context_len", fit.engine_settings["context_len"], cols - 4)
    # the longest request SGLang admits (get_worker_info): kvplan plans requests of context_len, or without a
    # --context-length of max_req_len when the pool holds fewer tokens (SGLang starts and warns)
    same("max_req_len", fit.engine_settings["max_req_len"], want["max_req_len"])
    warned = [x for x in logs(row) if "KV pool holds" in x]
    if row["context_length"] is None:
        same("served length", fit.max_model_len, want["max_req_len"] if warned else cols - 4)
        mine = [w for w in fit.engine_warnings if f"KV pool holds {want['max_total_num_tokens']} tokens" in w]
        same("max_req_len warning", len(mine), len(warned))
    pool_lines = [x.removeprefix("INFO: ").strip() for x in logs(row)
                  if "Use sliding window memory pool" in x or "Mamba Cache is allocated" in x]  # fmt: skip
    same("log", [x.strip() for x in fit.engine_log.split("; ") if x], pool_lines)
    return out


def kv_rows(names) -> list[dict]:
    return [r for r in FIXTURE["kv_rows"] + FIXTURE["examples"] if r["model"] in names]


def test_the_fixture_is_sglangs_own():
    assert FIXTURE["sglang_version"] == "0.5.23" and FIXTURE["generated_by"] == "scripts/sglang_golden.py"
    assert sorted(sum(FAMILIES.values(), [])) == sorted(FIXTURE["models"])
    # 6,360 rows of the grid and 868 with attention DP (--enable-dp-attention --dp-size 2, 4, 8)
    assert len(FIXTURE["kv_rows"]) == 7228 and sum(not r["ok"] for r in FIXTURE["kv_rows"]) == 292
    assert sum("--enable-dp-attention" in r["flags"] for r in FIXTURE["kv_rows"]) == 868


@pytest.mark.parametrize("family", list(FAMILIES))
def test_every_kv_row_equals_sglang(family):
    names = FAMILIES[family]
    rows = kv_rows(names)
    assert rows and all(inexpressible(r["flags"]) is None for r in rows)  # every KV row is expressible
    wrong = [(r["model"], r["tp"], r["page_size"], r["kv_cache_dtype"], r["context_length"], r["flags"], d)
             for r in rows if (d := differences(r))]  # fmt: skip
    assert wrong == [], f"{len(wrong)} of {len(rows)} {family} rows differ; first: {wrong[:3]}"


def test_the_issue_figures():
    # Qwen3-Next-80B bf16 TP1, 10 GiB, 4,096 tokens: SGLang 232,546 tokens, 64 Mamba slots (77,266,944 B each,
    # the SSM state in float32), max_running_requests 12 = 64 // 5; kvplan gave 436,906 tokens and 76 requests
    (row,) = [r for r in FIXTURE["kv_rows"] if r["model"] == "qwen3-next-80b-a3b" and r["tp"] == 1
              and r["page_size"] == 1 and r["kv_cache_dtype"] == "auto" and r["context_length"] == 4096
              and not r["flags"] and r["budget"] == 10 * GIB]  # fmt: skip
    fit, _ = plan(row)
    assert row["result"]["max_total_num_tokens"] == fit.kv_capacity_tokens == 232_546
    assert row["result"]["max_running_requests"] == fit.max_concurrent_requests == 12
    assert dict((n, c) for n, c, _ in fit.pools)["mamba slots"] == 64
    assert fit.engine_settings["max_running_requests_bound"].startswith("the Mamba state cache")


def test_refusals_name_sglangs_cause():
    rows = [r for r in FIXTURE["kv_rows"] + FIXTURE["examples"] if not r["ok"]]
    assert len(rows) == 294  # 292 KV rows (20 of them with attention DP) and 2 examples
    seen = set()
    for r in rows:
        fit, cache = plan(r)
        assert not fit.fits and fit.max_concurrent_requests == 0 and fit.engine_refusal.startswith("SGLang refuses")
        seen.add(cache.solve(pool_budget(r))["code"])
    # every kind of refusal in these rows (the sixth, a state pool of no slot, is budget.profile's: below)
    assert seen == {c for _, c in REFUSALS} - {S.NO_STATE_SLOT}


def budget_rows():
    return FIXTURE["budget"]["rows"]


def test_mem_fraction_static_equals_sglangs_default():
    compared, skipped, dp_rows = 0, {}, 0
    wrong = []
    for r in budget_rows():
        why = inexpressible(r["flags"])
        if why is not None:
            skipped[why] = skipped.get(why, 0) + 1
            continue
        kw = options(r["flags"])
        opts = FitOptions(engine=Engine.sglang, tensor_parallel_size=r["tp"], **kw)
        gpu = get_gpu(GPUS[r["gpu"]])
        assert gpu.smi_total_mib == r["smi_total_mib"]
        settings = S.ENGINE.settings(spec(r["model"]), gpu, opts)
        got = (settings.utilization, settings.max_num_batched_tokens)
        if got != (r["mem_fraction_static"], r["chunked_prefill_size"]):
            wrong.append((r["gpu"], r["model"], r["tp"], r["flags"], got, r["mem_fraction_static"]))
        compared += 1
        dp_rows += opts.data_parallel_size > 1
    assert wrong == []
    # 1,197 rows: 945 compared (357 with attention DP: --dp-size 2, 4 and 8 with --enable-dp-attention, and
    # --attn-dp-size 4), and the inexpressible ones, each counted with its reason
    assert compared == 945 and dp_rows == 357 and sum(skipped.values()) == 252
    assert skipped == {
        INEXPRESSIBLE["--disable-prefill-cuda-graph"]: 84, INEXPRESSIBLE["--chunked-prefill-size -1"]: 84,
        INEXPRESSIBLE["--cuda-graph-max-bs-decode"]: 84,
    }  # fmt: skip


def test_the_budget_from_free_memory_is_sglangs():
    # budget.profile: an H100 with 79.2 GiB free before the weights and A after: SGLang's pools get
    # int((A − 79.2 × (1 − mfs)) × 2^30) (hybrids: less their state pool); kvplan's (total − overhead) × mfs −
    # weights with total − overhead = 79.2 GiB and weights = 79.2 − A GiB is the same figure (float rounding: a few
    # bytes)
    gpu = get_gpu("h100")
    checked = 0
    for p in FIXTURE["budget"]["profile"]:
        before, after = p["pre_model_load_gb"], p["available_after_load_gb"]
        opts = FitOptions(
            engine=Engine.sglang, overhead_bytes=gpu.cuda_total_bytes - int(before * GIB),
            weights_bytes=int((before - after) * GIB), max_model_len=4096, **options(p["flags"]),
        )  # fmt: skip
        fit, cache = fit_plan(spec(p["model"]), gpu, opts)
        solved = cache.solve(fit.kv_budget_bytes)
        if not p["ok"]:  # "Not enough GPU memory for hybrid (mamba/linear-attention) state cache"
            assert "Not enough GPU memory for hybrid" in p["error"] and solved["code"] == S.NO_STATE_SLOT
            assert not fit.fits and "hybrid state cache gets" in fit.engine_refusal
            checked += 1
            continue
        assert fit.gpu_memory_utilization == p["mem_fraction_static"]
        if p["max_mamba_cache_size"] is not None:
            assert solved["slots"] == p["max_mamba_cache_size"]
        assert abs(solved["avail"] - p["kv_budget_bytes"]) <= 16, p
        checked += 1
    assert checked == len(FIXTURE["budget"]["profile"]) == 8


def test_the_inexpressible_rows_are_listed():
    # every row of the fixture is compared except these, and only for the reasons given
    kv = [r for r in FIXTURE["kv_rows"] + FIXTURE["examples"] if inexpressible(r["flags"])]
    budget = [r for r in budget_rows() if inexpressible(r["flags"])]
    assert kv == [] and len(budget) == 252
