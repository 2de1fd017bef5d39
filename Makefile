# burble: two entry points on a fresh machine.
#   make demo  - create .venv, install burble, transcribe a real recording with the embedded tiny.en
#   make test  - same venv plus the test extras, run the test suite (tests marked slow are left to
#                `make test-all`: full-dev-set parity, 10-minute soak, browser/server end-to-end, ...)
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip

.PHONY: demo test test-all clean

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip

$(VENV)/.installed: $(VENV)/bin/python pyproject.toml
	$(PIP) install -q -e .
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed
	$(PIP) install -q -e '.[test]'
	touch $@

demo: $(VENV)/.installed
	$(PY) -m burble transcribe examples/jfk.wav --word-timestamps --output-format all --output-dir outputs/demo

test: $(VENV)/.installed-test
	$(PY) -m pytest -q -m "not slow"

test-all: $(VENV)/.installed-test
	$(PY) -m pytest -q

clean:
	rm -rf $(VENV) outputs .pytest_cache
