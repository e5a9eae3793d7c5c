"""``metagen bench engine [--quick] [--json PATH]``: the engine benchmark (see benchmarks/).

The harness lives in the source checkout's ``benchmarks/`` folder (beside the ``metagen``
package); an installation without it gets a one-line error. ``--quick`` uses tiny models and
sizes (transformers + metagen only, about a minute on a laptop CPU); the full run takes minutes.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import click


def _harness():
    root = Path(__file__).resolve().parents[2]
    if not (root / "benchmarks" / "engine_bench.py").is_file():
        raise click.ClickException(
            f"benchmarks/ not found beside the metagen package ({root}); run from a source "
            "checkout of metagen")
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    return importlib.import_module("benchmarks.engine_bench")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def bench() -> None:
    """Performance benchmarks (timings are reported, never asserted)."""


@bench.command("engine")
@click.option("--quick", is_flag=True, help="Tiny models and sizes; transformers + metagen only.")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None,
              help="Also write the full result as JSON to this file.")
@click.option("--workloads", default="ABCDEM", show_default=True,
              help="Which workloads to run (letters A-E, and M: peak memory in a fresh process).")
@click.option("--cache-dir", type=click.Path(file_okay=False), default=None,
              help="Where the generated benchmark models are kept (default: a temp folder).")
@click.option("--repeats", type=click.IntRange(1, 100), default=None,
              help="Timed runs per measurement (default: 3 full, 1 quick).")
@click.option("--no-warmup", is_flag=True, help="Skip the untimed first run of each measurement.")
def engine(quick: bool, json_path: str | None, workloads: str, cache_dir: str | None,
           repeats: int | None, no_warmup: bool) -> None:
    """Engine benchmark: workloads A-E, peers side by side, roofline measured in the same run."""
    bad = set(workloads.upper()) - set("ABCDEM")
    if bad or not workloads:
        raise click.BadParameter(f"unknown workload(s) {''.join(sorted(bad))!r}; use letters A-E or M",
                                 param_hint="--workloads")
    harness = _harness()
    result = harness.run(quick=quick, cache_dir=cache_dir, workload_names=workloads.upper(),
                         log=lambda m: click.echo(m, err=True), repeats=repeats,
                         warmup=False if no_warmup else None)
    harness.print_table(result)
    if json_path:
        harness.write_json(result, json_path)
        click.echo(f"wrote {json_path}", err=True)
