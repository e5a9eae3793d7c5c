"""``metagen testbed``: train, evaluate and look at the testbed's models."""

from __future__ import annotations

import json
import time
from pathlib import Path

import click

from metagen.testbed.modeling import FAMILY, NAMES


@click.group()
def testbed() -> None:
    """The arithmetic word-problem testbed and its models (policy, draft, ORM, PRM)."""
    import os

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        import transformers

        transformers.logging.set_verbosity_error()
        transformers.utils.logging.disable_progress_bar()
    except Exception:  # noqa: BLE001 - logging setup only
        pass


@testbed.command()
@click.option("--only", type=click.Choice(NAMES), default=None,
              help="Train one model (ORM/PRM read the policy already in --out). Without it: "
              "policy, draft, ORM, PRM; the family's middle size policy-s (the policy's recipe "
              "at 0.92 M parameters) only with --only policy-s; the reviser (the policy fine-tuned to "
              "revise an attempt, from --out's policy or the shipped one) only with --only revise; "
              "the step-value head over the ORM's and policy-s's confidences (reads both in --out) "
              "only with --only prm-head.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--out", "out", type=click.Path(file_okay=False, path_type=Path),
              default=Path("testbed_models"), show_default=True,
              help="Folder for the model folders (never the shipped models' folder, unless "
              "--overwrite-shipped).")
@click.option("--overwrite-shipped", is_flag=True,
              help="Allow --out to be the package's own models/ folder (replaces the shipped "
              "models).")
@click.option("--threads", type=int, default=1, show_default=True,
              help="torch threads (1 is fastest on a busy shared machine).")
def train(only: str | None, seed: int, out: Path, overwrite_shipped: bool, threads: int) -> None:
    """Reproduce the testbed models from scratch, seeded, with a progress bar."""
    import torch
    from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

    from metagen.testbed.pipeline import check_out_root, train_all

    root = check_out_root(out, overwrite_shipped)  # before any work
    torch.set_num_threads(threads)
    t0 = time.time()
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TextColumn("loss {task.fields[loss]:.4f}"), TimeElapsedColumn()) as bar:
        tasks: dict[str, TaskID] = {}

        def progress(stage: str, step: int, total: int, loss: float) -> None:
            if stage not in tasks:
                tasks[stage] = bar.add_task(stage, total=total, loss=0.0)
            bar.update(tasks[stage], completed=step, loss=loss)

        times = train_all(only=only, seed=seed, out_root=root, progress=progress,
                          overwrite_shipped=overwrite_shipped)
    for name, secs in times.items():
        click.echo(f"{name}: {secs / 60:.1f} min -> {root / name}")
    click.echo(f"total: {(time.time() - t0) / 60:.1f} min")


@testbed.command(name="eval")
@click.option("--split", type=click.Choice(["train", "val", "test"]), default="test", show_default=True)
@click.option("--limit", type=click.IntRange(1, 100_000), default=500, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--sc", "sc_k", type=click.IntRange(0, 64), default=0, show_default=True,
              help="Also sample K per problem: pass@K and self-consistency@K.")
@click.option("--temperature", type=click.FloatRange(0.05, 2.0), default=0.8, show_default=True)
@click.option("--rm-limit", type=click.IntRange(1, 100_000), default=200, show_default=True,
              help="Problems (x2 samples) used for the ORM/PRM AUROC.")
@click.option("--models", type=click.Path(file_okay=False, path_type=Path), default=None)
@click.option("--threads", type=int, default=1, show_default=True)
@click.option("--family", is_flag=True,
              help="Instead: greedy accuracy by difficulty of each size of the policy family "
              "(draft, policy-s, policy), one row each, on the same --limit problems.")
@click.option("--model", "family_models", multiple=True, type=click.Choice(tuple(FAMILY)),
              help="Like --family, for these members only (repeatable).")
@click.option("--rank-k", type=click.IntRange(2, 64), default=None,
              help="Instead: how each reward model ranks K policy samples of each of --limit "
              "problems: pooled and within-problem AUROC.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def eval_(split: str, limit: int, seed: int, sc_k: int, temperature: float, rm_limit: int,
          models: Path | None, threads: int, family: bool, family_models: tuple[str, ...],
          rank_k: int | None, as_json: bool) -> None:
    """Greedy accuracy overall and by difficulty, draft agreement, ORM/PRM AUROC; or, with
    --family / --model, the family's greedy accuracy by difficulty."""
    import torch

    from metagen.testbed.eval_all import evaluate_all
    from metagen.testbed.modeling import MODELS_DIR

    torch.set_num_threads(threads)
    if family or family_models:
        _family_eval(family_models or tuple(FAMILY), split, limit, seed,
                     models or MODELS_DIR, as_json)
        return
    if rank_k:
        _rank_eval(models or MODELS_DIR, split, limit, rank_k, temperature, seed, as_json)
        return
    res = evaluate_all(split=split, limit=limit, seed=seed, rm_limit=min(rm_limit, limit),
                       sc_k=sc_k, temperature=temperature, root=models or MODELS_DIR)
    if as_json:
        click.echo(json.dumps(res))
        return
    click.echo(f"greedy accuracy on {res['n']} {split} problems: {res['greedy_accuracy']:.3f}")
    for d, acc in res["by_difficulty"].items():
        click.echo(f"  difficulty {d}: {acc:.3f}")
    for key in ("draft_agreement", f"pass@{sc_k}", f"sc@{sc_k}", "rm_sample_accuracy", "orm_auroc",
                "orm_auroc_ref", "prm_step_auroc", "prm_min_auroc", "prm_last_auroc",
                "prm_min_auroc_ref", "prm_last_auroc_ref", "orm_pair_accuracy",
                "prm_min_pair_accuracy", "confidence_auroc", "confidence_pair_accuracy"):
        if key in res:
            click.echo(f"{key}: {res[key]:.3f}")


def _rank_eval(root: Path, split: str, limit: int, k: int, temperature: float, seed: int,
               as_json: bool) -> None:
    from metagen.testbed.modeling import load_model
    from metagen.testbed.problems import make_problems
    from metagen.testbed.ranking import rank_eval, testbed_rankers

    problems = make_problems(split, limit, seed=seed)  # type: ignore[arg-type]
    res = rank_eval(load_model("policy", root / "policy"), testbed_rankers(root), problems,
                    k=k, temperature=temperature, seed=seed)
    res.update(split=split, n=limit)
    if as_json:
        click.echo(json.dumps(res))
        return
    click.echo(f"{res['samples']} policy samples ({k} per problem, T={temperature}) of {limit} "
               f"{split} problems, {res['sample_accuracy']:.3f} correct")
    click.echo(f"{'scorer':<22}{'AUROC':>8}{'within':>8}{'pairs':>8}{'mixed problems':>16}")
    for name, m in res.items():
        if isinstance(m, dict):
            click.echo(f"{name:<22}{m['auroc']:>8.3f}{m['within_auroc']:>8.3f}"
                       f"{m['pair_accuracy']:>8.3f}{m['problems']:>16}")


def _family_eval(names: tuple[str, ...], split: str, limit: int, seed: int, root: Path,
                 as_json: bool) -> None:
    from metagen.testbed.family_eval import family_greedy, family_text

    rows = family_greedy(names, split=split, limit=limit, seed=seed, root=root)
    if as_json:
        click.echo(json.dumps({"split": split, "n": limit, "family": rows}))
        return
    click.echo(f"greedy accuracy of the policy family on {limit} {split} problems:")
    click.echo(family_text(rows))
    for row in rows:
        click.echo(f"{row['model']}: {row['seconds']:.1f} s")


@testbed.command(name="sample")
@click.option("--n", type=click.IntRange(1, 100), default=3, show_default=True)
@click.option("--split", type=click.Choice(["train", "val", "test"]), default="test", show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--temperature", type=click.FloatRange(0.0, 2.0), default=0.0, show_default=True)
def sample_(n: int, split: str, seed: int, temperature: float) -> None:
    """Show a few problems with the policy's solutions, graded."""
    import torch

    from metagen.testbed.modeling import load_model
    from metagen.testbed.problems import format_prompt, grade, make_problems
    from metagen.testbed.sampler import sample

    torch.set_num_threads(1)
    probs = make_problems(split, n, seed=seed)  # type: ignore[arg-type]
    outs = sample(load_model("policy"), [format_prompt(p) for p in probs],
                  temperature=temperature, seed=seed)
    for p, o in zip(probs, outs):
        verdict = "correct" if grade(o, p.answer) else f"wrong (answer {p.answer})"
        click.echo(f"[difficulty {p.difficulty}] {p.question}\n{o}\n-> {verdict}\n")
