"""``kvplan fit --from-log``: an engine's start-up log as the input (issue 15, item 4).

The corpus (tests/fixtures/engine_logs/*.yaml) holds 100 real start-up logs with the figures each printed
(``printed``, extracted by hand). Three layers of tests:

1. the reader (kvplan.logs) on every entry: each hand-extracted figure is read with its value, the engine
   and (vLLM) its generation are found, the settings it reads agree with the entry's;
2. the reproduction (kvplan.fromlog) on every entry: no printed figure kvplan computes differs from the
   engine's, every printed figure is accounted for (reproduced, the budget, a setting, measured by the engine
   and shown as read, or named as not modelled), and the entries that cannot be reproduced are listed in
   NOT_REPRODUCED with the reason (an entry there that reproduces fails: the table cannot go stale);
3. round trips through the CLI, one per engine (vLLM V0, vLLM V1, SGLang, TensorRT-LLM, llama.cpp): the
   printed figures come back exactly (to the printed rounding), what-ifs are planned on the log's budget,
   and a log kvplan cannot read gets one line naming what is missing (exit 2).

The expected values are the engines' own printed figures (the corpus), never kvplan's arithmetic.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from kvplan.errors import UsageError
from kvplan.fromlog import BUDGET, DIFFERS, REPRODUCED, reproduce
from kvplan.logs import read_log
from kvplan.logs.vllm_fingerprints import FINGERPRINTS

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / "tests" / "fixtures" / "engine_logs"
ENTRIES = {p.stem: yaml.safe_load(p.read_text(encoding="utf-8")) for p in sorted(LOGS.glob("*.yaml"))}
IDS = sorted(ENTRIES)

# corpus keys that name the same line differently in two entries (the reader uses the first name)
ALIASES = {"init_dist_mem_usage_gb": "init_mem_usage_gb", "compute_buffer_host_mib": "host_compute_buffer_mib"}

# Entries without a model_ref whose model has the same attention geometry as a model kvplan has (the user's
# MODEL argument); each reason says why the geometry is the same.
MODEL_FOR = {
    "vllm-vllm-13061": ("qwen2.5-14b", "DeepSeek-R1-Distill-Qwen-14B is a Qwen2.5-14B"),
    "vllm-qwen3-16": ("llama2-7b", "Qwen1.5-7B: 32 layers, 32 KV heads x 128, as Llama-2-7B"),
    "vllm-file-62301781910": (
        "tests/fixtures/hf_configs/qwen3-vl-2b-instruct-PARTIAL.json",
        "Qwen3-VL-2B: the note names no checkpoint; Qwen3-VL-2B-Instruct's config (trimmed: no rope keys)",
    ),
    "sglang-sglang-15909": (
        "qwen3-30b-a3b",
        "Qwen3-Omni-30B-A3B's thinker: Qwen3-30B-A3B's geometry (48 layers, 4 KV heads x 128; its K size checks it)",
    ),
    "sglang-sglang-18039": ("tests/fixtures/hf_configs/mimo-v2-flash.json", "MiMo-V2-Flash's config"),
    "trtllm-trtllm-2268": ("llama2-7b", "Qwen1.5-7B-sft: 32 layers, 32 KV heads x 128, as Llama-2-7B"),
}
# settings the quoted lines do not state, given as flags (as a user would), with where the entry has them
FLAGS_FOR = {
    "trtllm-trtllm-2268": ({"block_size": 64}, "TensorRT engines of 0.13 use 64-token blocks (the source's build)"),
    "trtllm-02": ({"kv_dtype": "fp8"}, "kv_cache_dtype fp8 in the issue's config"),
    "sglang-llms-in-clouds-qwq32b": ({"gpu_memory_utilization": 0.85}, "mem_fraction_static 0.85 in its command"),
}

NO_MODEL = "no model kvplan has: the log names none it can load and the corpus gives no model_ref"
NO_KV = "a partial log: no KV-cache figure in the quoted lines"
NOT_REPRODUCED = {
    "llamacpp-llama.cpp-11200": NO_MODEL,
    "llamacpp-ollama-3158": NO_MODEL + " (general.name 'cognitivecomputations')",
    "llamacpp-ollama-9068": NO_MODEL,
    "sglang-sglang-11716": NO_MODEL,
    "sglang-sglang-4048": NO_KV + " (an input-length error)",
    "sglang-sglang-7691": NO_KV + " (a profiled pool of -561981 tokens)",
    "sglang-sglang-11309-main": "SGLang's DeepSeek-V3.2 NSA cache (fp8 latent with scales + indexer keys) is not "
    "kvplan's MLA latent: KV size 54.52 GB is 40,021 B per token, kvplan 70,272",
    "sglang-sglang-11309-pr": "as sglang-sglang-11309-main",
    "sglang-sglang-18039": "SGLang's MiMo-V2-Flash pools (full and SWA layers of different geometry) are not modelled",
    "trtllm-trtllm-1400": NO_MODEL,
    "trtllm-trtllm-docs-memory": NO_MODEL,
    "trtllm-trtllm-224": "TensorRT-LLM of 2023 allocated 10,718 tokens, not whole 16- or 32-token blocks: kvplan's "
    "TensorRT-LLM rules are 1.0's",
    "vllm-club-3090-1086": NO_MODEL,
    "vllm-club-3090-294": NO_MODEL + " (qwen3.6-27b)",
    "vllm-club-3090-295": NO_MODEL + " (qwen3.6-27b)",
    "vllm-club-3090-46": NO_MODEL,
    "vllm-club-3090-612": NO_MODEL + " (qwen3.6-35b-a3b)",
    "vllm-club-3090-652": NO_MODEL + " (qwen3.6-35b-a3b)",
    "vllm-vllm-10511-tp2": NO_KV + " (the KV line of the TP2 run is not quoted)",
    "vllm-vllm-12126": NO_MODEL + " (Llama-3.2-11B-Vision)",
    "vllm-vllm-14447": NO_MODEL,
    "vllm-vllm-15766": NO_MODEL + " (a Gemma 3 of unknown size)",
    "vllm-vllm-17238": NO_KV + " (only 'No available memory for the cache blocks')",
    "vllm-vllm-25350-a": NO_MODEL,
    "vllm-vllm-25350-b": NO_MODEL,
    "vllm-vllm-29796-a": NO_MODEL + " (Olmo-3-7B)",
    "vllm-vllm-29796-b": NO_MODEL + " (Olmo-3-7B)",
    "vllm-vllm-33155": NO_KV + " (only the weights)",
    "vllm-vllm-6746": NO_KV + " (only the weights)",
    "vllm-vllm-21348": "Available KV cache memory 8.11 GiB and GPU KV cache size 178,880 tokens x 48,128 B = 8.02 GiB "
    "disagree by 1.1%: the issue quotes one line of each, likely from different TP workers "
    "(their budgets differ by their non-torch memory), with LMCache's connector loaded",
}


@pytest.fixture(autouse=True)
def _offline_without_a_cache(monkeypatch, tmp_path):
    """A log's model id is resolved as MODEL is (the Hugging Face cache, the Hub): here offline, nothing cached,
    so the corpus reproduces the same on every machine."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf-cache"))


def _model(entry_id: str):
    e = ENTRIES[entry_id]
    ref = e["model_ref"] or MODEL_FOR.get(entry_id, (None,))[0]
    if ref and ref.startswith("tests/"):
        return str(ROOT / ref)
    return ref


def _reproduce(entry_id: str):
    e = ENTRIES[entry_id]
    flags = FLAGS_FOR.get(entry_id, ({},))[0]
    return reproduce("\n".join(e["lines"]), model=_model(entry_id), given=flags, source=entry_id)


def _same(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        return isinstance(a, (int, float)) and isinstance(b, (int, float)) and math.isclose(a, b, abs_tol=1e-9)
    return a == b


# --- 1. the reader ------------------------------------------------------------------------------------------


def test_fingerprints_are_the_fixtures():
    fixture = yaml.safe_load((ROOT / "tests" / "fixtures" / "vllm_budget_rules.yaml").read_text())["fingerprints"]
    assert FINGERPRINTS == {v: {k: s.split(" ")[0] for k, s in calls.items()} for v, calls in fixture.items()}


@pytest.mark.parametrize("entry_id", IDS)
def test_reading_has_every_printed_figure(entry_id):
    e = ENTRIES[entry_id]
    r = read_log("\n".join(e["lines"]))
    assert r.engine == e["engine"]
    if e["engine"] == "vllm":
        assert r.generation == e["engine_generation"]
    for key, value in e["printed"].items():
        got = r.printed.get(ALIASES.get(key, key), "not read")
        assert _same(got, value), f"{key}: read {got!r}, the entry has {value!r}"
    for key, value in r.settings.items():  # what the reader states, the entry (from the same source) agrees with
        if key in e["settings"]:
            assert _same(value, e["settings"][key]) or repr(value) == e["settings"][key], key
    # a setting a plan needs and the lines do not state is named as missing
    plan_keys = {"vllm": ("max_model_len", "gpu_memory_utilization", "kv_cache_dtype"), "sglang": ("tp_size",),
                 "trtllm": ("max_seq_len",), "llamacpp": ()}[e["engine"]]  # fmt: skip
    for key in plan_keys:
        assert key in r.settings or key in r.missing, key
    assert (r.model_id is None) == ("model" in r.missing)


def test_reading_the_version_from_line_prefixes():
    # vLLM prints [file.py:LINE] of each logger call: the lines name the release
    r = read_log("\n".join(ENTRIES["vllm-file-9009555428"]["lines"]))
    assert (r.version, r.versions) == ("0.11.0", ("0.11.0",)) and r.version_source.startswith("fingerprint:")
    # a development build between releases: the nearest release by line numbers (0.20.1rc1.dev16 per the issue)
    r = read_log("\n".join(ENTRIES["vllm-club-3090-46"]["lines"]))
    assert r.version == "0.20.0" and "nearest by line numbers" in r.version_source
    # printed versions win
    r = read_log("\n".join(ENTRIES["vllm-brendanmckeag-sglang-vllm-benchmark"]["lines"]))
    assert (r.version, r.model_id, r.tp) == ("0.9.1", "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B", 1)


def test_reading_keeps_every_worker():
    r = read_log("\n".join(ENTRIES["vllm-file-38962983769"]["lines"]))
    assert r.per_worker["kv_tokens"] == [238208, 237344]
    assert r.per_worker["max_concurrency"] == [7.27, 7.24]
    assert r.printed["num_gpu_blocks"] == 14834  # the engine's cache config: the minimum


# --- 2. every corpus entry ------------------------------------------------------------------------------------


@pytest.mark.parametrize("entry_id", IDS)
def test_entry_reproduces(entry_id):
    if entry_id in NOT_REPRODUCED:
        try:
            rep = _reproduce(entry_id)
        except UsageError:
            return
        statuses = {f.status for f in rep.figures}
        assert DIFFERS in statuses or REPRODUCED not in statuses, (
            f"{entry_id} reproduces now: drop it from NOT_REPRODUCED ({NOT_REPRODUCED[entry_id]})"
        )
        return
    rep = _reproduce(entry_id)
    wrong = [f"{f.key}: engine {f.printed}, kvplan {f.kvplan} ({f.how})" for f in rep.figures if f.status == DIFFERS]
    assert not wrong, wrong
    assert any(f.status in (REPRODUCED, BUDGET) for f in rep.figures)
    shown = {f.key for f in rep.figures} | {f.key.removesuffix("_terms") for f in rep.figures}
    unaccounted = [k for k in ENTRIES[entry_id]["printed"] if ALIASES.get(k, k) not in shown]
    assert not unaccounted, f"printed figures not shown: {unaccounted}"


def test_not_reproduced_table_names_corpus_entries():
    assert set(NOT_REPRODUCED) <= set(ENTRIES) and set(MODEL_FOR) <= set(ENTRIES) and set(FLAGS_FOR) <= set(ENTRIES)
    for entry_id in MODEL_FOR:
        assert ENTRIES[entry_id]["model_ref"] is None, f"{entry_id} has a model_ref: MODEL_FOR is stale"


def test_counts_per_engine():
    # the report's counts: entries reproduced with at least one figure checked, by engine
    checked = {}
    for entry_id in IDS:
        if entry_id in NOT_REPRODUCED:
            continue
        rep = _reproduce(entry_id)
        if any(f.status == REPRODUCED for f in rep.figures):
            checked[ENTRIES[entry_id]["engine"]] = checked.get(ENTRIES[entry_id]["engine"], 0) + 1
    assert checked == {"vllm": 40, "sglang": 5, "trtllm": 5, "llamacpp": 7}


# --- 3. round trips through the CLI, one per engine ---------------------------------------------------------


def _log(tmp_path, entry_id) -> str:
    p = tmp_path / f"{entry_id}.log"
    p.write_text("\n".join(ENTRIES[entry_id]["lines"]) + "\n", encoding="utf-8")
    return str(p)


def _json(cli, *args):
    code, out, err = cli(*args, "--json")
    assert code == 0, err
    d = json.loads(out)
    return d, {f["key"]: f for f in d["figures"]}


def test_round_trip_vllm_v1_exact_bytes(cli, tmp_path):
    # Qwen3-Next-80B on 2 x H200, vLLM 0.10.2: the budget is printed in bytes; every KV figure comes back
    d, f = _json(cli, "fit", "qwen3-next-80b-a3b", "--from-log", _log(tmp_path, "vllm-file-7292846353"))
    assert d["budget_bytes"] == 47_878_721_024 and d["version"] == "0.10.2" and d["settings"]["tp"]["value"] == 2
    assert (f["kv_tokens"]["kvplan"], f["kv_tokens"]["status"]) == (973_760, "reproduced")
    assert f["max_concurrency"]["kvplan"] == 14.77 and f["block_size"]["kvplan"] == 544
    assert f["mamba_page_padding_pct"]["kvplan"] == 1.49 and f["available_kv_gib"]["kvplan"] == 44.59
    assert d["reproduced"] == 7 and d["differs"] == 0


def test_round_trip_vllm_v1_workers_and_tp_what_if(cli, tmp_path):
    # Qwen3-235B FP8 on 8 x L40S, vLLM 0.10.2: one GPU KV cache size line per worker, the minimum allocated
    log = _log(tmp_path, "vllm-file-38962983769")
    d, f = _json(cli, "fit", "qwen3-235b-a22b", "--from-log", log)
    assert f["kv_tokens"]["kvplan"] == 238_208 and f["num_gpu_blocks"]["kvplan"] == 14_834
    assert f["max_concurrency"]["kvplan"] == ["7.27", "7.24"]
    assert d["settings"]["tp"]["value"] == 8  # the weights the log prints (27.72 GiB per GPU) pick TP 8
    # --tp 4 re-splits the weights: 2 x 27.72 GiB per GPU leaves nothing of the 39.98 GiB requested (exit 1, as fit)
    code, out, err = cli("fit", "qwen3-235b-a22b", "--from-log", log, "--tp", "4", "--json")
    assert code == 1 and err.startswith("kvplan: error: what if --tp 4: the KV budget would be -")
    d = json.loads(out)
    assert d["what_if"]["changes"] == [{"setting": "tp", "flag": "--tp", "log": 8, "new": 4}]
    assert d["what_if"]["budget_bytes"] == 0 and d["what_if"]["plan"]["max_requests_by_memory"] == 0


def test_vllm_plans_on_the_worker_with_the_fewest_blocks(cli, tmp_path):
    # the same log: the workers print 238,208 and 237,344 tokens; vLLM allocates the minimum, num_gpu_blocks 14,834
    # of 16 tokens (the log's own line): the plan is counted on it, not on the first worker's 14,888 blocks
    entry = ENTRIES["vllm-file-38962983769"]
    d, _ = _json(cli, "fit", "qwen3-235b-a22b", "--from-log", _log(tmp_path, "vllm-file-38962983769"))
    blocks = entry["printed"]["num_gpu_blocks"]
    assert (d["plan"]["num_blocks"], d["plan"]["kv_capacity_tokens"]) == (blocks, blocks * 16) == (14_834, 237_344)
    assert f"{d['plan']['max_concurrency']:.2f}" == f"{blocks * 16 / 32_768:.2f}" == "7.24"
    assert d["plan_budget_bytes"] < d["budget_bytes"] == entry["printed"]["kv_cache_memory_bytes"]


@pytest.mark.parametrize(
    "flags, change",
    [
        (["--block-size", "1"], {"setting": "block_size", "flag": "--block-size", "log": 16, "new": 1}),
        (["--pp", "2"], {"setting": "pp", "flag": "--pp", "log": 1, "new": 2}),
    ],
)
def test_a_what_if_keeps_the_layout_the_log_gives(cli, tmp_path, flags, change):
    # a TP 8 run (the entry's settings; the 27.72 GiB of weights per GPU the log prints pick it): a what-if of a
    # setting the log does not print used to be read as part of the log, and the layout re-inferred from its plan
    # (--block-size 1: "tp 1 ... the closest", 1 request; --pp 2: TP 2)
    entry = ENTRIES["vllm-file-38962983769"]
    d, _ = _json(cli, "fit", "qwen3-235b-a22b", "--from-log", _log(tmp_path, "vllm-file-38962983769"), *flags)
    tp = entry["settings"]["tensor_parallel_size"]
    assert d["settings"]["tp"]["value"] == tp == 8 and d["differs"] == 0 and d["reproduced"] == 6
    assert d["what_if"]["changes"] == [change] and d["what_if"]["plan"]["tensor_parallel_size"] == tp
    if flags[0] == "--block-size":  # the same bytes in 1-token blocks: the log's 237,344 tokens, 7 requests of 32k
        plan = d["what_if"]["plan"]
        assert plan["kv_capacity_tokens"] == entry["printed"]["num_gpu_blocks"] * 16
        assert plan["max_concurrent_requests"] == int(entry["printed"]["num_gpu_blocks"] * 16 / 32_768) == 7
    else:  # the weights per GPU halve over 16 GPUs
        assert d["what_if"]["plan"]["pipeline_parallel_size"] == 2
        assert "weights per GPU 27.72 GiB (the log) × 8 / 16 GPUs (TP × PP) = 13.86 GiB" in d["what_if"]["notes"]


@pytest.mark.parametrize("flags", [["--max-model-len", "10000000"], ["--gpu-memory-utilization", "0.01"]])
def test_a_what_if_that_fits_nothing_exits_1_as_fit_does(cli, tmp_path, flags):
    log = _log(tmp_path, "vllm-file-38962983769")
    code, out, err = cli("fit", "qwen3-235b-a22b", "--from-log", log, *flags)
    assert code == 1 and "Max concurrent requests of" in out and err.count("\n") == 1
    assert err.startswith(f"kvplan: error: what if {flags[0]} {flags[1]}: ")
    code, out, _ = cli("fit", "qwen3-235b-a22b", "--from-log", log, *flags, "--json")
    assert code == 1 and json.loads(out)["what_if"]["plan"]["max_concurrent_requests"] == 0


def test_another_engine_than_the_logs_is_refused(cli, tmp_path):
    log = _log(tmp_path, "vllm-file-38962983769")
    code, out, err = cli("fit", "qwen3-235b-a22b", "--from-log", log, "--engine", "sglang")
    assert (code, out) == (2, "") and err == (
        f"kvplan: error: --engine sglang: {log} is a vLLM log, planned with vLLM's rules; drop --engine (or give "
        "--engine vllm), or give a sglang log\n"
    )
    code, _, _ = cli("fit", "qwen3-235b-a22b", "--from-log", log, "--engine", "vllm", "--json")
    assert code == 0


def test_round_trip_vllm_v1_max_model_len_what_if(cli, tmp_path):
    # vllm-06 (0.28+ one-line format): 460,496 tokens, 3.51x at 131,072; at 65,536 the same pool holds twice the
    # requests: 460,496 / 65,536 = 7.03
    log = _log(tmp_path, "vllm-06")
    d, f = _json(cli, "fit", "llama3.1-8b", "--from-log", log, "--max-model-len", "64k")
    assert f["kv_tokens"]["kvplan"] == 460_496 and f["max_concurrency"]["kvplan"] == 3.51
    assert f"{d['what_if']['plan']['max_concurrency']:.2f}" == f"{460_496 / 65_536:.2f}"
    assert d["what_if"]["budget_bytes"] == d["budget_bytes"]


def test_round_trip_vllm_v0(cli, tmp_path):
    # vLLM V0 0.6.4, Llama-3.1-8B on an RTX 3090 at 29,000 tokens: blocks, CPU blocks, concurrency, the budget
    d, f = _json(cli, "fit", "llama3.1-8b", "--from-log", _log(tmp_path, "vllm-vllm-10517-b"))
    assert d["generation"] == "v0" and d["settings"]["engine_version"]["value"] == "0.6"
    assert f["num_gpu_blocks"]["kvplan"] == 1478 and f["num_cpu_blocks"]["kvplan"] == 2048
    assert f["max_concurrency"]["kvplan"] == 0.82 and f["kv_cache_size_gib"]["status"] == "reproduced"
    assert f["kv_tokens"]["status"] == "budget" and d["differs"] == 0
    # an FP8 KV cache on the same budget: a block is half the bytes, twice the blocks
    d, _ = _json(cli, "fit", "llama3.1-8b", "--from-log", _log(tmp_path, "vllm-vllm-10517-b"), "--kv-dtype", "fp8")
    assert d["what_if"]["plan"]["num_blocks"] == 2 * 1478


def test_round_trip_vllm_max_num_seqs_what_if(cli, tmp_path):
    # GPT-2 on vLLM 0.11: 589.34x at 1,024 tokens; --max-num-seqs 512 bounds the running requests
    log = _log(tmp_path, "vllm-file-11223326262")
    d, f = _json(cli, "fit", "gpt2", "--from-log", log, "--max-num-seqs", "512")
    assert f["kv_tokens"]["kvplan"] == 603_488 and f["max_concurrency"]["kvplan"] == 589.34
    plan = d["what_if"]["plan"]
    assert plan["max_concurrent_requests"] == 512 and plan["max_requests_by_memory"] == 589


def test_round_trip_sglang(cli, tmp_path):
    # QwQ-32B on 4 x L4: K and V sizes, max_running_requests, and the token count from the memory figures
    log = _log(tmp_path, "sglang-llms-in-clouds-qwq32b")
    d, f = _json(cli, "fit", "qwen2.5-32b", "--from-log", log, "--gpu-memory-utilization", "0.85")
    assert (f["k_size_gb"]["kvplan"], f["v_size_gb"]["kvplan"]) == (1.42, 1.42)
    assert f["max_running_requests"]["kvplan"] == 2049 and f["context_len"]["kvplan"] == 131_072
    assert f["max_total_num_tokens_memory"]["status"] == "reproduced"
    assert d["settings"]["tp"]["value"] == 4 and d["differs"] == 0


def test_round_trip_trtllm(cli, tmp_path):
    # Llama-3.1-8B FP8 KV on an RTX 5090, TensorRT-LLM 0.19: blocks, tokens, GiB, and 0.9 x available
    log = _log(tmp_path, "trtllm-02")
    d, f = _json(cli, "fit", "llama3.1-8b", "--from-log", log, "--kv-dtype", "fp8")
    assert f["num_blocks_primary"]["kvplan"] == 8219 and f["allocated_gib"]["kvplan"] == 16.05
    assert f["num_blocks_primary_budget"]["status"] == "reproduced" and d["differs"] == 0


def test_round_trip_llamacpp(cli, tmp_path):
    # gpt-oss-20b on Ascend (CANN), llama.cpp: the full and the SWA caches, and the SWA cells (FA on: pad 256)
    log = _log(tmp_path, "llamacpp-file-44321302313")
    d, f = _json(cli, "fit", "gpt-oss-20b", "--from-log", log, "--kv-dtype", "q8_0")
    assert (f["kv_size_mib"]["kvplan"], f["k_mib"]["kvplan"], f["swa_kv_size_mib"]["kvplan"]) == (3072, 1536, 18)
    assert f["swa_kv_cells"]["kvplan"] == 768 and d["differs"] == 0
    assert d["what_if"]["changes"][0]["new"] == "q8_0"


def test_text_output_shows_both_figures(cli, tmp_path):
    code, out, _ = cli("fit", "gemma3-27b", "--from-log", _log(tmp_path, "vllm-file-9297248278"))
    assert code == 0
    assert "vLLM 0.11.0 start-up log, V1 engine" in out
    assert "GPU KV cache size (tokens)" in out and "205,696" in out and "50.05" in out
    assert "Reproduced 5 of the 5 figures kvplan computes" in out


# --- what a log kvplan cannot read gets ---------------------------------------------------------------------


def test_not_a_log(cli, tmp_path):
    p = tmp_path / "notes.txt"
    p.write_text("hello\nworld\n")
    code, out, err = cli("fit", "llama3-8b", "--from-log", str(p))
    assert (code, out, err.count("\n")) == (2, "", 1)
    assert err.startswith(f"kvplan: error: --from-log {p}: not a start-up log kvplan reads: no start-up line of vLLM")


def test_log_without_kv_figure(cli, tmp_path):
    code, out, err = cli("fit", "llama3.1-405b", "--from-log", _log(tmp_path, "vllm-vllm-6746"))
    assert (code, out, err.count("\n")) == (2, "", 1)
    assert "a vLLM log without a KV-cache figure: none of 'GPU KV cache size'" in err


def test_log_without_model(cli, tmp_path):
    code, out, err = cli("fit", "--from-log", _log(tmp_path, "vllm-vllm-2031-7b-main"))
    assert (code, out, err.count("\n")) == (2, "", 1)
    assert "the vLLM log does not name the model" in err and "kvplan fit MODEL --from-log FILE" in err


def test_log_with_a_model_kvplan_cannot_load(cli, tmp_path):
    code, _, err = cli("fit", "--from-log", _log(tmp_path, "vllm-club-3090-294"))
    assert code == 2 and "names the model '~/.cache/huggingface/qwen3.6-27b-autoround-int4'" in err


def test_model_from_the_log(cli, tmp_path):
    # gpt-oss-120b's log names openai/gpt-oss-120b: the bundled model of that hf_repo
    d, _ = _json(cli, "fit", "--from-log", _log(tmp_path, "vllm-dennislee22-120b-4gpu-080"))
    assert d["model"] == "gpt-oss-120b" and d["differs"] == 0


def test_missing_file_and_flags_not_taken(cli, tmp_path):
    code, _, err = cli("fit", "--from-log", str(tmp_path / "none.log"))
    assert code == 2 and err == f"kvplan: error: --from-log {tmp_path / 'none.log'}: no such file\n"
    code, _, err = cli("fit", "llama3-8b", "--from-log", _log(tmp_path, "vllm-06"), "--kv-cache-memory", "10GiB")
    assert code == 2 and err.startswith("kvplan: error: --kv-cache-memory: not with --from-log")
    code, _, err = cli("fit", "llama3-8b")
    assert code == 2 and err.startswith("kvplan: error: --gpu: missing")


# --- the log's model id, resolved as MODEL is -----------------------------------------------------------------


def _with_lines(tmp_path, entry_id: str, first: list[str]) -> str:
    p = tmp_path / f"{entry_id}-named.log"
    p.write_text("\n".join([*first, *ENTRIES[entry_id]["lines"]]) + "\n", encoding="utf-8")
    return str(p)


@pytest.mark.parametrize(
    "entry_id, line",
    [
        # vLLM 0.10+: the non-default args (vllm-06 is 0.28's one-line format)
        (
            "vllm-06",
            "(APIServer pid=1) INFO 10-06 17:00:01 [utils.py:253] non-default args: {'model_tag': "
            "'meta-llama/Llama-3.1-8B-Instruct', 'model': 'meta-llama/Llama-3.1-8B-Instruct', "
            "'gpu_memory_utilization': 0.92}",
        ),
        # vLLM 0.5-0.8's API server: its argparse namespace (the shape of the lines in vLLM issues of 0.5.0-0.8.4)
        (
            "vllm-vllm-10517-b",
            "INFO 12-02 10:00:00 api_server.py:586] args: Namespace(host=None, port=8000, uvicorn_log_level='info', "
            "allowed_origins=['*'], api_key=None, lora_modules=None, chat_template=None, middleware=[], "
            "model='meta-llama/Llama-3.1-8B-Instruct', tokenizer=None, skip_tokenizer_init=False, "
            "max_model_len=29000, tensor_parallel_size=1)",
        ),
    ],
)
def test_the_logs_model_id_resolves_as_model_does(cli, tmp_path, entry_id, line):
    # A new user's finding: a log naming meta-llama/Llama-3.1-8B-Instruct exited 2 ("cannot load ... give it as
    # MODEL") while 'kvplan estimate meta-llama/Llama-3.1-8B-Instruct' (and a pasted 'vllm serve' command) read it
    # as the bundled llama3.1-8b with a warning. --from-log now resolves the id with the same function
    # (kvplan.loader.load_model), warning and all, offline here (the fixture above: nothing cached).
    code, _, warning = cli("estimate", "meta-llama/Llama-3.1-8B-Instruct", "--seq", "4k")
    assert code == 0 and warning.startswith(
        "kvplan: warning: meta-llama/Llama-3.1-8B-Instruct: the geometry of bundled llama3.1-8b"
    )
    assert read_log("\n".join([line, *ENTRIES[entry_id]["lines"]])).model_id == "meta-llama/Llama-3.1-8B-Instruct"
    log = _with_lines(tmp_path, entry_id, [line])
    code, out, err = cli("fit", "--from-log", log, "--json")
    assert (code, err) == (0, warning)  # the same warning, once
    d = json.loads(out)
    assert d["model"] == "meta-llama/Llama-3.1-8B-Instruct" and d["differs"] == 0
    # the engine's printed figures come back as with MODEL given (the corpus entry's model_ref, llama3.1-8b)
    given, _ = _json(cli, "fit", "llama3.1-8b", "--from-log", _log(tmp_path, entry_id))
    assert d["budget_bytes"] == given["budget_bytes"] and d["reproduced"] == given["reproduced"] >= 1
    assert ENTRIES[entry_id]["model_ref"] == "llama3.1-8b"


# --- numbers no engine prints (issue 20 audit): one line naming the log line, exit 2 --------------------------

_NINES = "9" * 5000


@pytest.mark.parametrize(
    "lines, line_no, shown",
    [
        # vLLM V0's executor line (int() of 5,000 digits raised ValueError: Exceeds the limit (4300 digits))
        ([f"INFO 01-01 [executor_base.py:100] # GPU blocks: {_NINES}, # CPU blocks: 2048"], 1,
         "the number 99999999999999999999…9999 (5,000 digits)"),
        # llama.cpp's cache line (the same ValueError, in the readers' shared num())
        (["llama_kv_cache:      CUDA0 KV buffer size =  1024.00 MiB",
          f"llama_kv_cache: size = {'1' * 5000} MiB (  4096 cells,  32 layers,  1/1 seqs), K (f16):  512.00 MiB, "
          "V (f16):  512.00 MiB"], 2, "the number 11111111111111111111…1111 (5,000 digits)"),
        # vLLM 0.6.4's profiling line: 400 nines of GiB overflowed a float (OverflowError in fromlog/vllm.py)
        (["INFO 01-01 [worker.py:100] Memory profiling results: total_gpu_memory=" + "9" * 400 + "GiB "
          "initial_memory_usage=1.0GiB peak_torch_memory=17.0GiB memory_usage_post_profile=1.0GiB "
          "non_torch_memory=0.5GiB kv_cache_size=50.0GiB gpu_memory_utilization=0.90"], 1,
         "the number 99999999999999999999…9999 (400 digits)"),
        # a setting parsed from vLLM's non-default args (ast.literal_eval, not num()): bounded where it is kept
        (["INFO 06-01 [utils.py:278] non-default args: {'model': 'meta-llama/Llama-3.1-8B', 'max_model_len': "
          + "9" * 4000 + "}", "INFO 01-01 [executor_base.py:100] # GPU blocks: 1478, # CPU blocks: 2048"], 1,
         "max_model_len = 99999999999999999999…9999 (4,000 digits)"),
        # 10^18 itself: the bound, in figures (a GPU block count) and in exponent form
        (["INFO 01-01 [executor_base.py:100] # GPU blocks: 1000000000000000000, # CPU blocks: 2048"], 1,
         "the number 1000000000000000000"),
    ],
)  # fmt: skip
def test_a_number_no_engine_prints_is_one_line_naming_the_log_line(cli, tmp_path, lines, line_no, shown):
    p = tmp_path / "big.log"
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    code, out, err = cli("fit", "llama3.1-8b", "--from-log", str(p))
    assert (code, out) == (2, "")
    assert err == (
        f"kvplan: error: --from-log {p}: line {line_no}: {shown} is beyond any figure an engine prints (below 10^18)\n"
    )


def test_the_largest_number_below_the_bound_is_read(tmp_path):
    # 10^18 - 1 GPU blocks is read as printed (the bound refuses only what no engine prints)
    r = read_log("INFO 01-01 [executor_base.py:100] # GPU blocks: 999999999999999999, # CPU blocks: 2048\n")
    assert r.printed["num_gpu_blocks"] == 999_999_999_999_999_999


# --- bounded reading (break-it items 13 and 14) ----------------------------------------------------------------


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_log_that_is_not_a_regular_file_is_refused_unopened(cli, tmp_path, kind):
    import os

    if kind == "fifo":
        path = tmp_path / "log.fifo"
        os.mkfifo(path)  # opened, it would block until a writer came (the break-it pass saw a hang)
    else:
        path = Path("/dev/zero")  # it never ends: 64 MiB of zeros were read and scanned (14 s)
        if not path.exists():
            pytest.skip("no /dev/zero")
    code, out, err = cli("fit", "llama3-8b", "--from-log", path)
    assert (code, out, err) == (2, "", f"kvplan: error: --from-log {path}: not a regular file\n")


def test_a_log_repeated_costs_what_its_distinct_lines_cost(cli, tmp_path, monkeypatch):
    # the corpus log repeated 2,000 times (3.2 MB) took 48 s: every repeated 'GPU KV cache size' line was a budget
    # search and a plan per worker; the searches and plans are now one per distinct line (counted, not timed)
    import kvplan.fit as fitmod

    lines = ENTRIES["vllm-file-38962983769"]["lines"]
    plans = {"n": 0}
    real = fitmod.fit_plan

    def counted(*a, **k):
        plans["n"] += 1
        return real(*a, **k)

    monkeypatch.setattr(fitmod, "fit_plan", counted)
    got = []
    for times in (1, 50):
        p = tmp_path / f"x{times}.log"
        p.write_text("\n".join(lines * times) + "\n", encoding="utf-8")
        plans["n"] = 0
        d, f = _json(cli, "fit", "qwen3-235b-a22b", "--from-log", p)
        got.append((plans["n"], d["plan"]["num_blocks"], f["num_gpu_blocks"]["kvplan"], d["reproduced"]))
    assert got[1] == got[0] and got[0][1:] == (14_834, 14_834, 6), got


def test_long_noise_lines_are_read_in_linear_time(tmp_path):
    # lines of one long word: patterns that began with an unanchored \w+ or \S+ retried it from every character
    # (quadratic: a 65 MB log of such lines took 150 s); a bound far above the linear time, far below the old one
    import time

    from kvplan.logs import read_log

    noise = ["INFO noise line " + "y" * 4000] * 500  # 2 MB
    for engine_lines in (ENTRIES["vllm-file-38962983769"]["lines"], ENTRIES["llamacpp-file-44321302313"]["lines"]):
        text = "\n".join(noise + engine_lines) + "\n"
        t0 = time.process_time()
        reading = read_log(text)
        assert time.process_time() - t0 < 5.0
        assert reading.printed  # the start-up lines after the noise are read


def test_sglangs_token_count_from_memory_is_never_negative():
    # a fraction that leaves less than nothing printed '-77,538 to -77,292' tokens; it is 0 now (and differs)
    from types import SimpleNamespace

    from kvplan.fromlog.sglang import _from_memory

    printed = ENTRIES["sglang-llms-in-clouds-qwq32b"]["printed"]
    ctx = SimpleNamespace(reading=SimpleNamespace(printed=printed), opts=SimpleNamespace(gpu_memory_utilization=0.01))
    (fig,) = _from_memory(ctx, 65_536)
    assert (fig.kvplan, fig.status) == ("0 (no memory left at this fraction)", DIFFERS)
    ctx.opts.gpu_memory_utilization = 0.85  # the run's own fraction: the printed count lies in the range
    (fig,) = _from_memory(ctx, 65_536)
    assert fig.status == REPRODUCED and fig.printed == printed["max_total_num_tokens"]


def test_an_sglang_fraction_what_if_moves_the_budget_from_the_default_taken(cli, tmp_path):
    # the QwQ log does not print mem_fraction_static: a what-if of 0.9 left the budget as it was (the fraction it
    # replaced was unknown); SGLang's default for the GPU is taken and the budget moves by the difference of the
    # memory available at start the log prints (21.63 GB)
    log = _log(tmp_path, "sglang-llms-in-clouds-qwq32b")
    code, out, err = cli("fit", "qwen2.5-32b", "--from-log", log, "--gpu-memory-utilization", "0.9", "--json")
    d = json.loads(out)
    (change,) = d["what_if"]["changes"]
    assert (change["setting"], change["new"]) == ("gpu_memory_utilization", 0.9)
    assert f"mem_fraction_static not in the log: {change['log']} (SGLang's default" in d["what_if"]["notes"][0]
    before = ENTRIES["sglang-llms-in-clouds-qwq32b"]["printed"]["avail_before_weights_gb"]
    moved = d["what_if"]["budget_bytes"] - d["plan_budget_bytes"]
    assert moved == int(before * (1 << 30) * (0.9 - change["log"])) > 0
