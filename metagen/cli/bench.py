"""``metagen bench engine``: how to run the engine benchmark (not part of the package).

The harness (``benchmarks/engine_bench.py``), its peers (transformers, llama.cpp, OpenVINO
GenAI, ...) and the generator of its models live in the source checkout's ``benchmarks/``
folder, next to ``metagen/``; an installed metagen has none of them, so the library does not
reach into a checkout through ``sys.path``. The command is documented as ``python -m
benchmarks.engine_bench`` (run from a checkout), and this one prints that instruction, with the
arguments it was given, and exits with status 2.
"""

from __future__ import annotations

import shlex

import click

HARNESS = "python -m benchmarks.engine_bench"


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def bench() -> None:
    """Performance benchmarks (timings are reported, never asserted)."""


@bench.command("engine", context_settings={"ignore_unknown_options": True,
                                           "allow_extra_args": True})
@click.pass_context
def engine(ctx: click.Context) -> None:
    """Print how to run the engine benchmark (workloads A-E, peers side by side, each at one
    thread and at the default count); it runs from a source checkout of metagen."""
    args = " ".join(shlex.quote(a) for a in ctx.args)
    click.echo("The engine benchmark runs from a source checkout of metagen (its harness, peers "
               "and model generator are not part of the installed package). From the checkout's "
               f"root, run:\n\n    {HARNESS}{' ' + args if args else ''}\n\n"
               "Options: --quick (tiny models, about a minute), --workloads ABCDEM, "
               "--threads 1,default, --repeats N, --json PATH; see benchmarks/README.md.")
    ctx.exit(2)
