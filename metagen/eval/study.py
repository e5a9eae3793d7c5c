"""A study file (``metagen eval --config study.yaml``): tasks x models x strategy sets x seeds,
each combination one resumable run folder, all checked before any model loads.

The file (YAML; paths relative to its folder)::

    out: results/study          # the output root (metagen eval --out overrides it)
    tasks: [testbed, {name: gsm8k, data: gsm8k_test.jsonl, limit: 50, label: gsm8k50}]
    models: [{path: models/policy}, {base_url: http://127.0.0.1:8000/v1, model: NAME}]
    runs:                       # strategy sets: one run each (a shared sample set)
      - {strategies: [self_consistency, best_of_n], reward: likelihood}
      - {strategies: [{name: step_beam_search, args: {width: 2}}], n: [1, 4], prm: likelihood}
    n: [1, 4, 16]               # the N list of a run without its own
    seeds: [0, 1]
    sampling: {temperature: 0.8, top_p: 1.0, max_tokens: 256}
    reward: likelihood          # the scorers of a run without its own
    prm: null
    concurrency: 16

Run ``tasks[t] x models[m] x runs[r] x seeds[s]`` goes to folder
``OUT/<task>/<model>/<strategies>/seed-<seed>`` (each name its entry's ``label``, by default the
task name, the model folder's name or the served model, the strategies joined by ``+``); two
entries of a list with one folder name are refused. It is exactly the run of the
``metagen eval`` command :attr:`StudyRun.argv` (same run key): a rerun of the study resumes
each folder. A strategy set of ``greedy`` alone runs at N = 1 unless it gives its own ``n``.

Every refusal is an ``InvalidParameterError`` naming the dotted key
(``runs[1].strategies[0].args.width``): the entries are read by
:mod:`metagen.eval.study_parts`, then each run's :class:`~metagen.eval.config.EvalConfig` is
built (its own checks) with the scorers and feedback its strategies need.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from metagen.errors import InvalidParameterError
from metagen.eval.config import PRM, EvalConfig
from metagen.eval.runrows import REWARD
from metagen.eval.study_keys import at, integer, items, join, known_keys, mapping, number, text
from metagen.eval.study_parts import (StudyModel, StudyStrategies, StudyTask, parse_model,
                                      parse_strategies, parse_task, resolve, scorer_spec)

STUDY_KEYS = ("out", "tasks", "models", "runs", "n", "seeds", "sampling", "reward", "prm",
              "concurrency")
SAMPLING_KEYS = ("temperature", "top_p", "max_tokens")
DEFAULT_SAMPLING = {"temperature": 0.8, "top_p": 1.0, "max_tokens": 256}  # metagen eval's
DEFAULT_NS = (1, 4, 16)
DEFAULT_CONCURRENCY = 16


@dataclass(frozen=True, slots=True)
class StudyRun:
    """One run of a study: ``key`` names its entries (``tasks[0] x models[0] x runs[1] x
    seeds[0]``), ``folder`` its run folder, ``name`` that folder relative to the output root,
    ``config`` its checked settings, ``argv`` the ``metagen eval`` arguments that run it."""

    key: str
    name: str
    folder: Path
    config: EvalConfig
    argv: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Study:
    """A checked study file: its output root and runs, in file order (tasks, then models, then
    strategy sets, then seeds)."""

    path: Path
    out: Path
    runs: tuple[StudyRun, ...]


def load_study(path: str | Path, out: str | Path | None = None) -> Study:
    """Read and check the study file ``path`` (``out`` overrides its ``out``). A file that is
    missing or not YAML raises ``InvalidParameterError`` naming ``config``."""
    import yaml

    file = Path(path)
    try:
        data = yaml.safe_load(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidParameterError("config", str(path), f"unreadable: {exc}") from None
    except yaml.YAMLError as exc:
        raise InvalidParameterError("config", str(path), f"is not YAML: {exc}") from None
    if not isinstance(data, Mapping):
        raise InvalidParameterError("config", str(path), "must hold a mapping (out, tasks, "
                                    "models, runs, ...)")
    return parse_study(data, file.resolve(), out)


def parse_study(data: Mapping[str, Any], path: Path, out: str | Path | None = None) -> Study:
    """The study in ``data``, a parsed study file at ``path`` (see the module docstring)."""
    base = path.parent
    known_keys(mapping(data, "config"), "", STUDY_KEYS, ("tasks", "models", "runs"))
    if out is None and data.get("out") is None:
        raise InvalidParameterError("out", None, "give the output root (out: in the file, or "
                                    "--out DIR)")
    root = Path(resolve(Path.cwd(), str(out))) if out is not None else \
        Path(resolve(base, text(data["out"], "out")))
    tasks = [parse_task(v, join("tasks", i), base)
             for i, v in enumerate(items(data["tasks"], "tasks"))]
    models = [parse_model(v, join("models", i), base)
              for i, v in enumerate(items(data["models"], "models"))]
    sets = [parse_strategies(v, join("runs", i))
            for i, v in enumerate(items(data["runs"], "runs"))]
    _distinct_folders(tasks)
    _distinct_folders(models)
    _distinct_folders(sets)
    seeds = [integer(v, join("seeds", i)) for i, v in enumerate(items(data.get("seeds", [0]),
                                                                       "seeds"))]
    if len(set(seeds)) != len(seeds):
        raise InvalidParameterError("seeds", seeds, "must be distinct")
    ns = tuple(integer(v, join("n", i), 1) for i, v in enumerate(items(data.get("n", list(
        DEFAULT_NS)), "n")))
    sampling = _sampling(data.get("sampling", {}))
    concurrency = integer(data.get("concurrency", DEFAULT_CONCURRENCY), "concurrency", 1)
    defaults = {role: text(data[role], role) if data.get(role) is not None else None
                for role in ("reward", "prm")}
    runs = [_run(task, model, strategies, seed, seed_key=join("seeds", k), root=root,
                 base=base, ns=ns, sampling=sampling,
                 defaults=defaults, concurrency=concurrency)
            for task in tasks for model in models for strategies in sets
            for k, seed in enumerate(seeds)]
    return Study(path, root, tuple(runs))


def _sampling(value: Any) -> Any:
    from metagen.types import SamplingParams

    given = mapping(value, "sampling")
    known_keys(given, "sampling", SAMPLING_KEYS)
    values = {**DEFAULT_SAMPLING, **given}
    with at("sampling"):
        return SamplingParams(temperature=number(values["temperature"], "temperature"),
                              top_p=number(values["top_p"], "top_p"),
                              max_tokens=integer(values["max_tokens"], "max_tokens", 1))


def _distinct_folders(entries: Sequence[StudyTask | StudyModel | StudyStrategies]) -> None:
    seen: dict[str, str] = {}
    for entry in entries:
        if entry.folder in seen:
            raise InvalidParameterError(entry.key, entry.folder, f"its folder name is "
                                        f"{seen[entry.folder]}'s too: give one a label")
        seen[entry.folder] = entry.key


def _run(task: StudyTask, model: StudyModel, strategies: StudyStrategies, seed: int, *,
         seed_key: str, root: Path, base: Path, ns: tuple[int, ...], sampling: Any,
         defaults: Mapping[str, str | None], concurrency: int) -> StudyRun:
    """One run: its EvalConfig built and checked (with the scorers and feedback it needs)."""
    from metagen.eval.backends import check_loaders
    from metagen.eval.catalog import GREEDY
    from metagen.eval.direct import check_feedback
    from metagen.eval.selectors import CONFIDENCE
    from metagen.eval.tasks import get_task

    scorers: dict[str, tuple[str, str | None]] = {}  # role -> (its key, canonical spec)
    for role in ("reward", "prm"):
        given = getattr(strategies, role)
        key = join(strategies.key, role) if given is not None else role
        spec = given if given is not None else defaults[role]
        scorers[role] = (key, scorer_spec(spec, role, key, base, model) if spec else None)
    n_key = join(strategies.key, "n") if strategies.n is not None else "n"
    run_ns = strategies.n if strategies.n is not None else ns
    if set(strategies.names) == {GREEDY} and strategies.n is None:
        run_ns = (1,)  # greedy alone is N = 1 (as metagen eval without --n)
    elif set(strategies.names) == {GREEDY} and run_ns != (1,):
        raise InvalidParameterError(n_key, list(run_ns), "greedy is one temperature-0 sample "
                                    "per item, N = 1 only")
    rename = {"strategy": join(strategies.key, "strategies"),
              "strategy_arg": join(strategies.key, "strategies"), "n": n_key, "seed": seed_key,
              "limit": join(task.key, "limit"), "data": join(task.key, "data"),
              "reward": scorers["reward"][0], "prm": scorers["prm"][0], CONFIDENCE: model.key,
              **{k: join("sampling", k) for k in SAMPLING_KEYS}}
    with at(strategies.key, rename):
        config = EvalConfig(task=task.name, model=model.config_model(),
                            strategy=strategies.names, ns=run_ns, sampling=sampling, seed=seed,
                            strategy_args=strategies.args, reward=scorers["reward"][1],
                            prm=scorers["prm"][1], data=task.data, limit=task.limit)
        check_loaders(config, {REWARD: _given(scorers["reward"][1]),
                               PRM: _given(scorers["prm"][1]),
                               CONFIDENCE: _given(model.path)})
        check_feedback(config.strategies, get_task(task.name))
    name = f"{task.folder}/{model.folder}/{strategies.folder}/seed-{seed}"
    folder = root / name
    sample = config.sampling
    argv = (*task.argv(), *model.argv(), *strategies.argv(),
            "--n", ",".join(map(str, config.ns)), "--seed", str(seed),
            "--temperature", repr(sample.temperature), "--top-p", repr(sample.top_p),
            "--max-tokens", str(sample.max_tokens),
            *(["--reward", str(config.reward)] if config.reward else []),
            *(["--prm", str(config.prm)] if config.prm else []),
            "--concurrency", str(concurrency), "--out", str(folder))
    return StudyRun(f"{task.key} x {model.key} x {strategies.key} x {seed_key}", name, folder,
                    config, argv)


def _given(value: str | None) -> Any:
    """A stand-in loader for :func:`~metagen.eval.backends.check_loaders`: present when the
    scorer is configured."""
    return (lambda: None) if value is not None else None
