#!/usr/bin/env bash
# gpu_check.sh: `kvplan verify` over every cache topology; a Markdown table of formula vs measured bytes.
#
# Usage: scripts/gpu_check.sh [--device cuda|cpu]
#   cuda (default): sizes for one H200 (~139 GiB visible): at most 80 GiB of cache per run, < 5 minutes.
#   cpu: smaller sizes (at most 1 GiB per run) for a machine without a GPU (~1 minute on 2 cores).
# Models: llama3-8b and llama3-70b (GQA), llama2-7b (MHA), falcon-7b (MQA), gemma3-27b (sliding window),
# deepseek-v3 (MLA latent), jamba-v0.1 (Mamba state + attention), each at two sizes.
# The table goes to stdout, and to $OUT/verify-h200.md (cuda) or $OUT/verify-cpu.md (cpu) when $OUT is set.
# Progress goes to stderr. Exit status: 0 when every run verified ok, 1 otherwise, 2 on bad arguments.
# Python: $PYTHON, else .venv/bin/python, else python3.
set -euo pipefail
cd "$(dirname "$0")/.."

device=cuda
while (($#)); do
  case "$1" in
    --device) device="${2:-}"; shift 2 || shift ;;
    --device=*) device="${1#*=}"; shift ;;
    -h | --help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu_check.sh: unknown argument '$1' (use --device cuda|cpu)" >&2; exit 2 ;;
  esac
done
case "$device" in
  cuda | cpu) ;;
  *) echo "gpu_check.sh: --device must be cuda or cpu, got '$device'" >&2; exit 2 ;;
esac

PY="${PYTHON:-}"
if [[ -z "$PY" ]]; then
  if [[ -x .venv/bin/python ]]; then PY=.venv/bin/python; else PY=python3; fi
fi

# model seq batch [layers]; cache bytes in the comment (kvplan estimate)
if [[ $device == cuda ]]; then
  name=verify-h200.md
  per_run_timeout=120
  runs=(
    "llama3-8b 8192 1"       # 1 GiB
    "llama3-8b 8192 32"      # 32 GiB
    "llama3-70b 8192 4"      # 10 GiB
    "llama3-70b 8192 32"     # 80 GiB (all 80 layers)
    "llama2-7b 4096 1"       # 2 GiB
    "llama2-7b 4096 32"      # 64 GiB
    "falcon-7b 2048 1"       # 16 MiB
    "falcon-7b 2048 256"     # 4 GiB
    "gemma3-27b 8192 1"      # 1.03 GiB (52 sliding layers keep 1024 tokens)
    "gemma3-27b 32768 16"    # 46.5 GiB
    "deepseek-v3 4096 1"     # 274.5 MiB
    "deepseek-v3 32768 16"   # 34.3 GiB
    "jamba-v0.1 8192 1"      # 136.3 MiB (128 MiB attention + 8.3 MiB Mamba state)
    "jamba-v0.1 65536 16"    # 16.1 GiB
  )
else
  name=verify-cpu.md
  per_run_timeout=120
  runs=(
    "llama3-8b 2048 2"       # 512 MiB
    "llama3-8b 100 3"        # 37.5 MiB (sizes that are not whole pages)
    "llama3-70b 2048 1"      # 640 MiB
    "llama3-70b 8192 4 8"    # 8 of 80 layers: 1 GiB
    "llama2-7b 1024 2"       # 1 GiB
    "falcon-7b 2048 8"       # 128 MiB
    "gemma3-27b 2048 1"      # 576 MiB (52 sliding layers keep 1024 tokens)
    "deepseek-v3 2048 1"     # 137.3 MiB
    "jamba-v0.1 4096 2"      # 144.6 MiB
  )
fi

budget_s=270 # stop starting runs after this many seconds: the whole check stays under 5 minutes
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
status=0
i=0
for run in "${runs[@]}"; do
  read -r model seq batch layers <<<"$run"
  args=(verify "$model" --seq "$seq" --batch "$batch" --device "$device" --json)
  if [[ -n "${layers:-}" ]]; then args+=(--layers "$layers"); fi
  i=$((i + 1))
  echo "$run" >"$tmp/$i.run"
  left=$((budget_s - SECONDS))
  if ((left < 10)); then
    echo "skipped: time budget of ${budget_s} s spent" >"$tmp/$i.err"
    echo 125 >"$tmp/$i.rc"
    : >"$tmp/$i.json"
    status=1
    continue
  fi
  printf 'gpu_check [%d/%d, %d s] kvplan %s\n' "$i" "${#runs[@]}" "$SECONDS" "${args[*]}" >&2
  rc=0
  timeout "$((left < per_run_timeout ? left : per_run_timeout))" "$PY" -m kvplan "${args[@]}" \
    >"$tmp/$i.json" 2>"$tmp/$i.err" || rc=$?
  echo "$rc" >"$tmp/$i.rc"
  if ((rc != 0)); then
    status=1
    tail -n 1 "$tmp/$i.err" >&2 || true
  fi
done

"$PY" - "$tmp" "$i" "$device" >"$tmp/table.md" <<'PYEOF'
import json
import platform
import sys
from datetime import datetime, timezone

tmp, n, device = sys.argv[1], int(sys.argv[2]), sys.argv[3]
rows, info = [], None
for i in range(1, n + 1):
    run = open(f"{tmp}/{i}.run").read().split()
    rc = int(open(f"{tmp}/{i}.rc").read())
    try:
        r = json.load(open(f"{tmp}/{i}.json"))
    except (OSError, ValueError):
        r = None
    if r is None:
        err = open(f"{tmp}/{i}.err").read().strip().splitlines()
        why = "timed out" if rc in (124, 137) else (err[-1] if err else f"exit {rc}")
        why = why.replace("|", "\\|")
        rows.append(f"| {run[0]} | {run[1]} | {run[2]} | {run[3] if len(run) > 3 else 'all'} | - | - | - | - | - | - | no: {why} |")
        continue
    info = info or r
    err = "skipped" if r["attention_max_abs_err"] is None else f"{r['attention_max_abs_err']:.2e}"
    rows.append(
        f"| {r['model']} | {r['seq_len']:,} | {r['batch_size']} | {r['layers']} | {r['formula_bytes']:,} | "
        f"{r['measured_bytes']:,} | {r['diff_bytes']:+,} | {r['diff_pct']:+.4f} | {r['tolerance_bytes']:,} | "
        f"{err} | {'yes' if r['ok'] else 'NO'} |"
    )
try:
    import torch

    tv = torch.__version__
except ImportError:
    tv = "not installed"
where = info["device_name"] if info else device
measure = info["measure"] if info else ""
print(f"# kvplan verify on {where}")
print()
print(f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, torch {tv}, Python {platform.python_version()}, "
      f"`scripts/gpu_check.sh --device {device}`. Measured: {measure}. Tolerance: the allocator's rounding "
      "(512 B per tensor on CUDA, 2 pages per tensor on CPU). Attention: bundled GQA vs fp32 SDPA, max |error|.")
print()
print("| model | seq | batch | layers | formula bytes | measured bytes | diff bytes | diff % | tolerance bytes | attention err | ok |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
for row in rows:
    print(row)
PYEOF

cat "$tmp/table.md"
if [[ -n "${OUT:-}" ]]; then
  mkdir -p "$OUT"
  cp "$tmp/table.md" "$OUT/$name"
  echo "gpu_check: wrote $OUT/$name" >&2
fi
exit "$status"
