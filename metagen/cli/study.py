"""``metagen eval --config STUDY.yaml``: every run of a study file (:mod:`metagen.eval.study`),
one after another, each exactly its ``metagen eval`` command (so a rerun resumes each folder).

The whole file is checked before any model loads. With ``--config`` the per-run flags are
refused (the file sets them): only ``--out`` (the output root, over the file's ``out``) and
``--force-resume`` (passed to every run) may be given, and ``OPENAI_API_KEY`` reaches the
server models. Exit status: 0 every run complete, 1 some run has failed items, 128 + signal
when SIGINT / SIGTERM stopped a run (the later runs are not started); an error (a refused run
key, a folder in use) stops the study with the one-line message and status 2."""

from __future__ import annotations

import click

from metagen.errors import InvalidParameterError

WITH_CONFIG = ("config_file", "out", "force_resume")  # the flags a study run may be given


def refuse_run_flags(ctx: click.Context) -> None:
    """``InvalidParameterError`` naming the first per-run flag given on the command line
    (every parameter but :data:`WITH_CONFIG`), as its flag is spelt (``n``, ``strategy_arg``,
    ``task``)."""
    for param in ctx.command.params:
        name = str(param.name)
        if name not in WITH_CONFIG and ctx.get_parameter_source(name) \
                is click.core.ParameterSource.COMMANDLINE:
            flag = param.opts[0].lstrip("-").replace("-", "_")
            raise InvalidParameterError(flag, ctx.params.get(name), "is set by the study "
                                        "file; with --config only --out and --force-resume "
                                        "are given on the command line")


def single_run(task: str | None, strategy: str | None, out: str | None
               ) -> tuple[str, str, str]:
    """TASK, ``--strategy`` and ``--out`` of a run without ``--config``: each is required
    (``InvalidParameterError`` naming the first missing)."""
    for name, value in (("task", task), ("strategy", strategy), ("out", out)):
        if value is None:
            raise InvalidParameterError(name, None, "is required (TASK --strategy NAMES --out "
                                        "DIR), unless --config STUDY.yaml gives the runs")
    return str(task), str(strategy), str(out)


def run_study(ctx: click.Context, path: str, out: str | None, force_resume: bool) -> int:
    """Check the study at ``path`` and run it (see the module docstring); the exit status."""
    from metagen.cli.eval import eval_command
    from metagen.eval.study import load_study

    refuse_run_flags(ctx)
    study = load_study(path, out)
    worst = 0
    for i, run in enumerate(study.runs, 1):
        click.echo(f"[{i}/{len(study.runs)}] {run.name}", err=True)
        code = eval_command.main(args=[*run.argv, *(["--force-resume"] if force_resume else [])],
                                 prog_name="metagen eval", standalone_mode=False)
        code = code if isinstance(code, int) and not isinstance(code, bool) else 0
        if code >= 128:
            click.echo(f"study stopped at {run.name}: rerun the same command to resume", err=True)
            return code
        worst = max(worst, code)
    click.echo(f"study: {len(study.runs)} runs under {study.out} "
               f"({'complete' if worst == 0 else 'some items failed'}); "
               f"metagen report {study.path} --out report.html")
    return worst
