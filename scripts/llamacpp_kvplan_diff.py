"""Where kvplan's llama.cpp engine disagrees with what llama.cpp allocated (tests/fixtures/llamacpp_golden.json).

For every fixture row, the row's settings are given to kvplan as llama.cpp's flags (``-c``, ``-np``,
``-kvu``, ``-ctk``, ``-ctv``, ``-fa``, ``-b``, ``-ub``, ``--swa-full``; :func:`kvplan.api.fit_options` with
``--engine llamacpp``) and kvplan's plan (``FitResult.engine_settings``: n_ctx, n_ctx_seq, n_ubatch, flash
attention, each cache's cells, streams, K and V bytes, the recurrent states) is set against what
llama.cpp resolved and allocated, or its refusal against llama.cpp's. The GGUFs are rebuilt from the
fixture's metadata in a temporary directory and read with kvplan's GGUF reader. The compute buffer
(modelled) is compared too, as measured / model − 1 per group. Rows are grouped; nothing is written.

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

from kvplan import api  # noqa: E402
from kvplan.errors import SpecError, UsageError  # noqa: E402
from kvplan.fit import plan_fit  # noqa: E402
from kvplan.gpus import get_gpu  # noqa: E402
from kvplan.readers.gguf import load_gguf  # noqa: E402


def options(a: dict):
    """A fixture row's settings as llama.cpp's flags, with a KV budget that holds any row."""
    return api.fit_options(
        engine="llamacpp", ctx_size=a["n_ctx"], n_parallel=a["n_seq_max"], kv_unified=a["kv_unified"],
        cache_type_k=a["type_k"], cache_type_v=a["type_v"], flash_attn=a["flash_attn"], n_batch=a["n_batch"],
        max_num_batched_tokens=a["n_ubatch"], swa_full=a["swa_full"], kv_cache_memory_bytes=1 << 40,
    )  # fmt: skip


def ours(r) -> tuple:
    s = r.engine_settings
    rc = s["recurrent"]
    return (
        (s["n_ctx"], s["n_ctx_seq"], s["n_ubatch"], s["flash_attn_on"]),
        tuple((c["name"], c["cells"], c["n_stream"], c["k_bytes"], c["v_bytes"]) for c in s["caches"]),
        None if rc is None else (rc["cells"], rc["r_bytes"], rc["s_bytes"]),
    )


def theirs(row: dict) -> tuple:
    g, rc = row["got"], row["recurrent"]
    return (
        (g["n_ctx"], g["n_ctx_seq"], g["n_ubatch"], g["flash_attn"]),
        tuple((c["name"], c["cells"], c["n_stream"], c["k_bytes"], c["v_bytes"]) for c in row["caches"]),
        None if rc is None else (rc["cells"], rc["r_bytes"], rc["s_bytes"]),
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fixture", type=Path, default=REPO / "tests" / "fixtures" / "llamacpp_golden.json")
    ap.add_argument("--rows", action="store_true", help="list every differing row")
    args = ap.parse_args()
    fx = json.loads(args.fixture.read_text())
    groups: dict[str, list] = defaultdict(list)
    compute: dict[str, list] = defaultdict(list)
    gpu = get_gpu("h100")
    with tempfile.TemporaryDirectory() as tmp:
        specs: dict = {}
        for name, m in fx["models"].items():
            arch = m["architecture"]
            path = Path(tmp) / f"{name}.gguf"
            write_gguf(path, arch, {k[len(arch) + 1 :]: v for k, v in m["metadata"].items()})
            try:
                specs[name] = load_gguf(path)
            except SpecError as e:
                specs[name] = e
        for row in fx["cases"]:
            spec = specs[row["model"]]
            if isinstance(spec, SpecError):
                groups[f"kvplan refuses the GGUF ({row['model']}): {spec}"].append((row["id"], None, None))
                continue
            try:
                r = plan_fit(spec, gpu, options(row["asked"]))
                err = None
            except UsageError as e:
                r, err = None, str(e)
            if not row["ok"]:
                key = "both refuse" if err else "llama.cpp refuses, kvplan plans: " + row["error"].split(": ")[-1][:60]
                groups[key].append((row["id"], err, row["error"]))
                continue
            if err:
                groups["kvplan refuses, llama.cpp allocates"].append((row["id"], err, row["memory_bytes"]))
                continue
            a, b = ours(r), theirs(row)
            groups["equal" if a == b else "differs"].append((row["id"], a, b))
            kind = (
                ("real" if fx["models"][row["model"]]["dry_run"] else "tiny (vocab 32)")
                + (", fa on" if row["got"]["flash_attn"] else ", fa off")
                + ("" if row["asked"]["type_k"] == row["asked"]["type_v"] == "f16" else ", quantized/other cache")
            )
            compute[kind].append((row["compute_bytes"] / r.activation_bytes - 1, row["id"]))
    for key, rows in sorted(groups.items()):
        print(f"{len(rows):5d}  {key}")
        if args.rows and key not in ("equal", "both refuse"):
            for rid, k, g in rows:
                print(f"         {rid}: kvplan {k}, llama.cpp {g}")
    print("\ncompute buffer, measured / kvplan's model - 1:")
    for kind, errs in sorted(compute.items()):
        errs.sort()
        lo, hi = errs[0], errs[-1]
        print(f"  {kind:40s} {len(errs):5d} rows  {lo[0]:+.4f} ({lo[1]}) .. {hi[0]:+.4f} ({hi[1]})")


if __name__ == "__main__":
    main()
