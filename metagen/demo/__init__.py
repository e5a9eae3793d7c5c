"""The demo: test-time compute scaling of parallel strategies on the testbed.

:func:`run_demo` samples once, scores once, and evaluates greedy, best-of-N with the ORM,
self-consistency, weighted voting and MBR at N = 1..32 as nested prefixes of the same samples.
With PRM step searches (``DemoConfig(step_search=FULL_STEP_SEARCHES)``, ``metagen demo --full``)
it adds best-of-N with the PRM as outcome scorer and step beam search, DVTS, best-first, MCTS
and REBASE rows.
"""

from metagen.demo.evaluate import DemoProblem, evaluate_prefixes
from metagen.demo.prm import FULL_STEP_SEARCHES
from metagen.demo.run import DemoConfig, run_demo

__all__ = ["FULL_STEP_SEARCHES", "DemoConfig", "DemoProblem", "evaluate_prefixes", "run_demo"]
