.PHONY: demo test test-slow setup bench
PY := .venv/bin/python

setup:
	@bash scripts/setup.sh

demo: setup
	$(PY) -m metagen demo

# mypy, an AVX2 pass of the engine and decoding tests on AVX-512 CPUs, then the whole suite
# without -x; the last line is a pytest summary covering every pass (scripts/run_tests.py)
test: setup
	@$(PY) scripts/run_tests.py

# the tests marked slow (long end-to-end checks), which `make test` leaves out
test-slow: setup
	$(PY) -m pytest -m slow

bench: setup
	$(PY) -m metagen bench engine
