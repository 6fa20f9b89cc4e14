#!/usr/bin/env bash
# One device call's checks (after `bash data/demo/gpu/run_paired.sh setup`, which leaves this tree
# at /tmp/sb): the process probe of short prefills (process_probe.py), the held-device test (a
# kernel a PR leaves spinning: forged, and how long its kill took to free the card), the paired
# long-context check on the 1B (main's engine beside the PR's, each alone under the budget), then
# the GPU test suite. Each step bounded; everything under $OUT.
set -u
OUT=${OUT:-/tmp/out}
cd /tmp/sb && export PYTHONPATH=/tmp/sb PYTHONUNBUFFERED=1
step() { echo "== $1 ($(date +%T))"; }
step probe
timeout 240 python3 tests/gpu/process_probe.py --processes "${PROCESSES:-8}" 2>&1 | tee "$OUT/probe.txt"
step held
timeout 150 python3 -m pytest -q -s -p no:cacheprovider tests/engine/test_device_held.py \
  -k spinning 2>&1 | tail -n 12 | tee "$OUT/held.txt"
step longctx
for i in 1 2; do
  timeout 200 python3 -m engine.harness.bench longctx --model llama-1b:f16 --backend cupy \
    --ctx 131000 --tokens 16 --memory-budget $((12032 * 2**20)) --sandbox bwrap \
    --engine-checkout . --baseline-checkout . --out "$OUT/longctx-$i.json" 2>"$OUT/longctx-$i.log"
  echo "exit $?"; tail -n 2 "$OUT/longctx-$i.log"
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); m=d['main']
print('PR', round(d['prefill_tok_s']), 'main', round(m['prefill_tok_s']), 'main first', m['first'],
      'ratio', round(d['prefill_tok_s'] / m['prefill_tok_s'], 4), 'wall', round(d['wall_s'], 1))" \
    "$OUT/longctx-$i.json" 2>&1
done
step gputests
timeout "${GPUTESTS_S:-200}" python3 -m pytest -q -p no:cacheprovider tests/gpu 2>&1 | tail -n 8 | tee "$OUT/gputests.txt"
step done
