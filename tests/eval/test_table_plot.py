"""A run's curve as table rows (golden values from a results.json object) and the two-panel
plot of them."""

from __future__ import annotations

import math
import struct

from metagen.eval.plot import make_figure, write_plot
from metagen.eval.table import curve_rows, results_table


def _result(strategy, n, metric, mean, items=4, stderr=0.1):
    return {"strategy": strategy, "n": n, "metric": metric, "mean": mean, "stderr": stderr,
            "items": items}


REPORT = {"results": [
    _result("samples", 4, "pass@k", 0.9),
    _result("self_consistency", 1, "accuracy", 0.25), _result("self_consistency", 4, "accuracy",
                                                              0.5),
    _result("self_consistency", 1, "generated_tokens", 10.0),
    _result("self_consistency", 4, "generated_tokens", 40.0),
    _result("self_consistency", 1, "flops", 1e3), _result("self_consistency", 4, "flops", 4e3),
    _result("greedy", 1, "accuracy", 0.5), _result("greedy", 1, "generated_tokens", 9.0),
]}
SEARCH = {"results": [_result("mcts", 4, "accuracy", 0.75),
                      _result("mcts", 4, "generated_tokens", 100.0)]}  # FLOPs unknown


def test_curve_rows_total_the_per_item_means_and_skip_pass_at_k():
    rows = curve_rows([REPORT, SEARCH])
    assert [(r["strategy"], r["n"]) for r in rows] == [
        ("greedy", 1), ("self_consistency", 1), ("self_consistency", 4), ("mcts", 4)]
    sc4 = rows[2]
    assert (sc4["accuracy"], sc4["stderr"], sc4["items"]) == (0.5, 0.1, 4)
    assert (sc4["generated_tokens"], sc4["flops"]) == (160.0, 16e3)  # 4 items x the mean
    assert math.isnan(rows[0]["flops"]) and math.isnan(rows[3]["flops"])


def test_the_table_labels_strategies_and_marks_unknown_flops():
    from rich.console import Console

    console = Console(width=120, record=True)
    console.print(results_table(curve_rows([REPORT, SEARCH]), title="t"))
    text = console.export_text()
    assert "self-consistency" in text and "MCTS (PRM)" in text and "16,000" not in text
    assert "1.6e+04" in text and "?" in text and "50.0%" in text and "160" in text


def test_plot_has_tokens_and_flops_panels(tmp_path):
    import matplotlib.pyplot as plt

    rows = curve_rows([REPORT, SEARCH])
    fig = make_figure(rows, "t")
    try:
        tokens, flops = fig.axes
        assert tokens.get_xscale() == flops.get_xscale() == "log"
        assert "tokens" in tokens.get_xlabel() and "FLOPs" in flops.get_xlabel()
        assert len(tokens.lines) == len(flops.lines) == 3  # one line per strategy
        greedy = next(ln for ln in tokens.lines if ln.get_label() == "greedy")
        assert len(greedy.get_xdata()) == 1 and greedy.get_linestyle() == "None"
        sc = next(ln for ln in flops.lines if ln.get_label() == "self-consistency")
        assert list(sc.get_xdata()) == [4e3, 16e3]
        mcts = next(ln for ln in flops.lines if ln.get_label() == "MCTS (PRM)")
        assert len(mcts.get_xdata()) == 0  # unknown FLOPs are left out of that panel
    finally:
        plt.close(fig)
    png = write_plot(rows, tmp_path / "plot.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", png[16:24])  # IHDR
    assert width > 2 * height  # two panels side by side
