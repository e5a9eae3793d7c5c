"""``metagen eval TASK``: run a strategy over a task at every N, resumably, into ``--out DIR``.

``--model PATH`` loads a local model folder; ``--base-url URL --model NAME`` samples from an
OpenAI-compatible server. The output folder is checked and locked (a second process on it
is refused) and its run key compared before any model is loaded; a rerun of the same command
resumes (done items are skipped), a changed setting or model content is refused unless
``--force-resume``. Exit status: 0 complete, 1 some items failed, 2 a usage or load error, a
folder in use, or a write to the folder that failed (disk full), 128 + signal when SIGINT /
SIGTERM stopped it (``results.json`` then says ``partial``)."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from collections.abc import Callable
from typing import Any, TypeVar

import click

from metagen.cli.flags import float_flag, int_flag, key_values, parse_ns
from metagen.cli.generate import QUANTIZATION_FLAG
from metagen.cli.remote import (open_remote, pop_remote, quiet_remote_logs, refuse_local_only,
                                remote_options)
from metagen.errors import InvalidParameterError
from metagen.generators.loading import engine_backend

T = TypeVar("T")
LOCAL_RAY = "local"  # --ray with no ADDRESS


def greedy_ns(strategy: str, ns: tuple[int, ...], given: bool) -> tuple[int, ...]:
    """The budgets of a run: ``ns``, or ``(1,)`` for a run of ``greedy`` alone (one
    temperature-0 sample per item: it has N = 1 only) when ``--n`` was not given. A ``--n``
    other than 1 for ``greedy`` alone raises ``InvalidParameterError`` naming ``n`` (it would
    run N = 1 only, not what was asked)."""
    if {s.strip() for s in strategy.split(",")} != {"greedy"}:
        return ns
    if not given:
        return (1,)
    if ns != (1,):
        raise InvalidParameterError("n", ",".join(map(str, ns)), "greedy is one temperature-0 "
                                    "sample per item, N = 1 only: give --n 1, or add a "
                                    "sampling strategy (e.g. --strategy "
                                    "greedy,self_consistency) for larger N")
    return ns


def parse_strategy_args(entries: tuple[str, ...]) -> dict[str, Any]:
    """``--strategy-arg`` entries (:func:`~metagen.cli.flags.key_values`)."""
    return key_values(entries, "strategy_arg")


class RegistryHelpOption(click.Option):
    """An option whose help text is made when help is shown (``help_text()``, from the
    strategy registry), so a strategy module added later is listed without editing this
    file, and importing the CLI walks no strategy module."""

    def __init__(self, *args: Any, help_text: Callable[[], str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.help_text = help_text

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        self.help = self.help_text()
        return super().get_help_record(ctx)


def _catalog() -> Any:
    from metagen.eval import catalog
    return catalog


@click.command("eval")
@click.argument("task", required=False)
@click.option("--config", "config_file", default=None, metavar="STUDY.yaml",
              help="Run a study file (tasks x models x strategy sets x seeds, one run folder "
              "each; see the README's Evaluate section) instead of one run: TASK and the "
              "per-run flags are then refused, --out overrides its output root.")
@click.option("--strategy", required=False, cls=RegistryHelpOption,
              help_text=lambda: _catalog().strategies_help())
@click.option("--n", "ns", default="1,4,16", show_default=True,
              help="Budgets N: max(N) samples per item, smaller N derived by subsampling.")
@click.option("--reward", default=None, metavar="SPEC",
              help="The outcome reward (best_of_n, weighted_vote): a model folder (a "
              "classification or value head; any other causal LM scores by its confidence), "
              "likelihood (the --model folder's own confidence), likelihood+FOLDER, "
              "judge+FOLDER (an LM judge's P(Yes)), or a reward model server: "
              "pooling+URL?model=NAME[&positive_label=I&labels=A,B&tokenizer=FOLDER] (vLLM "
              "/pooling), classify+URL?model=NAME&... (vLLM /classify), json+URL?model=NAME "
              "(POST /score; metagen serve --orm answers all three where it can); on "
              "humaneval/mbpp also 'unit-tests': the problem's hidden tests in the sandbox, an "
              "ORACLE (it selects with the tests that grade, so best_of_n then measures pass@N, "
              "not a fair selector).")
@click.option("--prm", default=None, metavar="SPEC",
              help="The process reward (the step searches): a model folder (a classification "
              "or value head), PRESET+FOLDER (math-shepherd, rlhflow-llama3.1-8b-prm, "
              "qwen2.5-math-prm), likelihood (the --model folder's step confidence), "
              "likelihood+FOLDER, pooling+URL?model=NAME&tokenizer=FOLDER[&format=PRESET] or "
              "json+URL?model=NAME.")
@click.option("--strategy-arg", multiple=True, metavar="KEY=VALUE", cls=RegistryHelpOption,
              help_text=lambda: _catalog().strategy_args_help())
@click.option("--data", default=None, metavar="PATH",
              help="The task's data file (gsm8k, math500: JSONL; humaneval: HumanEval.jsonl.gz; "
              "mbpp, mbpp_0shot (the task alone, no examples): mbpp.jsonl). The code tasks run "
              "model-written code in the sandbox and need METAGEN_ALLOW_CODE_EXECUTION=1.")
@click.option("--limit", default=None, metavar="K", help="At most K items.")
@click.option("--seed", default="0", show_default=True)
@click.option("--temperature", default="0.8", show_default=True)
@click.option("--top-p", default="1.0", show_default=True)
@click.option("--max-tokens", default="256", show_default=True)
@click.option("--backend", default="auto", show_default=True,
              help="Local backend: auto, local (the engine) or hf.")
@QUANTIZATION_FLAG
@click.option("--deterministic", is_flag=True, default=False,
              help="Batch-invariant engine steps (built-in engine): every sample the same bits "
              "whatever --concurrency, the batch and the prefix cache; slower wide steps.")
@click.option("--out", default=None, metavar="DIR",
              help="Run folder (store and results.json); with --config, the output root.")
@click.option("--concurrency", default="16", show_default=True, metavar="K",
              help="Items in flight at once over the one backend (the engine and servers; the "
              "transformers backend does one at a time). Results do not depend on it.")
@click.option("--force-resume", is_flag=True, default=False,
              help="Reuse a folder whose run was made with other settings.")
@click.option("--ray", "ray_address", is_flag=False, flag_value=LOCAL_RAY, default=None,
              metavar="[ADDRESS]",
              help="Fan items out over Ray workers (pip install 'metagen[ray]'): no ADDRESS "
              "starts a local Ray with --ray-workers workers (shut down at the end); ADDRESS "
              "(e.g. auto) joins a running cluster. With a comma-separated --base-url list, "
              "worker i samples from URL i mod len.")
@click.option("--ray-workers", default="2", show_default=True, metavar="K",
              help="Ray workers (actors), each with its own backend.")
@click.option("--prompt-format", default=None, metavar="text|chat",
              help="The task's prompt form: text (a base model's prompt) or chat (messages "
              "through the model's chat template: the benchmark's usual instruction, e.g. "
              "'Please reason step by step, and put your final answer within \\boxed{}.', "
              "examples as turns). Default: chat for a --model folder whose tokenizer has a "
              "chat template, else text; with --base-url, text unless chat is asked (the "
              "server then applies its template at /v1/chat/completions).")
@click.option("--think-end-token", default=None, metavar="TOKEN",
              help="A thinking model's end of thinking (e.g. </think>): answers are extracted "
              "and graded from the text after it; a completion that never closes its thinking "
              "has no answer.")
@click.option("--max-thinking-tokens", default=None, metavar="N",
              help="Thinking budget, generated on top of --max-tokens (each sample may run "
              "to their sum); implies --think-end-token </think> unless given.")
@remote_options
@click.pass_context
def eval_command(ctx: click.Context, task: str | None, config_file: str | None,
                 strategy: str | None, ns: str, reward: str | None,
                 prm: str | None,
                 strategy_arg: tuple[str, ...], data: str | None, limit: str | None, seed: str,
                 temperature: str, top_p: str, max_tokens: str, backend: str,
                 quantization: str | None, deterministic: bool, out: str | None,
                 concurrency: str, force_resume: bool, ray_address: str | None,
                 ray_workers: str, prompt_format: str | None, think_end_token: str | None,
                 max_thinking_tokens: str | None, **flags: Any) -> None:
    """Evaluate STRATEGY (one, or several comma-separated over one sample set) on TASK (gsm8k,
    math500, testbed, humaneval, mbpp, mbpp_0shot) at every N of --n; or, with --config
    STUDY.yaml, every run of a study file (metagen.cli.study)."""
    from metagen.eval import EvalConfig, get_task, run_eval
    from metagen.eval.chat_template import resolve_prompt_format
    from metagen.scorers.scorer_spec import canonical_spec, parse_scorer_spec
    from metagen.types import SamplingParams

    if config_file is not None:
        from metagen.cli.study import run_study
        ctx.exit(run_study(ctx, config_file, out, force_resume))
    from metagen.cli.study import single_run
    task, strategy, out = single_run(task, strategy, out)
    local_path = None
    if flags["base_url"] is None:
        local_path, flags["served_model"] = flags["served_model"], None
        if local_path is None:
            raise InvalidParameterError("model", None, "give --model PATH (a model folder) or "
                                        "--base-url URL --model NAME")
    remote = pop_remote(flags)
    if remote:
        refuse_local_only({"quantization": quantization, "deterministic": deterministic or None},
                          "applies to a local model; a server chooses its own weights and "
                          "kernels where it is launched")
    else:
        backend = engine_backend(backend, quantization)
        if deterministic:
            backend = engine_backend(backend, True, "deterministic")
    reward_spec = parse_scorer_spec(reward, "reward", "reward") if reward else None
    prm_spec = parse_scorer_spec(prm, "prm", "prm") if prm else None
    for flag, parsed in (("reward", reward_spec), ("prm", prm_spec)):
        if parsed is not None and parsed.kind == "likelihood" and parsed.target is None \
                and local_path is None:
            raise InvalidParameterError(flag, "likelihood", "bare likelihood is the --model "
                                        "folder's confidence; with --base-url give "
                                        "likelihood+FOLDER")
    model = ({"path": str(Path(local_path).resolve()), "backend": backend,
              **({"quantization": quantization} if quantization else {}),
              **({"deterministic": True} if deterministic else {})} if local_path
             else {"base_url": remote["base_url"], "model": remote["model"], "revision": None})
    config = EvalConfig(
        task=task, model=model, strategy=strategy,
        ns=greedy_ns(strategy, parse_ns(ns),
                     ctx.get_parameter_source("ns") is not click.core.ParameterSource.DEFAULT),
        sampling=SamplingParams(temperature=_given(float_flag("temperature", temperature)),
                                top_p=_given(float_flag("top_p", top_p)),
                                max_tokens=_given(int_flag("max_tokens", max_tokens))),
        seed=_given(int_flag("seed", seed)), strategy_args=parse_strategy_args(strategy_arg),
        reward=canonical_spec(reward_spec, local_path) if reward_spec else None,
        prm=canonical_spec(prm_spec, local_path) if prm_spec else None, data=data,
        limit=int_flag("limit", limit),
        prompt_format=resolve_prompt_format(prompt_format, local_path),
        think_end_token=think_end_token,
        max_thinking_tokens=int_flag("max_thinking_tokens", max_thinking_tokens))

    urls = [u.strip() for u in remote["base_url"].split(",")] if remote else []
    if len(urls) > 1 and ray_address is None:
        raise InvalidParameterError("base_url", remote["base_url"], "a list of servers needs "
                                    "--ray (worker i samples from URL i mod len)")
    workers = int_flag("ray_workers", ray_workers)

    def load_generator(index: int = 0) -> Any:
        if remote:
            return open_remote({**remote, "base_url": urls[index % len(urls)]})
        from metagen.cli.generate import load_generator as load
        return load(backend, str(local_path), quantization=quantization,
                    deterministic=deterministic or None)[1]

    spec = get_task(task)

    def load_reward() -> Any:
        from metagen.scorers.resolve import resolve_reward
        return resolve_reward(config.reward, default_folder=local_path,
                              unit_tests=lambda: unit_test_oracle(spec, data, config.limit)) \
            if config.reward else None

    def load_prm() -> Any:
        from metagen.scorers.resolve import resolve_prm
        return resolve_prm(str(config.prm), default_folder=local_path)

    def load_confidence() -> Any:
        from metagen.scorers import LikelihoodVerifier
        return LikelihoodVerifier.from_pretrained(str(local_path), batch_size=64)

    bar: Any = None

    def progress(done: int, total: int) -> None:
        nonlocal bar
        if bar is None:  # shown only once there is work: an early error stays one line
            bar = click.progressbar(length=total, label="items", file=sys.stderr,
                                    show_eta=True, show_pos=True)
        bar.update(1)

    pool = None
    session: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
    if ray_address is not None:
        from metagen.eval.ray_runner import RayPool, ray_session
        pool = RayPool(_given(workers), load_generator,
                       load_reward=load_reward if reward else None,
                       load_prm=load_prm if prm else None,
                       load_confidence=load_confidence if local_path else None)
        session = ray_session(None if ray_address == LOCAL_RAY else ray_address, pool.workers)
    try:
        with quiet_remote_logs(), session:
            report, code = run_eval(config, spec, out, load_generator=load_generator,
                                    load_reward=load_reward if reward else None,
                                    load_prm=load_prm if prm else None,
                                    load_confidence=load_confidence if local_path else None,
                                    force_resume=force_resume, progress=progress, pool=pool,
                                    concurrency=_given(int_flag("concurrency", concurrency)))
    finally:
        if bar is not None:
            bar.render_finish()
    _print_summary(report)
    ctx.exit(code)


UNIT_TESTS = "unit-tests"  # --reward: the code task's own tests as an oracle reward


def unit_test_oracle(spec: Any, data: str | None, limit: int | None) -> Any:
    """A :class:`~metagen.scorers.UnitTestVerifier` on the task's items (their hidden tests);
    ``InvalidParameterError`` naming ``reward`` for a task without unit tests."""
    from metagen.scorers import UnitTestVerifier
    from metagen.tasks.code_problem import CodeProblem

    items = spec.items(data, limit)
    if not items or not all(isinstance(it.problem, CodeProblem) for it in items):
        raise InvalidParameterError("reward", UNIT_TESTS,
                                    f"task {spec.name} has no unit tests (humaneval, mbpp)")
    return UnitTestVerifier({it.prompt: it.problem for it in items})


def _given(value: T | None) -> T:
    """A flag with a default is never None."""
    if value is None:
        raise AssertionError("a flag with a default was None")
    return value


def _print_summary(report: dict[str, Any]) -> None:
    acc = report["accounting"]
    for row in report["results"]:
        click.echo(f"{row['strategy']:>18} N={row['n']:<4} {row['metric']:<9} "
                   f"{row['mean']:.4g} ± {row['stderr']:.4g}  ({row['items']} items)")
    click.echo(f"status {report['status']}: {acc['n_items_total']} items = {acc['done']} done "
               f"+ {acc['failed']} failed + {acc['skipped']} skipped")
    if report["failures_by_reason"]:
        reasons = ", ".join(f"{k}: {v}" for k, v in report["failures_by_reason"].items())
        click.echo(f"failed samples by reason (retried, never stored): {reasons}")
