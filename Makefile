.PHONY: demo test setup bench
PY := .venv/bin/python

setup:
	@bash scripts/setup.sh

demo: setup
	$(PY) -m metagen demo

test: setup
	$(PY) -m mypy metagen
	$(PY) -m pytest -x

bench: setup
	$(PY) -m metagen bench engine
