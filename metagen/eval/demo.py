"""``metagen demo`` as a preset over the runner: test-time compute scaling on the testbed.

The demo is one :func:`~metagen.eval.runner.run_eval` run, and a second one with PRM step
searches: task ``testbed`` (its held-out problems), the testbed policy, its ORM as the reward,
strategies :data:`PARALLEL` (plus :data:`CONFIDENCE_STRATEGIES` when asked) at N = 1..32 over ONE
sample set, into ``OUT/parallel`` (``DemoSettings.reward``: another outcome reward, any scorer
spec); the step searches (``DemoSettings.step_search``) at each of
``step_ns`` into ``OUT/step_search``, with best-of-N ranked by the same process reward
(:data:`PRM_BASELINE`: each sample's step scores, min over steps) at the same N, the searches'
baseline at equal samples. Each folder is an ordinary run folder (SQLite store,
``results.json`` with provenance), so a rerun resumes and ``metagen eval`` can extend it. The
testbed models are loaded by :func:`testbed_loaders`, through the one scorer resolver
(:mod:`metagen.scorers.resolve`); everything can be injected (tests).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from metagen.errors import InvalidParameterError
from metagen.eval.runner import CONFIDENCE, PRM, REWARD, EvalConfig, Loader, Progress, run_eval
from metagen.eval.tasks import TESTBED_POOL, get_task
from metagen.types import SamplingParams

PARALLEL = ("greedy", "best_of_n", "self_consistency", "weighted_vote", "mbr")
CONFIDENCE_STRATEGIES = ("best_of_n_confidence", "weighted_vote_confidence")
PARALLEL_RUN, SEARCH_RUN = "parallel", "step_search"  # the run folders under --out
PRM_BASELINE = "best_of_n_prm"  # in the step-search run: best-of-N by the searches' own PRM
KV_CACHE_BYTES = 512 << 20  # ~1,000 sequences in flight; the engine's 64 MiB default preempts


def full_step_searches() -> tuple[str, ...]:
    """The step searches of ``--full``: the registry's searches on a PRM run at each N
    (:func:`~metagen.strategies.step_scaling.step_searches`)."""
    from metagen.strategies.step_scaling import step_searches

    return step_searches()


@dataclass(slots=True, frozen=True)
class DemoSettings:
    """The demo's knobs; validated on construction (the runs' own checks follow in
    :func:`demo_configs`). ``parallel``: the strategies of the parallel run (a subset of
    :data:`PARALLEL`). ``reward``: the outcome reward, a scorer spec
    (:mod:`metagen.scorers.scorer_spec`; None: the testbed ORM). ``prm``: the step searches'
    process reward, the step confidence of the testbed ORM (``likelihood``), a trained testbed
    PRM by its keyword (:data:`TESTBED_PRMS`: ``trained``, ``head``) or a scorer spec. A bare
    ``likelihood`` spec reads the testbed ORM."""

    problems: int = 100
    ns: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
    parallel: tuple[str, ...] = PARALLEL
    temperature: float = 0.8
    max_tokens: int = 160
    seed: int = 0
    confidence: bool = False
    step_search: tuple[str, ...] = ()
    step_ns: tuple[int, ...] = (4, 16)
    prm: str = "likelihood"
    reward: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.problems, int) or not 1 <= self.problems <= TESTBED_POOL:
            raise InvalidParameterError("problems", self.problems,
                                        f"must be in [1, {TESTBED_POOL}]")
        for name in self.parallel:
            if name not in PARALLEL:
                raise InvalidParameterError("parallel", name,
                                            f"must be among {', '.join(PARALLEL)}")
        for name in self.step_search:
            if name not in full_step_searches():
                raise InvalidParameterError("step_search", name,
                                            f"must be among {', '.join(full_step_searches())}")
        from metagen.scorers.scorer_spec import parse_scorer_spec

        if self.prm not in TESTBED_PRMS:
            parse_scorer_spec(self.prm, "prm", "prm")
        if self.reward is not None:
            parse_scorer_spec(self.reward, "reward", "reward")


#: --prm keywords for the testbed's trained PRMs: the classifier (``trained``, which does not
#: rank a problem's solutions) and the step-value head over the ORM's and policy-s's
#: confidences (``head``).
TESTBED_PRMS: dict[str, str] = {"trained": "prm", "head": "prm-head"}


def scorer_specs(settings: DemoSettings) -> tuple[str, str]:
    """The (reward, prm) specs of the demo's runs as their run keys hold them (folders
    absolute; a bare ``likelihood`` is the testbed ORM's): what :func:`demo_configs` stores and
    :func:`testbed_loaders` loads."""
    from metagen.scorers.scorer_spec import canonical_spec, parse_scorer_spec

    def canonical(spec: str, role: Any, flag: str) -> str:
        return canonical_spec(parse_scorer_spec(spec, role, flag), default=testbed_model("orm"))

    reward = canonical(settings.reward or str(testbed_model("orm")), "reward", "reward")
    named = TESTBED_PRMS.get(settings.prm)
    prm = canonical(str(testbed_model(named)) if named else settings.prm, "prm", "prm")
    return reward, prm


def testbed_model(name: str) -> Path:
    """The folder of a testbed model; ``ModelLoadError`` saying how to train a missing one."""
    from metagen.testbed.modeling import require_model

    return require_model(name)


def demo_configs(settings: DemoSettings, model: Mapping[str, Any]) -> dict[str, EvalConfig]:
    """Run folder name -> the run's config: :data:`PARALLEL_RUN` always, :data:`SEARCH_RUN`
    with step searches. ``model`` describes the policy (a local path or a server)."""
    sampling = SamplingParams(temperature=settings.temperature, max_tokens=settings.max_tokens)
    common: dict[str, Any] = dict(task="testbed", model=dict(model), sampling=sampling,
                                  seed=settings.seed, limit=settings.problems)
    strategies = settings.parallel + (CONFIDENCE_STRATEGIES if settings.confidence else ())
    reward, prm = scorer_specs(settings)
    runs = {PARALLEL_RUN: EvalConfig(strategy=strategies, ns=settings.ns, reward=reward,
                                     **common)}
    if settings.step_search:
        runs[SEARCH_RUN] = EvalConfig(strategy=(PRM_BASELINE, *settings.step_search),
                                      ns=settings.step_ns, prm=prm, **common)
    return runs


def testbed_loaders(settings: DemoSettings) -> dict[str, Loader]:
    """Loaders of the demo's scorers by store name, through the one resolver: the reward
    (default the testbed ORM, a generative verifier scored by its confidence), the PRM
    ``settings.prm`` names (default the ORM's step confidence: its weakest token so far), the
    policy's own confidence."""
    def reward() -> Any:
        from metagen.scorers.resolve import resolve_reward
        return resolve_reward(scorer_specs(settings)[0])

    def prm() -> Any:
        from metagen.scorers.resolve import resolve_prm
        return resolve_prm(scorer_specs(settings)[1], batch_size=64)

    def confidence() -> Any:
        from metagen.scorers import LikelihoodVerifier
        return LikelihoodVerifier.from_pretrained(testbed_model("policy"), batch_size=64)

    return {REWARD: reward, PRM: prm, CONFIDENCE: confidence}


def load_testbed_policy(backend: str, name: str = "policy") -> Any:
    """The testbed policy (or another member ``name`` of the policy family): the engine (with a
    KV cache sized for the demo's concurrency) when ``backend`` is ``local`` and the engine is
    installed, else transformers; loaded by :func:`~metagen.generators.loading.load_generator`."""
    from metagen.generators.loading import available_backends, load_generator

    path = str(testbed_model(name))
    if backend == "local" and "local" in available_backends():
        return load_generator("local", path, kv_cache_bytes=KV_CACHE_BYTES)[1]
    return load_generator("hf", path)[1]


def run_demo(settings: DemoSettings, out: str | Path, *, model: Mapping[str, Any],
             load_generator: Callable[[], Any], loaders: Mapping[str, Loader],
             concurrency: int = 32, force_resume: bool = False,
             progress: Callable[[str], Progress] | None = None
             ) -> dict[str, tuple[dict[str, Any], int]]:
    """Run (or resume) the demo's runs into folders under ``out``; run name -> (its
    results.json object, its exit status, as :func:`~metagen.eval.runner.run_eval`). The
    policy is loaded once, on first use, and shared by the runs; ``progress(run name)`` gives
    each run's progress callback. A run stopped by a signal stops the demo."""
    task = get_task("testbed")
    generator: list[Any] = []

    def policy() -> Any:
        if not generator:
            generator.append(load_generator())
        return generator[0]

    reports: dict[str, tuple[dict[str, Any], int]] = {}
    for name, config in demo_configs(settings, model).items():
        reports[name] = run_eval(
            config, task, Path(out) / name, load_generator=policy,
            load_reward=loaders.get(REWARD), load_prm=loaders.get(PRM),
            load_confidence=loaders.get(CONFIDENCE), force_resume=force_resume,
            progress=progress(name) if progress else None, concurrency=concurrency)
        if reports[name][1] > 1:
            break
    return reports
