"""``metagen demo``: test-time compute scaling on the testbed, as a preset over ``metagen eval``
(:mod:`metagen.eval.demo`): greedy, best-of-N with the ORM, self-consistency, weighted voting and
MBR at N = 1..32 over ONE set of samples per problem (``--confidence`` adds best-of-N and
weighted voting by the policy's own confidence; ``--full`` / ``--step-search`` add PRM step
searches, a second run), then a table and a PNG plot of accuracy against generated tokens and
against FLOPs.

The runs go to ``--out DIR`` (default ``metagen_demo/``): SQLite stores and ``results.json``
with provenance, so a rerun of the same command resumes (done problems are skipped) and a
changed setting is refused unless ``--force-resume``. ``--base-url URL --model NAME`` samples
from the testbed policy served by an OpenAI-compatible server (e.g. ``vllm serve <the testbed
policy folder>``) instead of loading it; the ORM, the PRM and the confidence verifier stay local
testbed models unless ``--reward SPEC`` / ``--prm SPEC`` name other scorers (the grammar of
``metagen eval --reward``, e.g. ``pooling+http://127.0.0.1:8001?model=orm`` for a reward model
served by ``metagen serve --orm orm=FOLDER``)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import click

from metagen.cli.flags import parse_ns
from metagen.cli.remote import open_remote, pop_remote, quiet_remote_logs, remote_options
from metagen.errors import InvalidParameterError
from metagen.eval.scaling_laws import SCALING_NS, SCALING_PROBLEMS

DEFAULT_PROBLEMS = 100  # about a minute on 2 CPU cores with the engine
DEFAULT_NS = "1,2,4,8,16,32"


@click.command("demo")
@click.option("--out", default="metagen_demo", show_default=True, metavar="DIR",
              help="Run folders (parallel/, step_search/); a rerun resumes.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), default=None,
              help="PNG plot: accuracy against generated tokens and against FLOPs "
              "[default: OUT/metagen_demo.png].")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None,
              help="Also write the table's rows here ({problems, results}).")
@click.option("--problems", type=int, default=None,
              help=f"Held-out testbed problems [default: {DEFAULT_PROBLEMS}; "
              f"{SCALING_PROBLEMS} with --scaling-laws].")
@click.option("--backend", type=click.Choice(["local", "hf"]), default="local",
              show_default=True, help="Engine (falls back to hf when absent) or transformers.")
@click.option("--ns", default=None,
              help=f"Values of N [default: {DEFAULT_NS}; {','.join(map(str, SCALING_NS))} with "
              "--scaling-laws].")
@click.option("--temperature", type=float, default=0.8, show_default=True)
@click.option("--max-tokens", type=int, default=160, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--full", is_flag=True, default=False,
              help="Also run every PRM step search of the strategy registry (those `metagen eval "
              "--help` lists as each_n with prm) at each --step-ns; slower: each is its own "
              "search per problem.")
@click.option("--step-search", default="", help="A subset of the --full PRM step searches, "
              "comma-separated, e.g. step_beam_search,dvts.")
@click.option("--step-ns", default="4,16", show_default=True,
              help="Scales N of the step searches (samples per search step).")
@click.option("--confidence", is_flag=True, default=False,
              help="Also best-of-N and weighted voting by the policy's own confidence in each "
              "sample (its weakest token; one more scoring pass).")
@click.option("--reward", "reward", default=None, metavar="SPEC",
              help="Outcome reward of best-of-N and weighted voting [default: the testbed ORM]: "
              "a model folder, likelihood (the testbed verifier's confidence), "
              "likelihood+FOLDER, judge+FOLDER, or a reward model server "
              "pooling+URL?model=NAME[&positive_label=I&tokenizer=FOLDER], "
              "classify+URL?model=NAME&..., json+URL?model=NAME.")
@click.option("--prm", "prm_kind", default="likelihood", show_default=True,
              metavar="likelihood|trained|head|SPEC",
              help="Process reward of the step searches: the step confidence of the testbed's "
              "verifier (the ORM model), the trained testbed PRM (a classifier), the trained "
              "step-value head over the ORM's and policy-s's confidences (head), or any --prm spec of "
              "metagen eval (a folder, PRESET+FOLDER, likelihood+FOLDER, "
              "pooling+URL?model=NAME&tokenizer=FOLDER, json+URL?model=NAME).")
@click.option("--concurrency", type=int, default=32, show_default=True,
              help="Problems in flight at once (results do not depend on it).")
@click.option("--force-resume", is_flag=True, default=False,
              help="Reuse run folders made with other settings.")
@click.option("--scaling-laws", is_flag=True, default=False,
              help="Instead: for each size of the testbed's policy family (draft, policy, "
              "policy-s), greedy, best-of-N (ORM), self-consistency and weighted voting, and "
              "step_beam_search (or --step-search) with best-of-N by the same PRM, all on the "
              "same problems, seed and verifier, into OUT/scaling_laws/<model>/; then the "
              "compute-optimal frontier over sizes and strategies (--plot: its plot).")
@remote_options
@click.pass_context
def demo(ctx: click.Context, out: str, plot_path: str | None, json_path: str | None,
         problems: int, backend: str, ns: str, temperature: float, max_tokens: int, seed: int,
         full: bool, step_search: str, step_ns: str, confidence: bool, reward: str | None,
         prm_kind: str, concurrency: int, force_resume: bool, scaling_laws: bool,
         **flags: Any) -> None:
    """Compare parallel meta-generators at N = 1..32 on held-out testbed problems (a preset of
    `metagen eval testbed`, resumable, with provenance).

    With --full (or --step-search) PRM step searches join the table and plot; this takes
    several times longer than the quick demo."""
    from rich.console import Console

    from metagen.eval import demo as preset
    from metagen.eval.atomic import write_json_atomic
    from metagen.eval.plot import write_plot
    from metagen.eval.table import curve_rows, results_table

    remote = pop_remote(flags)
    if remote and ctx.get_parameter_source("backend") == click.core.ParameterSource.COMMANDLINE:
        raise InvalidParameterError("backend", backend, "--base-url samples from the server; "
                                    "drop --backend or --base-url")
    searches = preset.full_step_searches() if full else tuple(dict.fromkeys(
        x.strip() for x in step_search.split(",") if x.strip()))
    if scaling_laws:
        from metagen.cli.demo_scaling import scaling_laws_command

        ctx.exit(scaling_laws_command(
            out=out, plot_path=plot_path, json_path=json_path, problems=problems, ns=ns,
            backend=backend, temperature=temperature, max_tokens=max_tokens, seed=seed,
            searches=searches, step_ns=step_ns, confidence=confidence, reward=reward,
            prm_kind=prm_kind, concurrency=concurrency, force_resume=force_resume,
            remote=remote))
    problems = DEFAULT_PROBLEMS if problems is None else problems
    settings = preset.DemoSettings(
        problems=problems, ns=parse_ns(ns or DEFAULT_NS, "ns"), temperature=temperature,
        max_tokens=max_tokens, seed=seed, confidence=confidence, step_search=searches,
        step_ns=parse_ns(step_ns, "step_ns"), prm=prm_kind, reward=reward)
    plot_path = str(plot_path or Path(out) / "metagen_demo.png")
    for flag, target in (("plot", plot_path), ("json", json_path)):
        check_target(flag, target)
    model = ({"base_url": remote["base_url"], "model": remote["model"], "revision": None}
             if remote else {"path": str(preset.testbed_model("policy")), "backend": backend})
    console = Console()
    start = time.perf_counter()
    with quiet_remote_logs(), Bars(console) as bars:
        reports = preset.run_demo(
            settings, out, model=model, concurrency=concurrency, force_resume=force_resume,
            load_generator=(lambda: open_remote(remote)) if remote
            else (lambda: preset.load_testbed_policy(backend)),
            loaders=preset.testbed_loaders(settings), progress=bars.progress)
    elapsed = time.perf_counter() - start
    results = [report for report, _ in reports.values()]
    rows = curve_rows(results)
    backends = sorted({b for r in results for b in r["provenance"]["backends"]}) or ["?"]
    title = (f"{problems} held-out testbed problems, backend {', '.join(backends)}, "
             f"T={temperature}")
    console.print(results_table(rows, title=title))
    plot = write_plot(rows, plot_path, title=title)
    console.print(f"plot: {plot}")
    if json_path:
        written = write_json_atomic(json_path, {"problems": problems, "results": rows})
        console.print(f"json: {written}")
    for name, (report, _) in reports.items():
        acc = report["accounting"]
        console.print(f"run {Path(out) / name}: {report['status']}, {acc['done']} of "
                      f"{acc['n_items_total']} problems done"
                      + (f", failed samples by reason {report['failures_by_reason']}"
                         if report["failures_by_reason"] else ""))
    console.print(f"total {elapsed:.1f} s")
    ctx.exit(max(code for _, code in reports.values()))


def check_target(flag: str, path: str | None) -> None:
    """Before any work: ``path`` (a file to write at the end) is not a folder and its folder is
    writable; ``InvalidParameterError`` naming ``flag`` otherwise."""
    if path is None:
        return
    from metagen.eval.preflight import check_output_dir

    if Path(path).is_dir():
        raise InvalidParameterError(flag, path, "is a folder; give a file path")
    check_output_dir(Path(path).parent, 0, name=flag)


class Bars:
    """One rich progress bar per run (problems done of those left to do)."""

    def __init__(self, console: Any) -> None:
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        self.bars = Progress(TextColumn("{task.description}"), BarColumn(),
                             TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(),
                             console=console, transient=False)
        self.tasks: dict[str, Any] = {}

    def __enter__(self) -> Bars:
        self.bars.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.bars.__exit__(*exc)

    def progress(self, name: str) -> Any:
        def update(done: int, total: int) -> None:
            if name not in self.tasks:
                self.tasks[name] = self.bars.add_task(f"{name}: problems", total=total)
            self.bars.update(self.tasks[name], completed=done, total=total)
        return update
