#!/usr/bin/env bash
# A/B of decode speed between a commit and this working tree, in one device call:
#
#     bash tests/gpu/ab_roofline.sh BEFORE_COMMIT
#
# `engine.harness.bench roofline` for llama-8b:q4_0 and llama-1b:f16 (dummy weights: no
# SmolLM2 file needed), alternately in the old tree (a git worktree of BEFORE_COMMIT) and
# this one, A B A B, then the GPU tests in this tree. $OUT gets roofline.log (every run's
# output), roofline.json (every run's document), pytest.log and table.txt: decode tok/s per
# model and tree, and the ratio new/old, also printed last. About 2-3 minutes on an H200.
# Wheels the device image lacks (pydantic, gguf) are installed from .whl/ when the call
# carries it (engine/PERF.md, "Reproducing on the device machine"). The device copy's .git
# may lag this checkout: BEFORE must be a commit it holds (the script says which it used).
set -u
BEFORE=${1:?usage: ab_roofline.sh BEFORE_COMMIT}
OUT=${OUT:-/tmp/out}
NEW=$PWD
OLD=/tmp/before
RUNS=/tmp/ab_roofline  # one JSON per run (only a few files come back from $OUT)
mkdir -p "$OUT" "$RUNS"
export PYTHONUNBUFFERED=1
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
fi
if [ ! -d "$OLD" ]; then
  git worktree add --detach "$OLD" "$BEFORE" >"$OUT/worktree.log" 2>&1 || {
    cat "$OUT/worktree.log"
    exit 1
  }
fi
echo "old $(git -C "$OLD" rev-parse --short HEAD), new: this tree ($(git rev-parse --short HEAD) + changes)"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader

roofline() { # tree label model round
  local tree=$1 label=$2 model=$3 round=$4 bench=engine.harness.bench
  [ -f "$tree/engine/harness/bench.py" ] || bench=engine.bench # before the harness moved
  local json="$RUNS/${label}_${model//[:]/_}_${round}.json"
  echo "== $label $model round $round ($bench)" >>"$OUT/roofline.log"
  (cd "$tree" && PYTHONPATH=/tmp/site:$tree timeout 120 python3 -m $bench roofline \
    --model "$model" --ctx 128 --tokens 64 --reps 3 --out "$json") >"$RUNS/run.log" 2>&1 ||
    echo "FAILED: $label $model round $round (see roofline.log)"
  cat "$RUNS/run.log" >>"$OUT/roofline.log"
  echo "$label round $round $(tail -n 1 "$RUNS/run.log")"
}

for round in 1 2; do
  for model in llama-8b:q4_0 llama-1b:f16; do
    roofline "$OLD" old "$model" "$round"
    roofline "$NEW" new "$model" "$round"
  done
done

PYTHONPATH=/tmp/site:$NEW timeout 240 python3 -m pytest -q tests/gpu -m gpu -x \
  -k "not llama_1b or q4_0" -p no:cacheprovider --tb=short >"$OUT/pytest.log" 2>&1
tail -n 5 "$OUT/pytest.log"

python3 - "$RUNS" "$OUT" <<'PY' | tee "$OUT/table.txt"
import glob, json, statistics, sys
runs, docs = {}, {}
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    d = json.load(open(f))
    name = f.rsplit("/", 1)[1][: -len(".json")]
    docs[name] = d
    tree = name.split("_")[0]
    runs.setdefault(d["model"], {}).setdefault(tree, []).append(d["decode_tok_s_median"])
json.dump(docs, open(sys.argv[2] + "/roofline.json", "w"), indent=1)
print(f"\n{'model':14} {'old tok/s (rounds)':>24} {'new tok/s (rounds)':>24} {'new/old':>8}")
for model, by in runs.items():
    old, new = by.get("old", []), by.get("new", [])
    ratio = statistics.fmean(new) / statistics.fmean(old) if old and new else float("nan")
    cells = [" ".join(f"{v:7.1f}" for v in vals) for vals in (old, new)]
    print(f"{model:14} {cells[0]:>24} {cells[1]:>24} {ratio:8.3f}")
PY
grep -E "passed|failed|error" "$OUT/pytest.log" | tail -n 1
