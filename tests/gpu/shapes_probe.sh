#!/usr/bin/env bash
# Device probe (not a test): main's engine beside itself, turn by turn, sealed, at contexts a few
# tokens apart (each a new cache shape: new allocations, a new graph). Per session and context
# the median paired ratio: do nearby shapes of one session scatter as sessions do? CTX and N (the
# number of sessions) from the environment: N=8 CTX=128,512,4096 gives the process pairs' spread.
set -u
OUT=${OUT:-/tmp/out}; export PYTHONPATH=$PWD
CTX=${CTX:-128,136,144,152,160,168,512,528,544,560}
N=${N:-3}  # sessions
for s in $(seq 1 "$N"); do
  timeout 280 python3 -m engine.harness.bench sweep --model llama-8b:q4_0 --ctx "$CTX" --tokens 64 \
    --reps 3 --warmup 0 --min-time 0.05 --prefill-tokens 4096 --baseline-checkout . --sandbox bwrap \
    --backend cupy --no-verify --scratch /tmp/scr$s --engine-cache /tmp/kc-a --baseline-cache /tmp/kc-b \
    --out "$OUT/shapes$s.json" 2>"$OUT/shapes$s.log" \
    || tail -5 "$OUT/shapes$s.log"
done
python3 - "$OUT" "$N" <<'PY'
import json, sys, statistics as st
out = sys.argv[1]
for s in range(1, int(sys.argv[2]) + 1):
    try:
        d = json.load(open(f"{out}/shapes{s}.json"))
    except Exception as e:
        print(s, "no document", e); continue
    row = []
    for a, b in zip(d["contexts"], d["baseline"]["contexts"]):
        r = st.median(x / y for x, y in zip(a["decode_tok_s"], b["decode_tok_s"]))
        row.append(f"{a['ctx']}:{r:.4f}({st.median(b['decode_tok_s']):.0f})")
    print("session", s, " ".join(row))
PY
