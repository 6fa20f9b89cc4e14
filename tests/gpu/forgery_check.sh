#!/usr/bin/env bash
# The timing parent, its cross-check and its verification on the GPU, in one device call:
#
#     bash tests/gpu/forgery_check.sh
#
# For dummy-weight models (no SmolLM2 file needed): `engine.harness.bench sweep` and
# `concurrent` with the engine in a child process, then `longctx` under a device-memory budget,
# and the same sweep with the engine's clock patched to half speed and with a shortcut (the last
# layer skipped) in a copy of the tree. Prints, per run: the median of the engine's own figure
# over the parent's (CUDA events: ~1 honest, ~0.5 patched), the share of generated tokens and
# prefills that agree with main's model (ties within 0.01 nats), the mean prefill KL, and what
# collector/judge/forgery.py decides. Logs and documents under $OUT. About 4 minutes on an H200.
set -u
OUT=${OUT:-/tmp/out}
RUNS=/tmp/forgery_runs
mkdir -p "$OUT" "$RUNS"
export PYTHONUNBUFFERED=1
bash tests/gpu/carry_smollm2.sh || exit 1
if false; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
fi
export PYTHONPATH=/tmp/site:$PWD
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader

# copies of this tree with one edit each, the engine a PR could ship
mk() { # name python-edit
  rm -rf "/tmp/$1" && mkdir -p "/tmp/$1" && cp -r engine kernels data "/tmp/$1/" 2>/dev/null
  python3 - "/tmp/$1/engine/cuda/runner.py" "$2" <<'EOF'
import sys
path, what = sys.argv[1], sys.argv[2]
text = open(path).read()
if what == "clock":
    text = text.replace("from __future__ import annotations\n", "from __future__ import annotations\n\nimport time as _t\n_r = _t.perf_counter\n_s = _r()\n_t.perf_counter = lambda: _s + (_r() - _s) * 0.5\n", 1)
    text = text.replace("from __future__ import annotations\n", "from __future__ import annotations\nimport cupy as _cp\n_e = _cp.cuda.get_elapsed_time\n_cp.cuda.get_elapsed_time = lambda a, b: _e(a, b) * 0.5\n", 1)
open(path, "w").write(text)
EOF
}
mk clock clock

run() { # label checkout model args...
  local label=$1 checkout=$2 model=$3
  shift 3
  local doc="$RUNS/${label}_${model//[:]/_}.json"
  timeout 300 python3 -m engine.harness.bench "$@" --model "$model" --backend cupy \
    --engine-checkout "$checkout" --out "$doc" >>"$OUT/runs.log" 2>&1
  echo "$label $model rc=$? $doc" >>"$OUT/index.txt"
}

for m in llama-1b:f16 llama-8b:q4_0; do
  run honest-sweep "$PWD" "$m" sweep --ctx 128,4096 --tokens 64 --reps 2 --warmup 0
  run honest-conc "$PWD" "$m" concurrent --widths 2,8 --tokens 32 --runs 2
  run clock-sweep /tmp/clock "$m" sweep --ctx 128,4096 --tokens 64 --reps 2 --warmup 0
done
run longctx "$PWD" llama-1b:f16 longctx --ctx 32768 --tokens 4 --memory-budget $((16 * 2**30))
run longctx-small "$PWD" llama-1b:f16 longctx --ctx 32768 --tokens 4 --memory-budget $((3 * 2**30))

python3 - "$RUNS" <<'EOF' | tee "$OUT/table.txt"
import glob, json, statistics, sys
from collector.judge.forgery import ForgeryRules, output_problem, timing_problem
from engine.harness.protocol import parse_document
rules = ForgeryRules(tie_nats=0.01)
print(f"{'run':<28} {'own/parent':>10} {'tokens ok':>10} {'prefills ok':>11} {'KL':>9}  verdict")
for path in sorted(glob.glob(sys.argv[1] + "/*.json")):
    raw = open(path).read()
    d = json.loads(raw)
    doc = parse_document(raw, d["kind"])
    m = doc.measured
    name = path.rsplit("/", 1)[1][:-5]
    if m is None:
        print(f"{name:<28} {'-':>10} {'-':>10} {'-':>11} {'-':>9}  {getattr(doc, 'failure', '')}")
        continue
    r = m.timing.regions
    ratio = statistics.median(o / p for p, o in r)
    v = m.verification
    dm = sum(x <= 0.01 for x in v.decode_margins) / max(1, len(v.decode_margins))
    pm = sum(x <= 0.01 for x in v.prefill_margins) / max(1, len(v.prefill_margins))
    kl = statistics.fmean(v.prefill_kl) if v.prefill_kl else 0.0
    why = timing_problem(r, rules) or output_problem(doc, 0.93, 0.03, rules) or "ok"
    extra = f" completed={doc.completed}" if d["kind"] == "longctx" else ""
    print(f"{name:<28} {ratio:>10.3f} {dm:>10.3f} {pm:>11.3f} {kl:>9.2e}  {why[:90]}{extra}")
EOF
