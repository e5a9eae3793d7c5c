"""The compute-optimal frontier over (model size, strategy, N) by FLOPs budget: which candidate
is best per FLOPs budget and difficulty bin, and whether choosing per bin beats the best single
fixed choice on held-out items (Snell et al. 2024; Wu et al. 2024, "Inference Scaling Laws")."""

from metagen.frontier.candidates import Candidates, load_candidates, parse_labelled
from metagen.frontier.held_out import pareto
from metagen.frontier.plot import write_frontier_plot
from metagen.frontier.policy import FlopsPolicy, fit_flops_policy
from metagen.frontier.report import frontier_report
from metagen.frontier.text import frontier_curve_text, frontier_policy_text

__all__ = ["Candidates", "FlopsPolicy", "fit_flops_policy", "frontier_curve_text",
           "frontier_policy_text", "frontier_report", "load_candidates", "pareto",
           "parse_labelled", "write_frontier_plot"]
