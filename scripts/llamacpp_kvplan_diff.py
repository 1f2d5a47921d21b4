"""Where kvplan's llama.cpp rule disagrees with what llama.cpp allocated (tests/fixtures/llamacpp_golden.json).

For every fixture row, kvplan's bytes for one request of n_ctx tokens under ``--engine llamacpp``
(:func:`kvplan.fit.request_bytes` with block 256, ``--max-num-batched-tokens`` = the row's n_ubatch,
``--swa-full`` as asked) are set against the bytes llama.cpp's caches held (K + V of every cache + recurrent
r + s). The GGUFs are rebuilt from the fixture's metadata in a temporary directory and read with kvplan's
GGUF reader. Rows are grouped by why they differ; nothing is written.

    PYTHONPATH=. /work/main/.venv/bin/python scripts/llamacpp_kvplan_diff.py [--rows]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))

from llamacpp_golden import write_gguf  # noqa: E402

from kvplan.dtypes import get_kv_dtype  # noqa: E402
from kvplan.errors import SpecError  # noqa: E402
from kvplan.fit import Engine, request_bytes, stage_cache  # noqa: E402
from kvplan.readers.gguf import load_gguf  # noqa: E402

GGML_TO_KVPLAN = {"f16": "fp16", "f32": "fp32", "bf16": "bf16", "q8_0": "q8_0", "q4_0": "q4_0", "q4_1": "q4_1",
                  "q5_0": "q5_0", "q5_1": "q5_1"}


def llama_bytes(row: dict) -> int:
    rc = row["recurrent"]
    return sum(c["k_bytes"] + c["v_bytes"] for c in row["caches"]) + (rc["r_bytes"] + rc["s_bytes"] if rc else 0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fixture", type=Path, default=REPO / "tests" / "fixtures" / "llamacpp_golden.json")
    ap.add_argument("--rows", action="store_true", help="list every differing row")
    args = ap.parse_args()
    fx = json.loads(args.fixture.read_text())
    groups: dict[str, list] = defaultdict(list)
    with tempfile.TemporaryDirectory() as tmp:
        specs: dict = {}
        for name, m in fx["models"].items():
            arch = m["architecture"]
            path = Path(tmp) / f"{name}.gguf"
            write_gguf(path, arch, {k[len(arch) + 1:]: v for k, v in m["metadata"].items()})
            try:
                specs[name] = load_gguf(path)
            except SpecError as e:
                specs[name] = e
        for r in fx["cases"]:
            spec, a = specs[r["model"]], r["asked"]
            got = llama_bytes(r) if r["ok"] else "refused"
            if isinstance(spec, SpecError):
                groups[f"kvplan refuses the GGUF ({r['model']})"].append((r["id"], None, got))
                continue
            if a["type_k"] != a["type_v"]:
                groups["K type != V type (kvplan has one --kv-dtype)"].append((r["id"], None, got))
                continue
            if a["type_k"] not in GGML_TO_KVPLAN:
                groups[f"cache type kvplan lacks ({a['type_k']})"].append((r["id"], None, got))
                continue
            n_ctx = a["n_ctx"] or spec.max_model_len
            cache = stage_cache(spec, get_kv_dtype(GGML_TO_KVPLAN[a["type_k"]]), 1, range(spec.num_layers))
            kp = request_bytes(cache, n_ctx, Engine.llamacpp, 256, a["n_ubatch"], a["swa_full"])
            if not r["ok"]:
                why = r["error"].split(": ", 1)[-1][:64]
                groups["llama.cpp refuses, kvplan plans: " + why].append((r["id"], kp, got))
                continue
            if kp == got:
                groups["equal"].append((r["id"], kp, got))
                continue
            why = []
            if a["n_seq_max"] > 1:
                why.append("n_seq_max > 1, " + ("unified" if a["kv_unified"] else "one stream per sequence"))
            if r["got"]["n_ubatch"] != a["n_ubatch"]:
                why.append("n_ubatch cut to min(n_ctx, n_batch)")
            if r["recurrent"]:
                why.append("recurrent states")
            if any(c["name"] == "swa" for c in r["caches"]):
                why.append("SWA")
            groups["differs: " + "; ".join(why)].append((r["id"], kp, got))
    for key, rows in sorted(groups.items()):
        ratios = [g / k for _, k, g in rows if isinstance(k, int) and isinstance(g, int) and k]
        span = f"  llama.cpp / kvplan {min(ratios):.3f} .. {max(ratios):.3f}" if ratios and key != "equal" else ""
        print(f"{len(rows):5d}  {key}{span}")
        if args.rows and key != "equal":
            for rid, k, g in rows:
                print(f"         {rid}: kvplan {k}, llama.cpp {g}")


if __name__ == "__main__":
    main()
