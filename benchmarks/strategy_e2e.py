"""Workload F: whole strategies end to end on the testbed, only the backend differs.

    python -m benchmarks.strategy_e2e [--problems 100] [--n 16] [--quick] [--json PATH]
        [--backends metagen,vllm,llama.cpp] [--strategies best_of_n,step_beam_search]
    [--vllm-block-size 128] [--logs DIR]

Runs each meta-generator over the first ``--problems`` held-out testbed problems on each backend
(:mod:`benchmarks.e2e_backends`: metagen's engine in-process, vLLM's CPU server, llama-cpp-python's
server) and reports, side by side in one run, wall seconds (and each server's over metagen's on
the same strategy), generated tokens, prompt tokens sent, what the backend says it prefilled
(prompt tokens its requests carried, served from its prefix cache, computed:
:mod:`benchmarks.prefill_counters`) and the fraction solved.

The strategies are the library's own, run as ``metagen eval`` runs a strategy at one N
(:func:`~metagen.eval.direct.spec_item`) under ``metagen demo``'s configs
(:func:`~metagen.eval.demo.demo_configs`: temperature 0.8, 160 tokens, seed 0, each run seeded
per problem): ``best_of_n`` (N samples, the testbed ORM as the outcome reward) and
``step_beam_search`` (N samples a step, the testbed ORM's step confidence as the process reward,
as ``metagen demo --prm likelihood``; steps are lines). The scorers run in-process, loaded once by
:func:`~metagen.eval.demo.testbed_loaders`. Problems run one after another; each
(strategy, backend) cell gets a freshly started backend after one untimed warm-up call (a prompt
that shares nothing with the problems), so no cache carries over from another cell; a server's
startup is reported apart (``backends``), never in the wall time. A backend whose environment is
missing is skipped with the command that installs it. Timings are reported, never asserted.
"""

from __future__ import annotations

import datetime
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks.e2e_backends import BACKENDS, Backend, missing, open_backend
from metagen.errors import InvalidParameterError

STRATEGIES = ("best_of_n", "step_beam_search")
WARMUP_PROMPT = "Warm up:"


@dataclass(slots=True, frozen=True)
class Settings:
    """Workload F's sizes and selection; validated on construction."""

    problems: int = 100
    n: int = 16
    backends: tuple[str, ...] = BACKENDS
    strategies: tuple[str, ...] = STRATEGIES
    vllm_block_size: int | None = None

    def __post_init__(self) -> None:
        sizes = [("problems", self.problems), ("n", self.n)] + (
            [] if self.vllm_block_size is None else [("vllm_block_size", self.vllm_block_size)])
        for name, value in sizes:
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidParameterError(name, value, "must be a positive integer")
        for name, given, known in (("backends", self.backends, BACKENDS),
                                   ("strategies", self.strategies, STRATEGIES)):
            if not given or any(x not in known for x in given) or len(set(given)) < len(given):
                raise InvalidParameterError(name, ",".join(given),
                                            f"must be distinct names among {', '.join(known)}")


QUICK = {"problems": 3, "n": 4}


def eval_configs(settings: Settings) -> dict[str, Any]:
    """Strategy -> the ``metagen demo`` run config it runs under, at the one N ``settings.n``."""
    from metagen.eval.demo import PARALLEL_RUN, SEARCH_RUN, demo_configs, testbed_model

    runs = demo_configs(demo_settings(settings), {"path": str(testbed_model("policy"))})
    return {"best_of_n": runs[PARALLEL_RUN], "step_beam_search": runs[SEARCH_RUN]}


def demo_settings(settings: Settings) -> Any:
    """The ``metagen demo`` settings of the run: its sampling, seed and scorers, at N alone."""
    from metagen.eval.demo import DemoSettings

    return DemoSettings(problems=settings.problems, ns=(settings.n,), parallel=("best_of_n",),
                        step_search=("step_beam_search",), step_ns=(settings.n,))


def load_scorers(settings: Settings, configs: Mapping[str, Any]) -> dict[str, Any]:
    """The scorers the strategies read, by store name, each loaded once (the demo's loaders)."""
    from metagen.eval.backends import load_backends
    from metagen.eval.demo import testbed_loaders

    loaders = testbed_loaders(demo_settings(settings))
    out: dict[str, Any] = {}
    for config in configs.values():
        out.update(load_backends(config, None, loaders).scorers)
    return out


def run_cell(strategy: str, backend: Backend, config: Any, task: Any, items: Sequence[Any],
             scorers: Mapping[str, Any]) -> dict[str, Any]:
    """``strategy`` over ``items`` on ``backend``, one problem after another: the row of the
    cell (wall seconds, the generator's usage, the backend's prefill, problems solved)."""
    from metagen.eval.direct import ACCURACY, spec_item

    gen = backend.generator
    gen.generate([WARMUP_PROMPT], config.params.with_(n=1, max_tokens=4, seed=0))
    usage, counters = gen.usage, backend.read()
    solved = failed = 0
    failures: dict[str, int] = {}
    start = time.perf_counter()
    for item in items:
        rows, failed_why = spec_item(strategy, task, item, gen, scorers, config.configured,
                                     config.params, config.ns, config.seed,
                                     config.options.get(strategy, {}))
        solved += int(sum(r.value for r in rows if r.metric == ACCURACY))
        failed += bool(failed_why)
        for _, reason in failed_why:
            failures[reason] = failures.get(reason, 0) + 1
    wall = time.perf_counter() - start
    used = gen.usage - usage
    prefill = backend.prefill(counters, backend.read())
    return {"strategy": strategy, "backend": backend.name, "n": config.ns[0],
            "problems": len(items), "solved": solved, "failed": failed, "failures": failures,
            "accuracy": solved / len(items), "wall_s": wall,
            "generated_tokens": used.generated_tokens, "prompt_tokens": used.prompt_tokens,
            "calls": used.calls, "prefill": prefill.to_dict()}


def with_ratios(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each row plus ``wall_over_metagen`` (its wall seconds over metagen's on the same strategy
    in this run; None without a metagen row) and ``computed_over_sent`` (the prompt tokens the
    backend computed over the prompt tokens sent; None when either is unknown or zero)."""
    base = {r["strategy"]: r["wall_s"] for r in rows if r["backend"] == "metagen"}
    out = []
    for r in rows:
        computed, sent = r["prefill"]["computed"], r["prompt_tokens"]
        ref = base.get(r["strategy"])
        out.append({**r, "wall_over_metagen": r["wall_s"] / ref if ref else None,
                    "computed_over_sent": computed / sent if computed is not None and sent
                    else None})
    return out


def run(settings: Settings, *, logs: Path | None = None,
        log: Callable[[str], None] = print) -> dict[str, Any]:
    """Run workload F; the JSON-ready result: ``meta``, ``rows`` (one per strategy and backend
    that ran, with ratios), ``backends`` (each cell's backend meta), ``skipped`` (backend ->
    why)."""
    import torch

    from benchmarks.engine_bench import cpu_info
    from metagen.eval.tasks import get_task

    logs = logs or Path(tempfile.mkdtemp(prefix="metagen-e2e-"))
    skipped = {b: why for b in settings.backends if (why := missing(b)) is not None}
    configs = eval_configs(settings)
    scorers = load_scorers(settings, {s: configs[s] for s in settings.strategies})
    threads = torch.get_num_threads()
    rows, backends = [], {}
    for strategy in settings.strategies:
        config = configs[strategy]
        task = config.formed(get_task("testbed"))
        items = task.items(config.data, config.limit)
        for name in settings.backends:
            if name in skipped:
                continue
            log(f"F: {strategy} on {name}, {len(items)} problems, n={settings.n}")
            with open_backend(name, n=settings.n, threads=threads, logs=logs / strategy,
                              vllm_block_size=settings.vllm_block_size) as backend:
                rows.append(run_cell(strategy, backend, config, task, items, scorers))
                backends[f"{strategy}/{name}"] = backend.meta
    params, seed = configs[settings.strategies[0]].params, configs[settings.strategies[0]].seed
    return {"meta": {"settings": asdict(settings), "threads": threads, "cpu": cpu_info(),
                     "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
                     "sampling": {"temperature": params.temperature,
                                  "max_tokens": params.max_tokens, "seed": seed},
                     "logs": str(logs)},
            "rows": with_ratios(rows), "backends": backends, "skipped": skipped}


def _num(value: Any, fmt: str = "{:d}") -> str:
    return "n/r" if value is None else fmt.format(value)


def print_table(result: Mapping[str, Any], console: Any = None) -> None:
    """A rich table of the rows; skipped backends after it. ``n/r``: not reported."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console(width=max(Console().width, 160))
    s = result["meta"]["settings"]
    table = Table(title=f"workload F: strategies end to end, {s['problems']} testbed problems, "
                        f"n={s['n']} ({result['meta']['threads']} threads)")
    for col in ("strategy", "backend", "wall s", "x metagen", "solved", "gen tok",
                "prompt tok sent", "backend prompt tok", "cached", "prefill computed",
                "computed/sent"):
        table.add_column(col)
    for r in result["rows"]:
        p = r["prefill"]
        table.add_row(r["strategy"], r["backend"], f"{r['wall_s']:.1f}",
                      _num(r["wall_over_metagen"], "{:.2f}x"),
                      f"{r['solved']}/{r['problems']} ({r['accuracy']:.2f})"
                      + (f", {r['failed']} failed" if r["failed"] else ""),
                      str(r["generated_tokens"]), str(r["prompt_tokens"]), _num(p["prompt"]),
                      _num(p["cached"]), _num(p["computed"]),
                      _num(r["computed_over_sent"], "{:.2f}"))
    console.print(table)
    for name, why in result["skipped"].items():
        console.print(f"skipped backend {name}: {why}")


def main(argv: list[str] | None = None) -> int:
    import argparse

    from benchmarks.engine_bench import write_json

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problems", type=int, default=None, help="testbed problems (100)")
    ap.add_argument("--n", type=int, default=None, help="samples per problem / per step (16)")
    ap.add_argument("--backends", default=",".join(BACKENDS))
    ap.add_argument("--strategies", default=",".join(STRATEGIES))
    ap.add_argument("--quick", action="store_true", help="3 problems, n 4")
    ap.add_argument("--json", default=None)
    ap.add_argument("--logs", default=None, help="folder for the servers' logs (a temp dir)")
    ap.add_argument("--vllm-block-size", type=int, default=None,
                    help="vLLM's KV block in tokens (its CPU default: 128)")
    args = ap.parse_args(argv)
    sizes = dict(QUICK) if args.quick else {}
    if args.problems is not None:
        sizes["problems"] = args.problems
    if args.n is not None:
        sizes["n"] = args.n
    try:
        settings = Settings(backends=_names(args.backends), strategies=_names(args.strategies),
                            vllm_block_size=args.vllm_block_size, **sizes)
    except InvalidParameterError as exc:
        ap.error(str(exc))
    result = run(settings, logs=Path(args.logs) if args.logs else None,
                 log=lambda m: print(m, file=sys.stderr))
    print_table(result)
    if args.json:
        write_json(result, args.json)
    return 0


def _names(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip())


if __name__ == "__main__":
    sys.exit(main())
