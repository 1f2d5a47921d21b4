"""Golden fixture: the exact bytes of the caches llama.cpp itself allocates, on CPU.

What it does (nothing of llama.cpp lands in the repository; everything is built under --work):

1. ``pip download --no-deps --no-binary :all: llama-cpp-python==VERSION`` (the sdist vendors a pinned
   llama.cpp in ``vendor/llama.cpp``; the commit is read from that tree's git metadata, else from the
   sdist's CHANGELOG), unpacked under --work.
2. cmake + ninja: the ``llama`` library only (static, CPU, no tests/examples; ``--server`` adds the
   ``llama-server`` target).
3. ``scripts/llamacpp_harness.cpp`` (kvplan's own harness) compiled against that library.
4. Tiny GGUFs, metadata only, written with the ``gguf`` package (:data:`MODELS`): llama.cpp makes the
   tensors itself from its architecture code (``llama_model_init_from_user``, zero weights), so the
   files are a few hundred bytes; the KV layout comes from llama.cpp's own ``load_hparams``.
5. The harness creates a context for every case of :func:`cases` (n_ctx, parallel sequences, K/V
   types, flash attention, n_batch/n_ubatch, kv_unified, swa_full) and prints the bytes of every cache
   buffer (K and V per cache, recurrent r/s), cells, streams, per-layer row widths, the compute and
   output buffers, or the refusal (``llama_init_from_model`` returning NULL with its log line, or a
   GGML_ASSERT abort with its message).
6. ``--server``: the Gemma 3 GGUF saved with tensors (``llama_model_save_to_file``) and ``llama-server``
   started on 127.0.0.1 with a few command lines; the KV lines it prints are recorded, then it is stopped.
   Not yet run: the llama-server target is 134 compile steps (common, mtmd, server), over an hour on two
   shared cores; the committed fixture has no "server" section. Its server-* rows are llama-server's
   settings given to llama_init_from_model directly (tools/server/server.cpp: no -np = 4 slots, unified).

Writes tests/fixtures/llamacpp_golden.json (``--out``). Run with the project's Python (it needs only
``gguf`` and numpy, as kvplan's GGUF reader does)::

    /work/main/.venv/bin/python scripts/llamacpp_golden.py --work /tmp/kvplan-llamacpp [--server] [-j 2]

Needs cmake, ninja (or make), a C++17 compiler, pip and network access to PyPI for the sdist.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import time
from pathlib import Path

# the sdist vendors llama.cpp 0c1e57098 (its CHANGELOG: "update llama.cpp to ggml-org/llama.cpp@0c1e57098")
LLAMA_CPP_PYTHON = "0.3.36"
REPO = Path(__file__).resolve().parent.parent
HARNESS_SRC = REPO / "scripts" / "llamacpp_harness.cpp"
DEFAULT_OUT = REPO / "tests" / "fixtures" / "llamacpp_golden.json"

U32, F32, STR, BOOL = "u32", "f32", "str", "bool"


def _common(arch: str, n_layer: int, n_embd: int, n_head, n_head_kv, n_ff, ctx: int = 32768, **kw) -> dict:
    """Metadata shared by every tiny model: {key without the arch prefix: value}."""
    m = {
        "context_length": ctx,
        "embedding_length": n_embd,
        "block_count": n_layer,
        "feed_forward_length": n_ff,
        "attention.head_count": n_head,
        "attention.head_count_kv": n_head_kv,
        "attention.layer_norm_rms_epsilon": 1e-6,
        "attention.layer_norm_epsilon": 1e-5,
        "vocab_size": 32,
    }
    m.update(kw)
    return {"arch": arch, "kv": m}


# name -> (architecture, metadata). Geometries are small but keep the features that size the caches.
MODELS: dict[str, dict] = {
    # plain GQA: 4 layers, 2 KV heads of 64
    "llama": _common("llama", 4, 256, 4, 2, 64, **{"rope.dimension_count": 64}),
    "qwen2": _common("qwen2", 3, 128, 2, 1, 64),
    # Qwen3: head_dim (128) set apart from n_embd / n_head (16)
    "qwen3": _common("qwen3", 3, 64, 4, 1, 64, **{"attention.key_length": 128, "attention.value_length": 128}),
    # Gemma 2: every other layer slides (period 2), window 128
    "gemma2": _common(
        "gemma2", 4, 64, 2, 1, 64,
        **{"attention.key_length": 64, "attention.value_length": 64, "attention.sliding_window": 128},
    ),
    # Gemma 2 without sliding_window in the file: llama.cpp's default window 4096
    "gemma2_nowindow": _common(
        "gemma2", 4, 64, 2, 1, 64, **{"attention.key_length": 64, "attention.value_length": 64}
    ),
    # Gemma 3 of the geometry issue 16 implies: 7 layers (period 6: 0-4 and 6 slide, 5 full), 1 KV head of 64,
    # window 1024 (f16 K+V = 256 B per token per layer)
    "gemma3": _common(
        "gemma3", 7, 64, 2, 1, 64,
        **{"attention.key_length": 64, "attention.value_length": 64, "attention.sliding_window": 1024},
    ),
    # Gemma 3 with 12 layers (2 full), 2 KV heads of 32, window 512
    "gemma3_12l": _common(
        "gemma3", 12, 64, 2, 2, 64,
        **{"attention.key_length": 32, "attention.value_length": 32, "attention.sliding_window": 512},
    ),
    # Gemma 3 with sliding_window = 0: llama.cpp runs every layer as full attention
    "gemma3_swa0": _common(
        "gemma3", 7, 64, 2, 1, 64,
        **{"attention.key_length": 64, "attention.value_length": 64, "attention.sliding_window": 0},
    ),
    # Gemma 3n: KV only in the first 20 layers (n_layer_kv_from_start is hard-coded 20); period 5, window 128
    "gemma3n": _common(
        "gemma3n", 22, 64, 1, 1, 64,
        **{"attention.key_length": 64, "attention.value_length": 64, "attention.sliding_window": 128},
    ),
    # Gemma 4: per-layer SWA pattern (layer 5 full) and narrower SWA heads (32) than full ones (64): with flash
    # attention off every V row is padded to the widest layer's
    "gemma4": _common(
        "gemma4", 7, 64, 2, 1, 64,
        **{
            "attention.key_length": 64,
            "attention.value_length": 64,
            "attention.key_length_swa": 32,
            "attention.value_length_swa": 32,
            "attention.sliding_window": 1024,
            "attention.sliding_window_pattern": [True, True, True, True, True, False, True],
            "embedding_length_per_layer_input": 16,
            "attention.shared_kv_layers": 0,
        },
    ),
    # Phi-2: head_dim 80 (not a multiple of 32); 2 KV heads, so a K row is 160 elements
    "phi2": _common("phi2", 2, 160, 2, 2, 64, **{"rope.dimension_count": 32}),
    # Phi-2 geometry with 1 KV head: a K row of 80 elements
    "phi2_kv1": _common("phi2", 2, 160, 2, 1, 64, **{"rope.dimension_count": 32}),
    # DeepSeek-V2 converted for the MLA cache: one latent of kv_lora_rank + rope = 64 + 32 per token, no V
    "deepseek2_mla": _common(
        "deepseek2", 2, 64, 2, 1, 64,
        **{
            "attention.key_length": 96,
            "attention.value_length": 64,
            "attention.key_length_mla": 64,
            "attention.value_length_mla": 32,
            "rope.dimension_count": 32,
            "attention.q_lora_rank": 32,
            "attention.kv_lora_rank": 64,
            "leading_dense_block_count": 2,
            "expert_feed_forward_length": 32,
            "expert_shared_count": 0,
        },
    ),
    # DeepSeek-V2 without key_length_mla (older conversions): per-head K (nope + rope = 64) and V (32)
    "deepseek2_nomla": _common(
        "deepseek2", 2, 64, 2, 2, 64,
        **{
            "attention.key_length": 64,
            "attention.value_length": 32,
            "rope.dimension_count": 32,
            "attention.q_lora_rank": 32,
            "attention.kv_lora_rank": 64,
            "leading_dense_block_count": 2,
            "expert_feed_forward_length": 32,
            "expert_shared_count": 0,
        },
    ),
    # pure Mamba: d_inner 128, d_state 16, d_conv 4
    "mamba": _common(
        "mamba", 2, 64, 0, 0, 0,
        **{"ssm.conv_kernel": 4, "ssm.inner_size": 128, "ssm.state_size": 16, "ssm.time_step_rank": 4},
    ),
    # pure Mamba-2: 4 heads of 32, 1 group, d_state 16
    "mamba2": _common(
        "mamba2", 2, 64, 0, 0, 0,
        **{
            "ssm.conv_kernel": 4,
            "ssm.inner_size": 128,
            "ssm.state_size": 16,
            "ssm.time_step_rank": 4,
            "ssm.group_count": 1,
        },
    ),
    # Jamba: layer 2 attention (2 KV heads of 32), the others Mamba
    "jamba": _common(
        "jamba", 4, 64, [2, 2, 2, 2], [0, 0, 2, 0], 64,
        **{"ssm.conv_kernel": 4, "ssm.inner_size": 128, "ssm.state_size": 16, "ssm.time_step_rank": 4},
    ),
    # Granite-4.0-H: layer 3 attention, the others Mamba-2
    "granitehybrid": _common(
        "granitehybrid", 4, 64, [2, 2, 2, 2], [0, 0, 0, 2], 64,
        **{
            "ssm.conv_kernel": 4,
            "ssm.inner_size": 128,
            "ssm.state_size": 16,
            "ssm.time_step_rank": 4,
            "ssm.group_count": 1,
        },
    ),
    # Nemotron-H: Mamba-2 (0, 3), attention (1), MLP-only (2)
    "nemotron_h": _common(
        "nemotron_h", 4, 64, [2, 2, 2, 2], [0, 2, 0, 0], [0, 0, 64, 0],
        **{
            "ssm.conv_kernel": 4,
            "ssm.inner_size": 128,
            "ssm.state_size": 16,
            "ssm.time_step_rank": 4,
            "ssm.group_count": 1,
        },
    ),
    # Qwen3-Next: Gated DeltaNet in 3 of 4 layers (full_attention_interval 4), attention in layer 3
    "qwen3next": _common(
        "qwen3next", 4, 64, 2, 1, 64,
        **{
            "attention.key_length": 64,
            "attention.value_length": 64,
            "ssm.conv_kernel": 4,
            "ssm.inner_size": 128,
            "ssm.state_size": 32,
            "ssm.time_step_rank": 4,
            "ssm.group_count": 2,
            "expert_count": 2,
            "expert_used_count": 1,
            "expert_feed_forward_length": 32,
            "expert_shared_feed_forward_length": 32,
        },
    ),
    # LFM2: short convolutions (L_cache 3) with attention in layer 2
    "lfm2": _common("lfm2", 4, 64, [2, 2, 2, 2], [0, 0, 2, 0], 64, **{"shortconv.l_cache": 3}),
    # OpenELM: per-layer heads (KV heads 1, 2, 3 of 32): K and V widths differ by layer
    "openelm": _common(
        "openelm", 3, 64, [2, 4, 6], [1, 2, 3], [64, 96, 128],
        **{"attention.key_length": 32, "attention.value_length": 32},
    ),
}

# Real geometries (values from the models' config.json in ../shared/hf_configs), sized by llama.cpp's dry run
# (llama_model_params.no_alloc: nothing allocated, every buffer sized): the compute buffer of a real model.
REAL_MODELS: dict[str, dict] = {
    "llama3.1-8b": _common("llama", 32, 4096, 32, 8, 14336, ctx=131072,
                           **{"vocab_size": 128256, "rope.dimension_count": 128}),
    "qwen2.5-7b": _common("qwen2", 28, 3584, 28, 4, 18944, ctx=131072, **{"vocab_size": 152064}),
    "gemma2-9b": _common("gemma2", 42, 3584, 16, 8, 14336, ctx=8192,
                         **{"vocab_size": 256000, "attention.key_length": 256, "attention.value_length": 256,
                            "attention.sliding_window": 4096}),
}

SWA_MODELS = {"gemma2", "gemma2_nowindow", "gemma3", "gemma3_12l", "gemma3n", "gemma4"}
RECURRENT_ONLY = {"mamba", "mamba2"}

TYPE_PAIRS = [
    ("f32", "f32"),
    ("bf16", "bf16"),
    ("q8_0", "q8_0"),
    ("q4_0", "q4_0"),
    ("q4_1", "q4_1"),
    ("q5_0", "q5_0"),
    ("q5_1", "q5_1"),
    ("iq4_nl", "iq4_nl"),
    ("q8_0", "f16"),
    ("f16", "q8_0"),
    ("q4_0", "f16"),
    ("f16", "q4_0"),
    ("q8_0", "q4_0"),
]


def cases(model: str) -> list[tuple]:
    """(id, n_ctx, n_seq_max, type_k, type_v, fa, n_batch, n_ubatch, kv_unified, swa_full) for one model."""
    out: list[tuple] = []

    def add(tag, n_ctx, n_seq, tk="f16", tv="f16", fa="on", nb=2048, nub=512, kvu=0, swaf=0):
        out.append((f"{model}/{tag}", n_ctx, n_seq, tk, tv, fa, nb, nub, kvu, swaf))

    # A: context x parallel sequences x unified x flash attention (f16, llama-server's batch sizes)
    for n_ctx in (256, 1000, 4096, 8192):
        for n_seq in (1, 2, 4):
            for kvu in (0, 1):
                for fa in ("on", "off"):
                    add(f"ctx{n_ctx}-np{n_seq}-kvu{kvu}-fa{fa}", n_ctx, n_seq, fa=fa, kvu=kvu)
    # B: cache types x flash attention
    if model not in RECURRENT_ONLY:
        for tk, tv in TYPE_PAIRS:
            for fa in ("on", "off", "auto"):
                add(f"ctx4096-np1-{tk}-{tv}-fa{fa}", 4096, 1, tk, tv, fa)
        add("ctx4096-np4-kvu1-q8_0-q8_0-faauto", 4096, 4, "q8_0", "q8_0", "auto", kvu=1)
    # C: micro-batch x sequences x unified (x swa_full for SWA models)
    for n_ctx in (1000, 8192):
        for nub in (512, 128, 1):
            for n_seq in (1, 4):
                for kvu in (0, 1):
                    for swaf in (0, 1) if model in SWA_MODELS else (0,):
                        add(f"ctx{n_ctx}-np{n_seq}-kvu{kvu}-ub{nub}-swafull{swaf}", n_ctx, n_seq, nub=nub, kvu=kvu,
                            swaf=swaf)
    add("ctx8192-np1-nb128-ub512", 8192, 1, nb=128, nub=512)
    # D: llama-server's settings (tools/server/server.cpp: no -np = 4 slots, kv_unified; fa auto)
    add("server-c8192", 8192, 4, fa="auto", kvu=1)
    add("server-c8192-np1", 8192, 1, fa="auto")
    add("server-c8192-np2", 8192, 2, fa="auto")
    add("server-c8192-np4-kvu0", 8192, 4, fa="auto")
    add("server-c8192-faoff", 8192, 4, fa="off", kvu=1)
    add("server-c0", 0, 4, fa="auto", kvu=1)  # -c 0 / no -c: n_ctx_train
    add("server-c8192-swafull", 8192, 4, fa="auto", kvu=1, swaf=1)
    add("cli-c4096", 4096, 1, fa="auto")  # llama-cli: n_parallel 1, kv_unified false
    add("ctx8192-np3-kvu0", 8192, 3)  # n_ctx not divisible by n_seq
    add("ctx1000-np3-kvu0", 1000, 3)
    return out


def cases_real(model: str) -> list[tuple]:
    """The real-geometry cases: context x flash attention x (1 slot, llama-server's 4 unified), micro-batches."""
    out: list[tuple] = []
    for n_ctx in (4096, 8192, 32768):
        for fa in ("on", "off"):
            out.append((f"{model}/ctx{n_ctx}-np1-fa{fa}", n_ctx, 1, "f16", "f16", fa, 2048, 512, 0, 0))
            out.append((f"{model}/ctx{n_ctx}-np4-kvu1-fa{fa}", n_ctx, 4, "f16", "f16", fa, 2048, 512, 1, 0))
    for nub in (128, 1024, 2048):
        out.append((f"{model}/ctx8192-np1-faon-ub{nub}", 8192, 1, "f16", "f16", "on", 2048, nub, 0, 0))
    out.append((f"{model}/ctx8192-np1-q8_0-faon", 8192, 1, "q8_0", "q8_0", "on", 2048, 512, 0, 0))
    return out


def sh(cmd: list[str], cwd: Path | None = None, log: Path | None = None) -> None:
    print("+", " ".join(str(c) for c in cmd), flush=True)
    if log is None:
        subprocess.run(cmd, cwd=cwd, check=True)
    else:
        with log.open("w") as f:
            r = subprocess.run(cmd, cwd=cwd, stdout=f, stderr=subprocess.STDOUT)
        if r.returncode:
            sys.exit(f"failed ({r.returncode}): {' '.join(map(str, cmd))}; see {log}")


def fetch_sdist(work: Path, version: str) -> Path:
    """The unpacked sdist's vendor/llama.cpp."""
    src = work / f"llama_cpp_python-{version}"
    if not (src / "vendor" / "llama.cpp" / "CMakeLists.txt").exists():
        dl = work / "dl"
        dl.mkdir(parents=True, exist_ok=True)
        tgz = dl / f"llama_cpp_python-{version}.tar.gz"
        if not tgz.exists():
            sh([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                f"llama-cpp-python=={version}", "-d", str(dl)])
        with tarfile.open(tgz) as t:
            t.extractall(work, filter="tar") if sys.version_info >= (3, 12) else t.extractall(work)
    return src / "vendor" / "llama.cpp"


def llama_cpp_revision(vendor: Path) -> dict:
    """The vendored llama.cpp's commit and date (its git metadata ships in the sdist), else CHANGELOG's."""
    info: dict = {"commit": None, "commit_date": None, "subject": None}
    try:
        out = subprocess.run(["git", "-C", str(vendor), "log", "-1", "--format=%H%n%cI%n%s"], capture_output=True,
                             text=True, check=True).stdout.splitlines()
        info.update(commit=out[0], commit_date=out[1], subject=out[2])
    except (subprocess.CalledProcessError, FileNotFoundError, IndexError):
        log = (vendor.parent.parent / "CHANGELOG.md").read_text()
        m = re.search(r"update llama\.cpp to ggml-org/llama\.cpp@([0-9a-f]+)", log)
        info["commit"] = m.group(1) if m else None
    text = (vendor / "ggml" / "CMakeLists.txt").read_text()
    ver = [re.search(rf"set\(GGML_VERSION_{p}\s+(\d+)\)", text) for p in ("MAJOR", "MINOR", "PATCH")]
    info["ggml_version"] = ".".join(v.group(1) for v in ver) if all(ver) else None
    return info


def build(vendor: Path, work: Path, jobs: int, server: bool) -> Path:
    bdir = work / "build"
    gen = ["-G", "Ninja"] if shutil.which("ninja") else []
    if not (bdir / "CMakeCache.txt").exists():
        sh(["cmake", "-S", str(vendor), "-B", str(bdir), *gen, "-DCMAKE_BUILD_TYPE=Release", "-DBUILD_SHARED_LIBS=OFF",
            "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_TOOLS=ON",
            "-DLLAMA_BUILD_SERVER=ON",
            "-DLLAMA_BUILD_APP=OFF", "-DLLAMA_OPENSSL=OFF", "-DGGML_NATIVE=OFF", "-DGGML_OPENMP=OFF",
            "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF"], log=work / "cmake.log")
    targets = ["llama"] + (["llama-server"] if server else [])
    sh(["cmake", "--build", str(bdir), "-j", str(jobs), "--target", *targets], log=work / "build.log")
    return bdir


def compile_harness(vendor: Path, bdir: Path, work: Path) -> Path:
    exe = work / "llamacpp_harness"
    libs = [bdir / "src" / "libllama.a", bdir / "ggml" / "src" / "libggml.a", bdir / "ggml" / "src" / "libggml-cpu.a",
            bdir / "ggml" / "src" / "libggml-base.a"]
    for lib in libs:
        if not lib.exists():
            sys.exit(f"missing {lib}")
    if exe.exists() and exe.stat().st_mtime > max(p.stat().st_mtime for p in [HARNESS_SRC, *libs]):
        return exe
    sh(["c++", "-std=c++17", "-O1", "-o", str(exe), str(HARNESS_SRC), f"-I{vendor / 'include'}", f"-I{vendor / 'src'}",
        f"-I{vendor / 'ggml' / 'include'}", *map(str, libs), "-lpthread", "-ldl", "-lm"],
       log=work / "harness-build.log")
    return exe


def write_gguf(path: Path, arch: str, kv: dict) -> None:
    """A metadata-only GGUF: general.architecture, the {arch}.* keys, a "none" tokenizer of vocab_size ids."""
    import gguf

    w = gguf.GGUFWriter(str(path), arch)
    T = gguf.GGUFValueType
    for key, val in kv.items():
        full = f"{arch}.{key}"
        if isinstance(val, bool):
            w.add_key_value(full, val, T.BOOL)
        elif isinstance(val, int):
            w.add_key_value(full, val, T.UINT32)
        elif isinstance(val, float):
            w.add_key_value(full, val, T.FLOAT32)
        elif isinstance(val, list):
            w.add_key_value(full, val, T.ARRAY, sub_type=T.BOOL if all(isinstance(v, bool) for v in val) else T.UINT32)
        else:
            raise TypeError(f"{key}: {val!r}")
    w.add_key_value("tokenizer.ggml.model", "none", T.STRING)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    w.close()


def run_harness(exe: Path, gguf_path: Path, model_cases: list[tuple], work: Path, dry_run: bool = False) -> list[dict]:
    """Run the cases; one that aborts the process is recorded with its message and the rest go on.

    dry_run: llama.cpp sizes everything without allocating (KVPLAN_NO_ALLOC, llama_model_params.no_alloc).
    """
    env = dict(os.environ)
    env.pop("KVPLAN_NO_ALLOC", None)
    if dry_run:
        env["KVPLAN_NO_ALLOC"] = "1"
    results: list[dict] = []
    todo = list(model_cases)
    while todo:
        tsv = work / "cases.tsv"
        tsv.write_text("".join("\t".join(map(str, c)) + "\n" for c in todo))
        p = subprocess.run([str(exe), "run", str(gguf_path), str(tsv)], capture_output=True, text=True, env=env)
        begun = None
        done = set()
        for line in p.stdout.splitlines():
            if line.startswith("BEGIN "):
                begun = line[6:]
            elif line.startswith("RESULT "):
                r = json.loads(line[7:])
                results.append(r)
                done.add(r["id"])
            elif line.startswith("LOADFAIL"):
                sys.exit(f"{gguf_path.name}: llama.cpp did not load it: {line}\n{p.stderr[-3000:]}")
        if p.returncode == 0:
            break
        if begun is None or begun in done:
            sys.exit(f"harness failed ({p.returncode}) outside a case:\n{p.stderr[-3000:]}")
        msg = [ln for ln in p.stderr.splitlines() if "GGML_ASSERT" in ln or "error" in ln.lower()]
        results.append({"id": begun, "ok": False, "aborted": True, "returncode": p.returncode,
                        "log": "\n".join(msg[-3:]) or p.stderr[-500:]})
        idx = next(i for i, c in enumerate(todo) if c[0] == begun)
        todo = todo[idx + 1:]
    return results


KEEP_LOG = re.compile(r"padding V cache|n_ctx is not divisible|does not divide|requires|not supported|"
                      r"failed|refus|error|overridden|disabled", re.IGNORECASE)


def tidy(case: tuple, r: dict) -> dict:
    """One fixture row: the case's settings, then what llama.cpp did."""
    keys = ("id", "n_ctx", "n_seq_max", "type_k", "type_v", "flash_attn", "n_batch", "n_ubatch", "kv_unified",
            "swa_full")
    asked = dict(zip(keys, case, strict=False))
    asked["kv_unified"] = bool(asked["kv_unified"])
    asked["swa_full"] = bool(asked["swa_full"])
    row: dict = {"id": asked.pop("id"), "model": case[0].split("/")[0], "asked": asked}
    row["ok"] = r.get("ok", False)
    log_lines = [ln.strip() for ln in r.get("log", "").splitlines() if ln.strip()]
    if not row["ok"]:
        row["aborted"] = bool(r.get("aborted"))
        row["error"] = "\n".join(log_lines[-3:])
        return row
    kept = sorted({ln for ln in log_lines if KEEP_LOG.search(ln)})
    row["got"] = {k: r[k] for k in ("n_ctx", "n_ctx_seq", "n_batch", "n_ubatch", "n_rs_seq", "flash_attn")}
    row["memory"] = r["memory"]
    caches = []
    for c in r["caches"]:
        layers = c["layers"]
        ks = [x[1] for x in layers]
        vs = [x[2] for x in layers]
        # every cache buffer held exactly its tensors (buffer_bytes == k_bytes + v_bytes in all rows)
        assert c["buffer_bytes"] == c["k_bytes"] + c["v_bytes"], c
        caches.append({
            "name": c["name"],
            "cells": c["cells"],
            "n_stream": c["n_stream"],
            "v_trans": c["v_trans"],
            "type_k": c["type_k"],
            "type_v": c["type_v"] or None,
            "k_row": ks[0] if len(set(ks)) == 1 else ks,
            "v_row": None if vs and vs[0] < 0 else (vs[0] if len(set(vs)) == 1 else vs),
            "k_bytes": c["k_bytes"],
            "v_bytes": c["v_bytes"],
            "layer_ids": [x[0] for x in layers],
            "n_swa": c["n_swa"],
        })
    row["caches"] = caches
    rc = r["recurrent"]
    if rc is not None:
        assert rc["buffer_bytes"] == rc["r_bytes"] + rc["s_bytes"] + rc["p_bytes"], rc
        rc = {k: rc[k] for k in ("cells", "n_rs_seq", "n_layers", "type_r", "type_s", "r_row", "s_row", "r_bytes",
                                 "s_bytes", "p_bytes")}
    row["recurrent"] = rc
    row["memory_bytes"] = r["memory_bytes"]
    row["compute_bytes"] = r["compute_bytes"]
    row["output_bytes"] = r["output_bytes"]
    if kept:
        row["log"] = kept
    return row


HOIST_CACHE = ("layer_ids", "n_swa")
HOIST_RECURRENT = ("n_layers", "type_r", "type_s", "r_row", "s_row", "n_rs_seq")


def hoist(rows: list[dict]) -> dict:
    """Move what is the same in every row of one model (cache layer ids and window, recurrent row widths) to
    the model's entry; rows keep what varies."""
    layout: dict = {"caches": {}, "recurrent": None}
    for r in rows:
        if not r["ok"]:
            continue
        for c in r["caches"]:
            seen = layout["caches"].setdefault(c["name"], {k: c[k] for k in HOIST_CACHE})
            if any(seen[k] != c[k] for k in HOIST_CACHE):
                raise SystemExit(f"{r['id']}: cache {c['name']} layout differs between cases")
        if r["recurrent"]:
            rc = {k: r["recurrent"][k] for k in HOIST_RECURRENT}
            if layout["recurrent"] is None:
                layout["recurrent"] = rc
            elif layout["recurrent"] != rc:
                raise SystemExit(f"{r['id']}: recurrent layout differs between cases")
    for r in rows:
        if not r["ok"]:
            continue
        for c in r["caches"]:
            for k in HOIST_CACHE:
                del c[k]
        if r["recurrent"]:
            for k in HOIST_RECURRENT:
                del r["recurrent"][k]
            if not r["recurrent"]["p_bytes"]:
                del r["recurrent"]["p_bytes"]
    return layout


# ---------------------------------------------------------------- llama-server

SERVER_RUNS = [
    ["-c", "8192"],
    ["-c", "8192", "-np", "1"],
    ["-c", "8192", "-np", "2"],
    ["-c", "8192", "-fa", "off"],
    ["-c", "8192", "-ub", "128"],
    ["-c", "8192", "--swa-full"],
    ["-c", "8192", "-ctk", "q8_0", "-ctv", "q8_0"],
    [],
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_server(server: Path, gguf_path: Path, args: list[str], work: Path, timeout: float = 120.0) -> dict:
    """Start llama-server on 127.0.0.1, wait for it to listen, stop it; the KV lines it printed."""
    port = free_port()
    logf = work / "server.log"
    cmd = [str(server), "-m", str(gguf_path), "--host", "127.0.0.1", "--port", str(port), "-t", "1", "--no-warmup",
           *args]
    with logf.open("w") as f:
        p = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
        t0 = time.time()
        ready = False
        while time.time() - t0 < timeout and p.poll() is None:
            time.sleep(0.5)
            text = logf.read_text(errors="replace")
            if "server is listening" in text or "all slots are idle" in text:
                ready = True
                break
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    text = logf.read_text(errors="replace")
    want = re.compile(r"n_seq_max|n_ctx|n_ubatch|n_batch|flash_attn|kv_unified|KV buffer|KV cache|llama_kv_cache|"
                      r"compute buffer|n_slots|n_ctx_slot|swa|output buffer|RS buffer|memory_recurrent")
    lines = [ln.strip() for ln in text.splitlines() if want.search(ln)]
    return {"args": args, "ready": ready, "lines": lines}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, default=Path("/tmp/kvplan-llamacpp"),
                    help="build directory (outside the repo)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--version", default=LLAMA_CPP_PYTHON, help="llama-cpp-python sdist to take llama.cpp from")
    ap.add_argument("-j", "--jobs", type=int, default=2)
    ap.add_argument("--server", action="store_true", help="also build llama-server and record its KV lines")
    ap.add_argument("--skip-build", action="store_true",
                    help="use the libraries already built under --work as they are")
    ap.add_argument("--models", default="", help="comma-separated subset of the models (default: all)")
    args = ap.parse_args()
    work = args.work.resolve()
    if REPO in work.parents or work == REPO:
        sys.exit("--work must be outside the repository")
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.time()

    vendor = fetch_sdist(work, args.version)
    rev = llama_cpp_revision(vendor)
    bdir = work / "build" if args.skip_build else build(vendor, work, args.jobs, args.server)
    exe = compile_harness(vendor, bdir, work)
    t_build = time.time() - t0

    import gguf

    gdir = work / "gguf"
    gdir.mkdir(exist_ok=True)
    names = [m for m in args.models.split(",") if m] or [*MODELS, *REAL_MODELS]
    rows: list[dict] = []
    models_out: dict = {}
    for name in names:
        real = name in REAL_MODELS
        spec = REAL_MODELS[name] if real else MODELS[name]
        path = gdir / f"{name}.gguf"
        write_gguf(path, spec["arch"], spec["kv"])
        model_cases = cases_real(name) if real else cases(name)
        t1 = time.time()
        res = {r["id"]: r for r in run_harness(exe, path, model_cases, work, dry_run=real)}
        model_rows = [tidy(c, res.get(c[0], {"ok": False, "log": "no result"})) for c in model_cases]
        for row in model_rows:
            if real:
                row["dry_run"] = True
        layout = hoist(model_rows)
        rows.extend(model_rows)
        models_out[name] = {"architecture": spec["arch"], "gguf_bytes": path.stat().st_size, "dry_run": real,
                            "metadata": {f"{spec['arch']}.{k}": v for k, v in spec["kv"].items()}, **layout}
        print(f"{name}: {len(model_cases)} cases in {time.time() - t1:.1f} s", flush=True)

    server_out = None
    if args.server:
        full = work / "gemma3-full.gguf"
        sh([str(exe), "save", str(gdir / "gemma3.gguf"), str(full)])
        server = bdir / "bin" / "llama-server"
        server_out = {"model": "gemma3", "runs": [run_server(server, full, a, work) for a in SERVER_RUNS]}

    fixture = {
        "source": "scripts/llamacpp_golden.py: llama.cpp built on CPU from the llama-cpp-python sdist, caches read "
                  "from the objects llama_init_from_model creates (exact bytes)",
        "llama_cpp_python": args.version,
        "llama_cpp": rev,
        "gguf_python": gguf.__version__ if hasattr(gguf, "__version__") else _pkg_version("gguf"),
        "date": _dt.date.today().isoformat(),
        "run_seconds": round(time.time() - t0, 1),
        "build_seconds": round(t_build, 1),
        "fields": {
            "asked": "llama_context_params given (n_ctx 0 = the model's context_length; flash_attn on/off/auto)",
            "got": "llama_cparams after llama_init_from_model (n_ctx padded, n_ctx_seq, n_ubatch = min(n_batch, "
                   "n_ubatch), flash_attn resolved)",
            "caches": "each llama_kv_cache: cells (per stream), n_stream, v_trans, types, k_row / v_row (elements "
                      "per cell row, per layer when they differ; v_row null for an MLA cache), k_bytes / v_bytes "
                      "(sum of ggml_nbytes over its layers; its backend buffers held exactly these bytes in every "
                      "row); the cache's layer_ids and n_swa are under models.<name>.caches",
            "recurrent": "llama_memory_recurrent: cells, r_bytes, s_bytes (p_bytes when nonzero); its layers, types "
                         "and per-cell row widths (r_row, s_row elements) under models.<name>.recurrent",
            "memory_bytes": "all cache buffers of the context (K, V, r, s)",
            "compute_bytes": "the scheduler's compute buffers (llama_get_memory_breakdown .compute, all devices)",
            "output_bytes": "the logits/embeddings output buffer",
            "dry_run": "sized by llama.cpp without allocating (llama_model_params.no_alloc; real-size geometries); "
                       "compute_bytes is then the size the scheduler reserves",
            "error": "refusal: the log lines of a NULL context, or the GGML_ASSERT of an aborted process",
        },
        "models": models_out,
        "cases": rows,
    }
    if server_out:
        fixture["server"] = server_out
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w") as f:
        f.write("{\n")
        items = list(fixture.items())
        for i, (k, v) in enumerate(items):
            f.write(f"  {json.dumps(k)}: ")
            if k == "cases":
                f.write("[\n" + ",\n".join("    " + json.dumps(r, separators=(",", ":")) for r in v) + "\n  ]")
            else:
                f.write(json.dumps(v, indent=2).replace("\n", "\n  "))
            f.write(",\n" if i < len(items) - 1 else "\n")
        f.write("}\n")
    print(f"wrote {args.out} ({len(rows)} cases, {time.time() - t0:.0f} s)")


def _pkg_version(name: str) -> str:
    from importlib.metadata import version

    return version(name)


if __name__ == "__main__":
    main()
