"""``metagen demo --scaling-laws``: test-time compute against model size, as a preset over the
demo's runs (:mod:`metagen.eval.demo`).

For each member of the testbed's policy family (:data:`~metagen.testbed.modeling.FAMILY`: the
draft, policy-s, the policy; the same training recipe at three sizes), the demo's two runs: a
parallel run (:data:`SCALING_PARALLEL` at N = :data:`SCALING_NS` over one sample set, the
testbed ORM as the reward) and a step-search run (:data:`SCALING_SEARCHES` and best-of-N by the
same process reward at N = :data:`SCALING_STEP_NS`), into ``OUT/scaling_laws/<model>/parallel``
and ``.../step_search``. Every size gets the same settings: the same items, run seed, reward and
PRM (the ORM is one verifier for all sizes); only the policy differs. Each folder is an ordinary
run folder, so a rerun resumes. Then the compute-optimal frontier over all those folders,
labelled by model name (the ``frontier`` given to :func:`run_scaling`; the command
passes :func:`metagen.cli.demo_scaling.scaling_frontier`): at each budget, which (size, strategy) pair
is best, fitted on one half of the items and scored on the other.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from metagen.eval.demo import DemoSettings, demo_configs, run_demo, testbed_model
from metagen.eval.runner import EvalConfig, Loader, Progress

SCALING_DIR = "scaling_laws"  # under --out: <model>/parallel, <model>/step_search
SCALING_PARALLEL = ("greedy", "best_of_n", "self_consistency", "weighted_vote")
SCALING_SEARCHES = ("step_beam_search",)
SCALING_NS = (1, 2, 4, 8, 16)
SCALING_STEP_NS = (4, 16)
#: 640 items: a fit fraction of 0.5 holds out ~320 of them for scoring the frontier (>= 300).
SCALING_PROBLEMS = 640

Frontier = Callable[..., tuple[dict[str, Any], str]]


def scaling_settings(*, problems: int = SCALING_PROBLEMS, ns: tuple[int, ...] = SCALING_NS,
                     step_ns: tuple[int, ...] = SCALING_STEP_NS,
                     step_search: tuple[str, ...] = SCALING_SEARCHES, seed: int = 0,
                     temperature: float = 0.8, max_tokens: int = 160, prm: str = "likelihood",
                     reward: str | None = None) -> DemoSettings:
    """The preset's settings, shared by every size: the parallel strategies
    :data:`SCALING_PARALLEL`, step searches ``step_search`` (at least one: the step-search run
    is part of the preset), no confidence strategies (the policy's own confidence would be a
    different verifier per size). Validated as :class:`DemoSettings` (typed errors)."""
    from metagen.errors import InvalidParameterError

    if not step_search:
        raise InvalidParameterError("step_search", step_search,
                                    "the scaling-laws preset needs at least one step search")
    return DemoSettings(problems=problems, ns=ns, parallel=SCALING_PARALLEL, step_ns=step_ns,
                        step_search=step_search, seed=seed, temperature=temperature,
                        max_tokens=max_tokens, prm=prm, reward=reward)


def family_models(backend: str, names: Sequence[str] | None = None) -> dict[str, dict[str, Any]]:
    """Model name -> the run configs' model description (its folder, ``backend``), for
    ``names`` (default the whole family, small to large). Every folder is checked before any
    run: a missing one is a ``ModelLoadError`` naming the model and the command that trains
    it."""
    from metagen.testbed.modeling import FAMILY

    return {name: {"path": str(testbed_model(name)), "backend": backend}
            for name in (names if names is not None else tuple(FAMILY))}


def scaling_folder(out: str | Path, name: str) -> Path:
    """The folder of model ``name``'s runs under ``out``."""
    return Path(out) / SCALING_DIR / name


def scaling_configs(settings: DemoSettings, models: Mapping[str, Mapping[str, Any]]
                    ) -> dict[str, dict[str, EvalConfig]]:
    """Model name -> run name -> config: the demo's runs (:func:`demo_configs`) per model,
    identical but for ``model``."""
    return {name: demo_configs(settings, model) for name, model in models.items()}


@dataclass(slots=True, frozen=True)
class ScalingRuns:
    """What :func:`run_scaling` did: model -> run name -> (results.json object, exit status),
    and the frontier's (report, text), None when a run was interrupted (no frontier then)."""

    reports: dict[str, dict[str, tuple[dict[str, Any], int]]]
    frontier: tuple[dict[str, Any], str] | None

    @property
    def code(self) -> int:
        """The highest exit status of the runs (0: all complete)."""
        return max(code for runs in self.reports.values() for _, code in runs.values())


def run_scaling(settings: DemoSettings, out: str | Path, *,
                models: Mapping[str, Mapping[str, Any]],
                load_generator: Callable[[str], Any], loaders: Mapping[str, Loader],
                plot_path: Path, frontier: Frontier, concurrency: int = 32,
                force_resume: bool = False,
                progress: Callable[[str], Progress] | None = None) -> ScalingRuns:
    """Run (or resume) each model's demo runs (:func:`~metagen.eval.demo.run_demo`) into
    :func:`scaling_folder`, small model first, then call ``frontier`` on every run folder
    labelled by model name.
    ``load_generator(name)`` loads model ``name``'s policy, once, on its first run;
    ``progress("<model>/<run>")`` gives a run's progress callback. A run stopped by a signal
    stops the preset before the frontier."""
    reports: dict[str, dict[str, tuple[dict[str, Any], int]]] = {}
    for name, model in models.items():
        reports[name] = run_demo(
            settings, scaling_folder(out, name), model=model,
            load_generator=partial(load_generator, name), loaders=loaders,
            concurrency=concurrency, force_resume=force_resume,
            progress=partial(_labelled, progress, name) if progress else None)
        if max(code for _, code in reports[name].values()) > 1:
            return ScalingRuns(reports, None)
    folders = {name: [scaling_folder(out, name) / run for run in runs]
               for name, runs in reports.items()}
    return ScalingRuns(reports, frontier(folders, plot_path=plot_path))


def _labelled(progress: Callable[[str], Progress], model: str, run: str) -> Progress:
    return progress(f"{model}/{run}")


def run_seconds(report: Mapping[str, Any]) -> float:
    """Wall seconds of a run's latest session (model loading included)."""
    times = report["times"]
    return float(times["ended_at"] - times["session_started_at"])
