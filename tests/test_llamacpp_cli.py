"""``kvplan fit/fleet/sweep --engine llamacpp``: llama.cpp's own flags with llama.cpp's meaning (issue 16).

The byte counts asserted here are llama.cpp's, from tests/fixtures/llamacpp_golden.json (contexts llama.cpp
0c1e57098 created itself) or from llama.cpp's rules where the fixture has the same geometry at another size.
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import replace
from pathlib import Path

import pytest

from kvplan import api
from kvplan.fit import plan_fit
from kvplan.fleet import plan_layout, workload_from_data
from kvplan.gpus import get_gpu
from kvplan.loader import load_bundled

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = json.loads((ROOT / "tests" / "fixtures" / "llamacpp_golden.json").read_text())
GIB = 1 << 30


def _gguf(tmp_path: Path, name: str) -> str:
    spec = importlib.util.spec_from_file_location("llamacpp_golden", ROOT / "scripts" / "llamacpp_golden.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    m = FIXTURE["models"][name]
    arch = m["architecture"]
    path = tmp_path / f"{name}.gguf"
    mod.write_gguf(path, arch, {k[len(arch) + 1 :]: v for k, v in m["metadata"].items()})
    return str(path)


def fit_json(cli, *args):
    code, out, err = cli("fit", *args, "--json")
    assert code in (0, 1), err
    return json.loads(out)


def test_the_issues_example_plain_llama_server_on_gemma3(cli, tmp_path):
    # `llama-server -c 8192` on the Gemma 3 geometry: 4 slots sharing one cache; llama.cpp allocates 9,175,040 B
    # (fixture row gemma3/server-c8192), kvplan gave 4,456,448 B before (what -np 1 allocates)
    g = _gguf(tmp_path, "gemma3")
    d = fit_json(cli, g, "--gpu", "h100", "--engine", "llamacpp", "-c", "8192", "--kv-cache-memory", "1GiB")
    s = d["engine_settings"]
    assert (s["kv_total_bytes"], s["n_parallel"], s["kv_unified"], s["parallel_auto"]) == (9_175_040, 4, True, True)
    assert [c["cells"] for c in s["caches"]] == [8192, 4608]
    one = fit_json(
        cli, g, "--gpu", "h100", "--engine", "llamacpp", "-c", "8192", "-np", "1", "--kv-cache-memory", "1GiB"
    )
    assert one["engine_settings"]["kv_total_bytes"] == 4_456_448
    code, out, _ = cli("fit", g, "--gpu", "h100", "--engine", "llamacpp", "-c", "8192", "--kv-cache-memory", "1GiB")
    assert code == 0
    assert "KV caches, all slots: 9,175,040 B" in out
    assert "llama_kv_cache: size =    6.75 MiB (  4608 cells,   6 layers,  4/1 seqs)" in out


def test_ctx_size_is_the_total_of_all_slots(cli):
    base = ("llama3.1-8b", "--gpu", "h100", "--engine", "llamacpp")
    # -c 32768 -np 4: 4 streams of 8,192 cells (not unified); each slot takes one request of up to 8,192
    d = fit_json(cli, *base, "-c", "32768", "-np", "4")
    s = d["engine_settings"]
    assert (d["max_model_len"], d["max_concurrent_requests"], s["n_ctx_seq"], s["kv_unified"]) == (8192, 4, 8192, False)
    assert s["caches"] == [dict(name="kv", cells=8192, n_stream=4, layers=32, k_bytes=2 * GIB, v_bytes=2 * GIB)]
    assert d["kv_bytes_per_request"] == GIB  # one slot's stream: 8,192 cells × 32 × 1,024 × 2 × 2 B
    # no -np: llama-server's 4 slots share the 32,768 cells; one request of 32,768 fills them
    d = fit_json(cli, *base, "-c", "32768")
    assert (d["max_model_len"], d["max_concurrent_requests"], d["engine_settings"]["kv_unified"]) == (32768, 1, True)
    d = fit_json(cli, *base, "-c", "32768", "--max-model-len", "8192")
    assert d["max_concurrent_requests"] == 4  # four requests of 8,192 in the shared cells
    # --max-model-len without -c: -c = 4 slots × 8,192, the same server
    d = fit_json(cli, *base, "--max-model-len", "8192")
    assert (d["engine_settings"]["n_ctx"], d["max_concurrent_requests"]) == (32768, 4)
    # a request longer than a slot fits no slot
    d = fit_json(cli, *base, "-c", "32768", "-np", "4", "--max-model-len", "16384")
    assert d["max_concurrent_requests"] == 0 and d["fits"] is False


def test_ctx_size_keeps_its_meaning_for_other_engines(cli):
    a = fit_json(cli, "llama3.1-8b", "--gpu", "h100", "--ctx-size", "32768")
    b = fit_json(cli, "llama3.1-8b", "--gpu", "h100", "--max-model-len", "32768")
    assert a == b and a["max_model_len"] == 32768
    code, out, err = cli("fit", "llama3.1-8b", "--gpu", "h100", "--parallel", "4")
    assert (code, out) == (
        2,
        "",
    ) and err == "kvplan: error: --parallel: a llama.cpp setting; give it with --engine llamacpp\n"


def test_llama_cpp_spellings_equal_kvplans_names(cli):
    base = ("llama3.1-8b", "--gpu", "h100", "--engine", "llamacpp")
    short = fit_json(cli, *base, "-c", "16384", "-np", "2", "-kvu", "-ctk", "q8_0", "-ctv", "q8_0", "-fa", "on",
                     "-ub", "256", "-b", "1024")  # fmt: skip
    long = fit_json(cli, *base, "--ctx-size", "16384", "--parallel", "2", "--kv-unified", "--cache-type-k", "q8_0",
                    "--cache-type-v", "q8_0", "--flash-attn", "on", "--ubatch-size", "256", "--batch-size", "1024")  # fmt: skip
    assert short == long
    s = short["engine_settings"]
    assert (s["n_ubatch"], s["n_batch"], s["kv_unified"], s["cache_type_k"]) == (256, 1024, True, "q8_0")
    # q8_0: 34 B per 32 values: 16,384 cells × 32 layers × 1,024 values × 34 / 32 B for K, the same for V
    assert s["kv_total_bytes"] == 2 * 16384 * 32 * 1024 * 34 // 32


def test_k_and_v_types_may_differ(cli):
    d = fit_json(cli, "llama3.1-8b", "--gpu", "h100", "--engine", "llamacpp", "-c", "8192", "-np", "1",
                 "-ctk", "q8_0", "-ctv", "f16")  # fmt: skip
    (c,) = d["engine_settings"]["caches"]
    assert d["kv_dtype"] == "q8_0/fp16" and c["k_bytes"] == 8192 * 32 * 1088 and c["v_bytes"] == 8192 * 32 * 2048


def test_refusals_are_one_line_naming_the_flag(cli, tmp_path):
    phi = _gguf(tmp_path, "phi2_kv1")  # head_dim 80: a q8_0 block of 32 does not divide it
    code, out, err = cli("fit", phi, "--gpu", "h100", "--engine", "llamacpp", "-ctk", "q8_0", "-ctv", "q8_0",
                         "--kv-cache-memory", "1GiB")  # fmt: skip
    assert (code, out, err.count("\n")) == (2, "", 1)
    assert err.startswith("kvplan: error: -ctk q8_0: llama.cpp refuses it for phi2_kv1: block size 32 does not divide")
    code, _, err = cli("fit", "llama3.1-8b", "--gpu", "h100", "--engine", "llamacpp", "-ctv", "q4_0", "-fa", "off")
    assert code == 2 and "llama.cpp refuses a quantized V cache without flash attention" in err
    code, _, err = cli("fit", "llama3.1-8b", "--gpu", "h100", "--engine", "llamacpp", "--kv-dtype", "fp8")
    assert code == 2 and "--kv-dtype: llama.cpp has no 'fp8' cache type; allowed: f32, f16, bf16, q8_0" in err


def test_iq4_nl_is_a_cache_type_as_llama_cpp_allocates_it(cli, tmp_path):
    # row llama/ctx4096-np1-iq4_nl-iq4_nl-faon: llama.cpp's K and V caches of 1,179,648 B each (was refused by
    # the CLI as "--kv-dtype: unknown dtype 'iq4_nl'", naming a flag the user did not type)
    (row,) = [r for r in FIXTURE["cases"] if r["id"] == "llama/ctx4096-np1-iq4_nl-iq4_nl-faon"]
    g = _gguf(tmp_path, "llama")
    d = fit_json(cli, g, "--gpu", "h100", "--engine", "llamacpp", "-c", "4096", "-np", "1", "-ctk", "iq4_nl",
                 "-ctv", "iq4_nl", "-fa", "on", "--kv-cache-memory", "1GiB")  # fmt: skip
    (c,) = d["engine_settings"]["caches"]
    assert (c["k_bytes"], c["v_bytes"]) == (row["caches"][0]["k_bytes"], row["caches"][0]["v_bytes"]) == (1179648,) * 2
    code, out, err = cli("fit", "llama3-8b", "--gpu", "h100", "--engine", "llamacpp", "-c", "4096", "-np", "1",
                         "-ctk", "iq4_nl")  # fmt: skip
    assert code == 0 and "iq4_nl" in out, err
    code, _, err = cli("fit", "llama3-8b", "--gpu", "h100", "--engine", "llamacpp", "-ctk", "fp8")
    assert code == 2 and "kvplan: error: --cache-type-k: llama.cpp has no 'fp8' cache type" in err


def test_llama_cli_has_one_slot(cli):
    d = fit_json(cli, "llama3.1-8b", "--gpu", "h100", "--engine", "llamacpp", "--llama-tool", "cli", "-c", "8192")
    s = d["engine_settings"]
    assert (s["tool"], s["n_parallel"], s["kv_unified"], d["max_concurrent_requests"]) == ("llama-cli", 1, False, 1)


def test_fit_lowers_the_default_context_to_leave_a_gib(cli):
    base = ("llama3.1-8b", "--gpu")
    d = fit_json(cli, *base, "h100", "--engine", "llamacpp")  # the model's 131,072 cells fit: kept
    assert d["engine_settings"]["n_ctx"] == 131072
    d = fit_json(cli, *base, "l4", "--engine", "llamacpp")  # they do not on an L4: lowered, whole 256s, >= 4,096
    s = d["engine_settings"]
    assert 4096 <= s["n_ctx"] < 131072 and s["n_ctx"] % 256 == 0 and s["ctx_from"] == "-fit"
    used = d["weights_bytes"] + d["activation_bytes"] + s["kv_total_bytes"]
    assert used <= d["gpu_total_bytes"] - d["overhead_bytes"] - GIB  # llama.cpp's --fit-target margin
    assert s["max_ctx_size_fit"] > s["n_ctx"]  # without the margin more would fit


def test_fleet_packs_requests_into_the_slots(cli):
    # llama-server's 4 slots per replica: 10 requests of 8k need 3 replicas; -np 8 (one stream each): 2
    spec, gpu = load_bundled("llama3.1-8b"), get_gpu("h100")
    wl = workload_from_data({"name": "w", "classes": [{"name": "c", "concurrency": 10, "tokens": 8192}]}, "w")
    row = plan_layout(spec, gpu, wl, api.fit_options(engine="llamacpp"))
    assert (row.replicas, row.requests_per_replica) == (3, 4)
    # the same pools as fit: -c 4 × 8,192 shared by 4 slots; a request holds its 8,192 cells (1 GiB)
    fit = plan_fit(spec, gpu, api.fit_options(engine="llamacpp", max_model_len=8192))
    assert fit.pools == (("slots", 4, 0), ("cells", 32768, 131_072))
    assert row.kv_bytes_needed_per_gpu == 10 * fit.kv_bytes_per_request == 10 * GIB
    row = plan_layout(spec, gpu, wl, api.fit_options(engine="llamacpp", n_parallel=8))
    assert (row.replicas, row.requests_per_replica) == (2, 8)
    code, out, err = cli("fleet", "llama3.1-8b", "--concurrency", "10", "--seq", "8k", "--gpu", "h100", "--tp", "1",
                         "--engine", "llamacpp", "-np", "8", "--json")  # fmt: skip
    assert code == 0, err
    best = json.loads(out)["layouts"][0]
    assert (best["replicas"], best["requests_per_replica"]) == (2, 8)


@pytest.mark.parametrize(
    "opts",
    [
        api.fit_options(engine="llamacpp", ctx_size=65536, n_parallel=4),
        api.fit_options(engine="llamacpp", n_parallel=2, flash_attn="off"),
        api.fit_options(engine="llamacpp", llama_tool="cli", swa_full=True, max_num_batched_tokens=1024),
    ],
    ids=["c65536-np4", "np2-faoff", "cli-swafull"],
)
def test_sweep_equals_fit(opts):
    from kvplan.sweep import VALUE_COLUMNS, sweep

    specs = [load_bundled(m) for m in ("gemma3-27b", "gpt-oss-20b", "jamba-v0.1", "llama3.1-8b", "deepseek-v3")]
    seqs, gpus, dtypes = [1, 4096, 32768, 131072], [get_gpu(g) for g in ("h100", "l4", "mi300x")], ["auto", "q8_0"]
    result = sweep(specs, seqs, gpus, dtypes, (1, 2), opts)
    assert result.num_rows >= 100
    for i in range(result.num_rows):
        ref = plan_fit(
            specs[int(result.model_index[i])], gpus[int(result.gpu_index[i])],
            replace(opts, tensor_parallel_size=int(result.tp[i]), max_model_len=int(result.seq[i]),
                    kv_dtype=result.kv_dtype_names[int(result.kv_dtype_index[i])]),
        )  # fmt: skip
        for col in VALUE_COLUMNS:
            assert result.columns[col][i].item() == getattr(ref, col), (col, i)


ROWS = {c["id"]: c for c in FIXTURE["cases"]}
KVPLAN_NAME = {"f16": "fp16", "f32": "fp32"}  # kvplan's names of llama.cpp's cache types (q8_0 ... alike)


@pytest.mark.parametrize(
    "row_id",
    [
        "llama/ctx4096-np1-q8_0-f16-faon",
        "llama/ctx4096-np1-f16-q4_0-faon",
        "llama/ctx4096-np1-q8_0-q4_0-faon",
        "llama/ctx4096-np1-q8_0-q8_0-faon",
        "qwen3/ctx4096-np1-q4_0-f16-faoff",
        "phi2/ctx4096-np1-q8_0-f16-faoff",  # head_dim 80: K rows of whole q8_0 blocks; V transposed, -fa off
    ],
)
def test_k_and_v_cache_types_that_differ(cli, tmp_path, row_id):
    # -ctk / -ctv as llama.cpp allocates them (the fixture row's cache bytes), in fit's text and JSON, fleet and
    # sweep: fit's text said "--kv-dtype: unknown dtype 'q8_0/fp16'" (exit 2), fleet gave no reason, the phi-2
    # row failed, and the sweep labelled -ctk q8_0 -ctv q8_0 "fp16"
    row = ROWS[row_id]
    a = row["asked"]
    assert row["ok"] and a["n_seq_max"] == 1
    g = _gguf(tmp_path, row["model"])
    k, v = (KVPLAN_NAME.get(a[t], a[t]) for t in ("type_k", "type_v"))
    label = k if k == v else f"{k}/{v}"
    flags = ("--engine", "llamacpp", "-c", str(a["n_ctx"]), "-np", "1", "-ctk", a["type_k"], "-ctv", a["type_v"],
             "-fa", a["flash_attn"], "--kv-cache-memory", "1GiB")  # fmt: skip
    code, out, err = cli("fit", g, "--gpu", "h100", *flags)
    assert code == 0, err
    assert out.splitlines()[0].endswith(f"KV {label}")
    assert f"KV caches, all slots: {row['memory_bytes']:,} B" in out
    d = fit_json(cli, g, "--gpu", "h100", *flags)
    assert (d["kv_dtype"], d["engine_settings"]["kv_total_bytes"]) == (label, row["memory_bytes"])
    assert d["tpot_ms_limit"] > 0  # the speed figures read K and V rows in their own types
    # fleet: one slot of n_ctx cells per replica; 3 requests of n_ctx tokens need 3 replicas, each request the
    # row's bytes
    code, out, err = cli("fleet", g, *flags, "--concurrency", "3", "--seq", str(a["n_ctx"]), "--gpu", "h100",
                         "--tp", "1", "--pp", "1", "--json")  # fmt: skip
    assert code == 0, err
    best = json.loads(out)["layouts"][0]
    assert (best["fits"], best["replicas"], best["kv_bytes_needed_per_gpu"]) == (True, 3, 3 * row["memory_bytes"])
    code, out, err = cli("sweep", g, *flags[:2], *flags[4:], "--seq", str(a["n_ctx"]), "--gpu", "h100", "--csv")
    assert code == 0, err
    head, first = out.splitlines()[:2]
    cells = dict(zip(head.split(","), first.split(","), strict=True))
    assert (cells["kv_dtype"], int(cells["kv_bytes_per_request"])) == (label, row["memory_bytes"])


def test_the_settings_echo_pastes_back(cli):
    # A new user's finding: the echo read "-c 32,768 ... -b 2,048 -ub 512", which llama-server cannot take. Its flags
    # carry no thousands separators now, and pasted back (parentheses dropped) they plan the same configuration.
    import re

    code, out, err = cli("fit", "llama3.1-8b", "--gpu", "h100", "--engine", "llamacpp", "-c", "32768")
    assert code == 0, err
    echo = next(line for line in out.splitlines() if ", llama-server defaults: " in line)
    flags = echo.split(", llama-server defaults: ", 1)[1]
    assert flags == "-c 32768 -np 4 (auto) -kvu -ctk f16 -ctv f16 -fa auto (on) -b 2048 -ub 512"
    assert "-c 32768, 4 slots" in out and "-ub 512, -fa auto" in out  # the table's notes too
    pasted = re.sub(r" \([^)]*\)", "", flags).split()
    again = fit_json(cli, "llama3.1-8b", "--gpu", "h100", "--engine", "llamacpp", *pasted)
    first = fit_json(cli, "llama3.1-8b", "--gpu", "h100", "--engine", "llamacpp", "-c", "32768")
    assert again["engine_settings"].pop("parallel_auto") is False  # -np given now, not llama-server's own choice
    first["engine_settings"].pop("parallel_auto")
    assert again == first


def test_the_replication_note_says_llama_cpp_has_no_tensor_parallelism(cli):
    # --tp under llama.cpp is kvplan's own head split (docs/engines-llamacpp.md, "Not modelled"): the note cited
    # vLLM's get_num_kv_heads as if llama.cpp had that rule
    code, out, _ = cli("fit", "qwen3-235b-a22b", "--gpu", "h100", "--engine", "llamacpp", "--tp", "8", "-c", "4096",
                       "--kv-cache-memory", "1GiB")  # fmt: skip
    assert code in (0, 1)
    assert ("each KV head is cached on 2 of the 8 GPUs (kvplan's split; llama.cpp itself has no tensor "
            "parallelism: max(1, H_kv // TP) heads per GPU)") in out  # fmt: skip
