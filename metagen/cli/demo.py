"""``metagen demo``: test-time compute scaling on the testbed (greedy, best-of-N with the ORM,
self-consistency, weighted voting, MBR, and best-of-N / weighted voting by the policy's own
confidence, at N = 1..32), with a table, a PNG plot and JSON.
``--full`` adds best-of-N with the PRM and every PRM step search (slower).

``--base-url URL --model NAME`` samples from the testbed policy served by an OpenAI-compatible
server (e.g. ``vllm serve <the testbed policy folder>``) instead of loading it; the ORM, the PRM
and the confidence verifier stay local testbed models (``--prm`` names one of those, not a
path or a server: remote reward models are not supported here)."""

from __future__ import annotations

import time

import click

from metagen.cli.remote import open_remote, pop_remote, quiet_remote_logs, remote_options
from metagen.errors import InvalidParameterError

DEFAULT_PROBLEMS = 100  # sized for ~3 minutes on 2 CPU cores with the engine


def _parse_ns(text: str, name: str = "ns") -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise InvalidParameterError(name, text, "must be comma-separated integers") from None


@click.command("demo")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), default=None,
              help="Write {problems, results} here.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False),
              default="metagen_demo.png", show_default=True,
              help="PNG plot: accuracy against generated tokens and against FLOPs.")
@click.option("--problems", type=int, default=DEFAULT_PROBLEMS, show_default=True,
              help="Held-out testbed problems.")
@click.option("--backend", type=click.Choice(["local", "hf"]), default="local",
              show_default=True, help="Engine (falls back to hf when absent) or transformers.")
@click.option("--ns", default="1,2,4,8,16,32", show_default=True, help="Values of N.")
@click.option("--temperature", type=float, default=0.8, show_default=True)
@click.option("--max-tokens", type=int, default=160, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--mbr-utility", type=click.Choice(["answer", "chrf", "bleu", "rouge"]),
              default="answer", show_default=True)
@click.option("--full", is_flag=True, default=False,
              help="Also run best-of-N with the PRM and every PRM step search "
              "(step_beam_search, dvts, best_first, mcts, rebase) at each --step-ns; "
              "slower: each search is its own run over all problems.")
@click.option("--step-search", default="", help="A subset of the --full PRM step searches, "
              "comma-separated, e.g. step_beam_search,dvts (each a separate run; slower).")
@click.option("--step-ns", default="4,16", show_default=True,
              help="Scales n for --full / --step-search (samples per search step).")
@click.option("--confidence", is_flag=True, default=False,
              help="Also best-of-N and weighted voting by the policy's own confidence in each "
              "sample (its weakest token; one more scoring pass).")
@click.option("--prm", "prm_kind", type=click.Choice(["likelihood", "trained"]),
              default="likelihood", show_default=True,
              help="Process reward of --full / --step-search: the step confidence of the "
              "testbed's verifier (the ORM model, LikelihoodVerifier) or the trained testbed PRM "
              "(always local, also with --base-url).")
@remote_options
@click.pass_context
def demo(ctx: click.Context, json_path: str | None, plot_path: str, problems: int, backend: str,
         ns: str, temperature: float, max_tokens: int, seed: int, mbr_utility: str, full: bool,
         step_search: str, step_ns: str, confidence: bool, prm_kind: str,
         **flags: object) -> None:
    """Compare parallel meta-generators at N = 1..32 on held-out testbed problems.

    With --full (or --step-search) the testbed PRM also ranks the same samples
    (best_of_n_prm) and PRM step searches join the table and plot; this takes several times
    longer than the quick demo."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        Progress,
        SpinnerColumn,
        TaskID,
        TextColumn,
        TimeElapsedColumn,
    )

    from metagen.demo import DemoConfig, run_demo
    from metagen.demo.prm import FULL_STEP_SEARCHES, LEGACY_NAMES
    from metagen.demo.report import results_table, write_json, write_plot

    remote = pop_remote(flags)
    if remote and ctx.get_parameter_source("backend") == click.core.ParameterSource.COMMANDLINE:
        raise InvalidParameterError("backend", backend, "--base-url samples from the server; "
                                    "drop --backend or --base-url")
    searches = FULL_STEP_SEARCHES if full else tuple(dict.fromkeys(
        LEGACY_NAMES.get(x.strip(), x.strip()) for x in step_search.split(",") if x.strip()))
    config = DemoConfig(problems=problems, ns=_parse_ns(ns), temperature=temperature,
                        max_tokens=max_tokens, seed=seed, backend=backend,  # type: ignore
                        mbr_utility=mbr_utility, step_search=searches,
                        step_ns=_parse_ns(step_ns, "step_ns"), prm=prm_kind,  # type: ignore
                        confidence=confidence)
    console = Console()
    labels = {"greedy": "greedy decoding", "sampling": f"sampling {max(config.ns)} per problem",
              "scoring": "ORM scoring", "confidence scoring": "confidence scoring (policy)",
              "PRM scoring": "PRM scoring (best-of-N, min)",
              "selection": "selecting at every N",
              "step search": "PRM step searches"}
    start = time.perf_counter()
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                  TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(),
                  console=console, transient=False) as progress:
        progress.add_task("loading models", total=1)
        tasks: dict[str, TaskID] = {}

        def on_stage(name: str, done: int, total: int) -> None:
            if not tasks:
                progress.update(progress.task_ids[0], completed=1)
            if name not in tasks:
                tasks[name] = progress.add_task(labels.get(name, name), total=total)
            progress.update(tasks[name], completed=done, total=total)

        if remote:
            with quiet_remote_logs(), open_remote(remote) as policy:
                report = run_demo(config, generator=policy, on_stage=on_stage)
            report["info"]["backend"] = "openai"
        else:
            report = run_demo(config, on_stage=on_stage)
    elapsed = time.perf_counter() - start
    info = report["info"]
    title = (f"{report['problems']} held-out testbed problems, backend "
             f"{info.get('backend', '?')}, T={temperature}")
    console.print(results_table(report["results"], title=title))
    plot = write_plot(report["results"], plot_path, title=title)
    console.print(f"plot: {plot}")
    if json_path:
        console.print(f"json: {write_json(report, json_path)}")
    if info.get("failed_samples"):
        console.print(f"failed samples (excluded): {info['failed_samples']}")
    console.print(f"total {elapsed:.1f} s")
