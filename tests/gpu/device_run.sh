#!/usr/bin/env bash
# One device-machine session: the GPU test suite, then the harness and bench commands on the
# H200 shapes. Expects the wheels installed under /tmp/site (see engine/PERF.md for the
# call that assembles the SmolLM2 file there). Logs go to $OUT; a summary is printed last.
set -u
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
# the device copy's .git (if any) is not this checkout's: the caller names the commit
echo "commit ${SPARKBOARD_COMMIT:-unknown (set SPARKBOARD_COMMIT)}"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
timeout 200 python3 -m pytest -q tests/gpu -m gpu -k "not llama_1b or q4_0" -p no:cacheprovider \
  --tb=short 2>&1 | tee "$OUT/pytest.log" | tail -n 15
B="timeout 90 python3 -m engine.harness.bench"
$B sweep --model llama-8b:f16 --ctx 128,4096 --tokens 64 --reps 2 --backend cupy --out "$OUT/sweep_8b_f16.json" 2>&1 | tail -n 2
$B sweep --model llama-8b:q4_0 --ctx 128,32768 --tokens 64 --reps 1 --backend cupy --out "$OUT/sweep_8b_q4_0.json" 2>&1 | tail -n 2
$B sweep --model llama-1b:f16 --ctx 128 --tokens 128 --reps 2 --backend cupy --out "$OUT/sweep_1b_f16.json" 2>&1 | tail -n 2
$B concurrent --model llama-1b:f16 --widths 1,8,32 --tokens 64 --runs 1 --backend cupy --out "$OUT/conc_1b_f16.json" 2>&1 | tail -n 2
$B roofline --model llama-8b:f16 --ctx 128 --tokens 64 --reps 2 --out "$OUT/roofline_8b_f16.json" 2>&1 | tail -n 6
$B roofline --model llama-8b:q4_0 --ctx 128 --tokens 64 --reps 2 --out "$OUT/roofline_8b_q4_0.json" 2>&1 | tail -n 6
$B roofline --model llama-1b:f16 --ctx 128 --tokens 128 --reps 2 --out "$OUT/roofline_1b_f16.json" 2>&1 | tail -n 6
$B peers --model llama-1b:f16 --ctx 128 --tokens 32 --out "$OUT/peers_1b_f16.json" 2>&1 | tail -n 5
timeout 240 python3 -m engine.harness.bench peers --model llama-8b:f16 --ctx 4096 --tokens 16 \
  --out "$OUT/peers_8b_f16_4k.json" 2>&1 | tail -n 5
if [ "${PEERS_COMPILE:-1}" = 1 ]; then  # torch.compile takes minutes to build: PEERS_COMPILE=0 skips
  timeout 240 python3 -m engine.harness.bench peers --model llama-1b:f16 --ctx 128 --tokens 64 --compile \
    --out "$OUT/peers_1b_f16_compile.json" 2>&1 | tail -n 5
fi
timeout 60 python3 -m engine generate --model smollm2-135m --prompt "The capital of France is" \
  --max-tokens 12 --backend cupy 2>&1 | tail -n 3
python3 - "$OUT" <<'PY'
import glob, json, sys
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    d = json.load(open(f))
    name = f.rsplit("/", 1)[1]
    if d.get("kind") == "sweep":
        for c in d["contexts"]:
            print(f"{name:24} ctx {c['ctx']:6} decode {c['decode_tok_s']} prefill {[round(x) for x in c['prefill_tok_s']]}")
    elif d.get("kind") == "concurrent":
        base = None
        for w in d["widths"]:
            print(f"{name:24} width {w['width']:3} tok/s {[round(r['tok_s'], 1) for r in w['runs']]}")
    elif "ceiling_tok_s" in d:
        print(f"{name:24} ceiling {d['ceiling_tok_s']:.1f} measured {d['decode_tok_s_median']:.1f} ratio {d['ratio']:.2f}")
    elif "rows" in d:
        for k, r in d["rows"].items():
            print(f"{name:24} {k:34} {r}")
PY
grep -E "passed|failed" "$OUT/pytest.log" | tail -n 1
