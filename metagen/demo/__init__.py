"""The demo: test-time compute scaling of parallel strategies on the testbed.

:func:`run_demo` samples once, scores once, and evaluates greedy, best-of-N with the ORM,
self-consistency, weighted voting and MBR at N = 1..32 as nested prefixes of the same samples.
"""

from metagen.demo.evaluate import DemoProblem, evaluate_prefixes
from metagen.demo.run import DemoConfig, run_demo

__all__ = ["DemoConfig", "DemoProblem", "evaluate_prefixes", "run_demo"]
