# Two entry points (README.md): `make run` and `make test`. Both set up .venv first.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV_PY := .venv/bin/python

.PHONY: setup run test test-all bench clean-venv

setup:
	@$(PYTHON) tools/sync_env.py

run: setup
	$(VENV_PY) -m experiments.compare --preset=readme

test: setup
	$(VENV_PY) -m pytest

test-all: setup
	$(VENV_PY) -m pytest -m ""

bench: setup
	$(VENV_PY) -m perf.conflict_kernels

clean-venv:
	rm -rf .venv
