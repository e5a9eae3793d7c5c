"""metagen's performance benchmarks (run from a source checkout): ``metagen bench engine``."""
