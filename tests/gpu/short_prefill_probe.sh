#!/usr/bin/env bash
# Device probe (not a test): why llama-1b:f16's short prefills stray between legs (its prefill@128
# band read 50.9% in 2026-12-h200-gates-sealed, where llama-8b:q4_0's read 2.3-2.9%), and what
# brings it in. Main's engine beside itself, turn by turn, sealed, the gpu profile's session shape
# (four legs, one repetition each, the concurrent decode after the contexts), N sessions of each
# variant, interleaved:
#   base    the gpu profile as it stands (--min-time 0.1, --prefill-tokens 1024)
#   pinned  the same, the whole session (parent and both engines) on one core
#   long    --prefill-tokens 8192: a short prefill region of ~0.3 s instead of ~35 ms
#   runs    --min-time 0.4: four times the runs per turn, the fastest kept
#   pinruns pinned and runs together: each side's runs spread over ~0.4 s of turns
#   eager   pinned, short prefills launched kernel by kernel (SPARKBOARD_PREFILL_GRAPHS=0), as
#           before they were replayed as CUDA graphs
#   pinload pinned, the engines loading on cores 0-3 first (SPARKBOARD_LOAD_CORES: the gpu
#           profile's load_cores), moved onto the session's core once loaded
# Prints, per variant and axis, the sd of the legs' log ratios and the sessions' median ratios.
set -u
OUT=${OUT:-/tmp/out}; export PYTHONPATH=$PWD
MODEL=${MODEL:-llama-1b:f16}
N=${N:-3}
VARIANTS=${VARIANTS:-base pinned long runs}
CORE=$(($(nproc) - 1))
bench() {  # variant session
  local v=$1 s=$2 pre="" mt=0.1 pt=1024
  case $v in pinned) pre="taskset -c $CORE" ;; long) pt=8192 ;; runs) mt=0.4 ;;
    pinruns) pre="taskset -c $CORE" mt=0.4 ;;
    eager) pre="env SPARKBOARD_PREFILL_GRAPHS=0 taskset -c $CORE" ;;
    pinload) pre="env SPARKBOARD_LOAD_CORES=0,1,2,3 taskset -c $CORE" ;; esac
  timeout 200 $pre python3 -m engine.harness.bench sweep --model "$MODEL" --ctx 128,512 \
    --tokens 64 --reps 4 --legs 4 --warmup 0 --min-time $mt --prefill-tokens $pt \
    --widths 2,8,32 --width-tokens 16 --width-runs 4 --prompt-len 128 \
    --baseline-checkout . --sandbox bwrap --backend "${BACKEND:-cupy}" --no-verify --scratch "/tmp/scr-$v-$s" \
    --engine-cache /tmp/kc-a --baseline-cache /tmp/kc-b \
    --out "$OUT/$v-$s.json" 2>"/tmp/$v-$s.log" || tail -5 "/tmp/$v-$s.log"
}
bench base 0 && rm -f "$OUT/base-0.json"  # the kernel caches filled, untimed
for s in $(seq 1 "$N"); do for v in $VARIANTS; do
  SECONDS=0; bench "$v" "$s"; echo "$v $s ${SECONDS}s"
done; done
python3 - "$OUT" "$N" $VARIANTS <<'PY'
import json, math, statistics as st, sys
out, n, variants = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def axes(doc):
    pr, main = doc, doc["baseline"]
    for a, b in zip(pr["contexts"], main["contexts"], strict=True):
        for k in ("prefill", "decode"):
            yield f"{k}@{a['ctx']}", a[f"{k}_tok_s"], b[f"{k}_tok_s"]
    for a, b in zip(pr["widths"], main["widths"], strict=True):
        yield f"c{a['width']}", [r["tok_s"] for r in a["runs"]], [r["tok_s"] for r in b["runs"]]
rows: dict[tuple[str, str], list[list[float]]] = {}
walls: dict[str, list[float]] = {}
for v in variants:
    for s in range(1, n + 1):
        try:
            doc = json.load(open(f"{out}/{v}-{s}.json"))
        except Exception as e:
            print(v, s, "no document:", e); continue
        walls.setdefault(v, []).append(doc["wall_s"])
        for ax, p, m in axes(doc):
            rows.setdefault((v, ax), []).append([math.log(x / y) for x, y in zip(p, m)])
for v in variants:  # where a session's time went (the harness's phases, legs summed)
    for s in range(1, n + 1):
        try:
            print(v, s, json.load(open(f"{out}/{v}-{s}.json"))["measured"]["phases"])
        except Exception:
            pass
print(f"{'variant':8} {'axis':12} {'leg sd%':>8} {'session medians %':>30}  wall s")
for (v, ax), sessions in rows.items():
    legs = [x for q in sessions for x in q]
    sd = 100 * st.stdev(legs) if len(legs) > 1 else float("nan")
    meds = " ".join(f"{100 * (math.exp(st.median(q)) - 1):+.2f}" for q in sessions)
    print(f"{v:8} {ax:12} {sd:8.2f} {meds:>30}  {st.median(walls[v]):.0f}")
PY
