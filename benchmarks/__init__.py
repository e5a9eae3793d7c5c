"""metagen's performance benchmarks, run from a source checkout (not part of the package):
``python -m benchmarks.engine_bench``, ``python -m benchmarks.small_matmul`` and the others here."""
