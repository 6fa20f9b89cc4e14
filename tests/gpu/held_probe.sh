#!/usr/bin/env bash
# The held-device test's session by hand (tests/engine/test_device_held.py, the `gpu` case): a
# PR whose engine leaves a kernel spinning, its sweep's stderr streamed and the GPU's processes
# read every 10 s, so a session that does not end says where it stands. After run_paired.sh setup.
set -u
OUT=${OUT:-/tmp/out}
cd /tmp/sb && export PYTHONPATH=/tmp/sb PYTHONUNBUFFERED=1
rm -rf /tmp/pr && mkdir -p /tmp/pr && cp -r engine data kernels /tmp/pr/
python3 -c "import sys; sys.path[:0] = ['tests/engine', 'tests']
from test_device_held import SPINNER; open('/tmp/pr/engine/__init__.py', 'a').write(SPINNER)"
(while sleep 10; do date +%T; nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader
  nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader; done) >"$OUT/smi.txt" 2>&1 &
watch=$!
SECONDS=0
# the parent's Python stack to stderr on SIGUSR1, every DUMP_S seconds: where a session stands
timeout "${HELD_S:-200}" python3 -c "import faulthandler, runpy, signal, sys
faulthandler.register(signal.SIGUSR1, all_threads=True)
sys.argv = ['bench', *sys.argv[1:]]
runpy.run_module('engine.harness.bench', run_name='__main__')" sweep --model tiny:f16 \
  --backend cupy --ctx 16,32 --tokens 4 --reps 3 --min-time 0.01 --baseline-checkout . \
  --engine-checkout /tmp/pr --sandbox "${SANDBOX:-bwrap}" --out "$OUT/held.json" 2>"$OUT/held.err" &
parent=$!
(while sleep "${DUMP_S:-40}"; do pkill -USR1 -f "^python3 -c import faulthandler" || break; done) &
dumper=$!
wait $parent; echo "exit $? after ${SECONDS}s"; kill $watch $dumper
tail -n 40 "$OUT/held.err"; tail -n 6 "$OUT/smi.txt"
