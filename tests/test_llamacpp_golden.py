"""kvplan's llama.cpp engine against llama.cpp itself: tests/fixtures/llamacpp_golden.json.

The fixture holds 2,818 contexts llama.cpp 0c1e57098 created on CPU (scripts/llamacpp_golden.py): for each,
the settings asked, what llama.cpp resolved (n_ctx, n_ctx_seq, n_ubatch, flash attention), the cells, streams
and K/V bytes of every cache it allocated, its recurrent states, or its refusal. Every row is rebuilt here:
the row's tiny GGUF is written from the fixture's metadata (as the script wrote it) and read by kvplan's
GGUF reader, the row's settings become llama.cpp flags (api.fit_options), and the plan must equal what
llama.cpp did, byte for byte, or refuse what it refused for the same reason. A row kvplan cannot express
must be listed in INEXPRESSIBLE with a reason, and an entry there that kvplan now gets right fails.

The compute buffer is a model (kvplan.engines.llamacpp.compute_buffer): it is exact for the real
geometries with flash attention on and f16 caches, and every other figure llama.cpp printed (the fixture's
real geometries, the engine-log corpus) must lie in the range kvplan states for it.
"""

from __future__ import annotations

import importlib.util
import json
from dataclasses import replace
from pathlib import Path

import pytest

from kvplan import api
from kvplan.engines import llamacpp as L
from kvplan.errors import UsageError
from kvplan.fit import plan_fit
from kvplan.gpus import get_gpu
from kvplan.loader import load_bundled
from kvplan.readers.gguf import load_gguf
from kvplan.specs import build_spec

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = json.loads((ROOT / "tests" / "fixtures" / "llamacpp_golden.json").read_text())
CASES = FIXTURE["cases"]
MIB = 1 << 20
REAL = {name for name, m in FIXTURE["models"].items() if m["dry_run"]}  # llama3.1-8b, qwen2.5-7b, gemma2-9b

# rows kvplan cannot express: id -> why (none today; an entry that kvplan gets right fails the stale test)
INEXPRESSIBLE: dict[str, str] = {}


def _writer():
    spec = importlib.util.spec_from_file_location("llamacpp_golden", ROOT / "scripts" / "llamacpp_golden.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.write_gguf


@pytest.fixture(scope="module")
def specs(tmp_path_factory):
    """Every fixture model as kvplan's GGUF reader reads the GGUF the fixture script wrote."""
    write_gguf = _writer()
    tmp = tmp_path_factory.mktemp("gguf")
    out = {}
    for name, m in FIXTURE["models"].items():
        arch = m["architecture"]
        path = tmp / f"{name}.gguf"
        write_gguf(path, arch, {k[len(arch) + 1 :]: v for k, v in m["metadata"].items()})
        assert path.stat().st_size == m["gguf_bytes"]  # the same file llama.cpp read
        out[name] = load_gguf(path)
    return out


def options(row: dict, **kw):
    """The row's llama_context_params as llama.cpp's flags (-c, -np, -kvu, -ctk, -ctv, -fa, -b, -ub, --swa-full)."""
    a = row["asked"]
    return api.fit_options(
        engine="llamacpp", ctx_size=a["n_ctx"], n_parallel=a["n_seq_max"], kv_unified=a["kv_unified"],
        cache_type_k=a["type_k"], cache_type_v=a["type_v"], flash_attn=a["flash_attn"], n_batch=a["n_batch"],
        max_num_batched_tokens=a["n_ubatch"], swa_full=a["swa_full"], **kw,
    )  # fmt: skip


def kvplan_row(spec, row: dict) -> dict:
    """What kvplan plans for the row: llama.cpp's resolved settings, caches, states and total, or its refusal."""
    try:
        r = plan_fit(spec, get_gpu("h100"), options(row, kv_cache_memory_bytes=1 << 40))
    except UsageError as e:
        return {"refused": str(e)}
    s = r.engine_settings
    return {
        "got": dict(n_ctx=s["n_ctx"], n_ctx_seq=s["n_ctx_seq"], n_ubatch=s["n_ubatch"], flash_attn=s["flash_attn_on"]),
        "caches": [(c["name"], c["cells"], c["n_stream"], c["k_bytes"], c["v_bytes"]) for c in s["caches"]],
        "recurrent": None
        if s["recurrent"] is None
        else (s["recurrent"]["cells"], s["recurrent"]["r_bytes"], s["recurrent"]["s_bytes"]),  # fmt: skip
        "memory_bytes": s["kv_total_bytes"],
    }


def llama_row(row: dict) -> dict:
    """The same fields from what llama.cpp did."""
    if not row["ok"]:
        return {"refused": row["error"]}
    rc = row["recurrent"]
    return {
        "got": {k: row["got"][k] for k in ("n_ctx", "n_ctx_seq", "n_ubatch", "flash_attn")},
        "caches": [(c["name"], c["cells"], c["n_stream"], c["k_bytes"], c["v_bytes"]) for c in row["caches"]],
        "recurrent": None if rc is None else (rc["cells"], rc["r_bytes"], rc["s_bytes"]),
        "memory_bytes": row["memory_bytes"],
    }


def same_refusal(ours: str, theirs: str, row: dict) -> bool:
    """kvplan refuses for llama.cpp's reason (its log line, or its abort)."""
    a = row["asked"]
    if row.get("aborted"):
        return "aborts" in ours and "GGML_ASSERT" in theirs
    if "does not support different K" in theirs:
        return "different K and V cache types for an MLA model" in ours
    if "quantized V cache requires flash_attn" in theirs:
        return f"-ctv {a['type_v']}: llama.cpp refuses a quantized V cache without flash attention" in ours
    for kv, flag, t in (("K", "-ctk", a["type_k"]), ("V", "-ctv", a["type_v"])):
        if f"{kv} cache type {t} with block size 32 does not divide" in theirs:
            head = theirs.rsplit(" ", 1)[1]  # n_embd_head_k=80
            return ours.startswith(f"{flag} {t}: llama.cpp refuses it") and f"does not divide {head}" in ours
    return False


def test_the_fixture_is_llama_cpps_own():
    assert FIXTURE["llama_cpp"]["commit"] == L.LLAMA_CPP_COMMIT
    assert len(CASES) == 2818 and sum(not r["ok"] for r in CASES) == 240


def test_every_expressible_row_equals_llama_cpp(specs):
    wrong, counts = [], {"equal": 0, "refused alike": 0, "inexpressible": 0}
    for row in CASES:
        if row["id"] in INEXPRESSIBLE:
            counts["inexpressible"] += 1
            continue
        ours, theirs = kvplan_row(specs[row["model"]], row), llama_row(row)
        if "refused" in theirs or "refused" in ours:
            ok = "refused" in ours and "refused" in theirs and same_refusal(ours["refused"], theirs["refused"], row)
            counts["refused alike"] += ok
        else:
            ok = ours == theirs
            counts["equal"] += ok
        if not ok:
            wrong.append((row["id"], ours, theirs))
    assert wrong == []
    assert counts == {"equal": 2578, "refused alike": 240, "inexpressible": 0}


def test_inexpressible_entries_are_not_stale(specs):
    ids = {r["id"]: r for r in CASES}
    for rid, why in INEXPRESSIBLE.items():
        assert rid in ids and why, rid
        row = ids[rid]
        assert kvplan_row(specs[row["model"]], row) != llama_row(row), f"{rid} is expressible now: drop it"


@pytest.mark.parametrize(
    "rid, cells, total",
    [
        # the issue's example: llama-server -c 8192 on Gemma 3 = 4 slots, unified: SWA pad(4 × 1024 + 512)
        ("gemma3/server-c8192", [8192, 4608], 9_175_040),
        ("gemma3/server-c8192-np1", [8192, 1536], 4_456_448),  # what kvplan said before (one request)
        ("gemma3/server-c8192-np4-kvu0", [2048, 1536], 4 * (2048 + 6 * 1536) * 256),  # -np 4: a stream per slot
        ("gemma3_swa0/server-c8192", [8192], 14_680_064),  # sliding_window 0: every layer full
    ],
)
def test_the_issues_rows(specs, rid, cells, total):
    row = next(r for r in CASES if r["id"] == rid)
    assert [c["cells"] for c in row["caches"]] == cells and row["memory_bytes"] == total  # llama.cpp's figures
    assert kvplan_row(specs[row["model"]], row)["memory_bytes"] == total


def test_refusals_name_the_flag(specs):
    row = next(r for r in CASES if r["id"] == "phi2_kv1/ctx4096-np1-q8_0-q8_0-faon")
    with pytest.raises(UsageError, match=r"^-ctk q8_0: llama.cpp refuses it for phi2_kv1: block size 32 does not "
                                         r"divide n_embd_head_k=80"):  # fmt: skip
        plan_fit(specs["phi2_kv1"], get_gpu("h100"), options(row, kv_cache_memory_bytes=1 << 30))
    row = next(r for r in CASES if r["id"] == "phi2/ctx4096-np1-q8_0-f16-faoff")  # K row 160: taken with -fa off
    assert row["ok"] and kvplan_row(specs["phi2"], row)["caches"][0][3] == 1_392_640


# --- the compute buffer ---------------------------------------------------------------------------------


def _compute(spec, opts):
    r = plan_fit(spec, get_gpu("h100"), replace(opts, kv_cache_memory_bytes=None, weights_bytes=0))
    term = next(x for x in r.budget_terms if x["name"] == "activation")
    return r.activation_bytes, (term["low"], term["high"])


@pytest.mark.parametrize("rid", [r["id"] for r in CASES if r["model"] in REAL])
def test_compute_buffer_of_the_real_geometries(specs, rid):
    row = next(r for r in CASES if r["id"] == rid)
    model, (low, high) = _compute(specs[row["model"]], options(row))
    measured = row["compute_bytes"]
    assert low <= measured <= high, (model, measured)
    if row["got"]["flash_attn"] and row["asked"]["type_k"] == "f16":
        assert model == measured  # 4 × n_ubatch × (n_vocab + 2 n_embd + 1), exact on the CPU


def test_compute_buffer_without_flash_attention_grows_by_the_scores():
    # llama3.1-8b, -fa off, 1 slot: 4096 -> 32768 cells adds 67,584 B per cell = 4 × n_ubatch × (n_head + 1)
    rows = {r["asked"]["n_ctx"]: r["compute_bytes"] for r in CASES
            if r["model"] == "llama3.1-8b" and r["id"].endswith("-np1-faoff")}  # fmt: skip
    assert (rows[32768] - rows[4096]) // (32768 - 4096) == 4 * 512 * (32 + 1)


# Compute buffers llama.cpp printed elsewhere (tests/fixtures/engine_logs): geometry from each model's
# config.json (vocab_size, hidden_size, heads); settings from the log.
def _spec(name, layers, heads, kv_heads, head_dim, hidden, vocab, ctx, window=None, every=None):
    kinds = None if every is None else [("sliding" if i % 2 == 0 else "full") for i in range(layers)]
    data = dict(name=name, source="config.json", num_layers=layers, num_q_heads=heads, num_kv_heads=kv_heads,
                head_dim=head_dim, hidden_size=hidden, vocab_size=vocab, dtype="bf16", max_model_len=ctx)  # fmt: skip
    if kinds:
        data.update(layers=kinds, sliding_window=window)
    return build_spec(data, name)


CORPUS = [
    # Llama-3.2-1B: 16 layers, 32 heads, 8 KV of 64, hidden 2048, vocab 128,256; CPU, n_ctx 1024
    ("llamacpp-file-14033481518", _spec("llama3.2-1b", 16, 32, 8, 64, 2048, 128_256, 131_072), dict(ctx_size=1024)),
    # Qwen3-1.7B: 28 layers, 16 heads, 8 KV of 128, hidden 2048, vocab 151,936; CPU, n_ctx 1024
    ("llamacpp-file-14162148190", _spec("qwen3-1.7b", 28, 16, 8, 128, 2048, 151_936, 40_960), dict(ctx_size=1024)),
    # Phi-3-mini-4k: 32 layers MHA of 96, hidden 3072, vocab 32,064 (llama.cpp runs phi3 without SWA); CUDA,
    # n_ctx 4096, -b 256 -ub 256, flash attention off
    (
        "llamacpp-file-68635202314",
        _spec("phi3-mini", 32, 32, 32, 96, 3072, 32_064, 4096),
        dict(ctx_size=4096, n_batch=256, max_num_batched_tokens=256, flash_attn="off"),
    ),
    # gpt-oss-20b: 24 layers alternating sliding (128) / full, 64 heads, 8 KV of 64, hidden 2880, vocab 201,088
    (
        "llamacpp-file-44321302313",
        _spec("gpt-oss-20b", 24, 64, 8, 64, 2880, 201_088, 131_072, 128, every=2),
        dict(ctx_size=131_072, flash_attn="on"),
    ),  # CANN, first device
    (
        "llamacpp-llama.cpp-16188",
        _spec("gpt-oss-20b", 24, 64, 8, 64, 2880, 201_088, 131_072, 128, every=2),
        dict(ctx_size=4096, flash_attn="off"),
    ),  # Vulkan, 24 of 25 layers
]


@pytest.mark.parametrize("cid, spec, kw", CORPUS, ids=[c[0] for c in CORPUS])
def test_compute_buffer_of_the_engine_logs_lies_in_the_stated_range(cid, spec, kw):
    import yaml

    case = yaml.safe_load((ROOT / "tests" / "fixtures" / "engine_logs" / f"{cid}.yaml").read_text())
    printed = round(case["printed"]["compute_buffer_mib"] * MIB)
    model, (low, high) = _compute(spec, api.fit_options(engine="llamacpp", n_parallel=1, **kw))
    assert low <= printed <= high, (model / MIB, printed / MIB)
    if cid == "llamacpp-file-68635202314":
        assert model == 150 * MIB  # CUDA, 4 × 256 × (33 × 4096 + 6 × 3072): as printed


def test_kv_buffer_of_the_engine_logs():
    # the same logs' KV lines: Llama-3.2-1B 1024 cells = 32 MiB, Phi-3-mini 4096 cells = 1536 MiB,
    # gpt-oss-20b at 131,072 cells: 3072 MiB full + a SWA cache of pad(128 + 512, 256) = 768 cells (18 MiB)
    for cid, spec, kw in CORPUS[:4]:
        case = __import__("yaml").safe_load((ROOT / "tests" / "fixtures" / "engine_logs" / f"{cid}.yaml").read_text())
        r = plan_fit(spec, get_gpu("h100"), api.fit_options(engine="llamacpp", n_parallel=1, kv_cache_memory_bytes=1 << 40,
                                                            **kw))  # fmt: skip
        caches = r.engine_settings["caches"]
        p = case["printed"]
        assert (
            caches[0]["cells"] == p["kv_cells"]
            and caches[0]["k_bytes"] + caches[0]["v_bytes"] == p["kv_size_mib"] * MIB
        )
        if "swa_kv_cells" in p:
            assert caches[1]["cells"] == p["swa_kv_cells"] and caches[1]["k_bytes"] * 2 == p["swa_kv_size_mib"] * MIB


def test_an_unknown_vocabulary_widens_the_range():
    spec = replace(load_bundled("llama3.1-8b"), vocab_size=None)  # a spec without config.json's vocab_size
    model, (low, high) = _compute(spec, api.fit_options(engine="llamacpp", ctx_size=8192))
    assert model == 4 * 512 * (262_144 + 2 * 4096 + 1)  # the upper vocabulary
    assert low == int(4 * 512 * (32_000 + 2 * 4096 + 1) * 0.98)
    known = replace(spec, vocab_size=128_256)
    assert _compute(known, api.fit_options(engine="llamacpp", ctx_size=8192))[0] == 279_447_552  # the fixture's
