"""The demo pipeline: greedy, then ONE sampling call, ONE ORM pass, then every strategy at every N.

``run_demo(DemoConfig(problems=...))`` on the testbed (held-out ``test`` split, fixed seed):

1. greedy: one generate call, temperature 0, for all problems;
2. sampling: one generate call with ``n = max(ns)`` samples per problem for all problems;
3. the testbed ORM (a generative verifier: an independently trained model's confidence)
   scores every successful sample once (batched);
4. the generator's own model scores every successful sample once by its weakest token
   (:class:`~metagen.scorers.LikelihoodVerifier`, ``confidence``), for ``best_of_n_confidence``
   and ``weighted_vote_confidence`` (self-certainty / DeepConf-style selection);
5. when PRM step searches are asked for (``step_search``, e.g. ``FULL_STEP_SEARCHES``), the
   PRM (``prm``: the trained testbed PRM, or the ORM's step confidence) also scores every
   successful sample once (min over steps), for ``best_of_n_prm``;
6. :func:`~metagen.demo.evaluate.evaluate_prefixes` evaluates best_of_n (ORM), self_consistency,
   weighted_vote (ORM-weighted), mbr (answer-match utility unless ``mbr_utility`` says
   otherwise) and best_of_n_prm at each N on nested prefixes of the samples;
7. each step search runs at each of ``step_ns`` (:mod:`metagen.demo.prm`).

Every row gets ``by_difficulty`` when the problems have a ``difficulty`` (testbed problems do).

Everything the run needs (generator, ORM, problems, grader) can be injected, which is how the
tests run it on a scripted generator.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from metagen.demo.difficulty import difficulties_of, with_difficulty
from metagen.demo.evaluate import CachedReward, DemoProblem, evaluate_prefixes
from metagen.demo.prm import (
    FULL_STEP_SEARCHES,
    LEGACY_NAMES,
    STEP_SEARCH_NAMES,
    PRMOutcome,
    step_search_rows,
)
from metagen.errors import InvalidParameterError
from metagen.scorers.base import UtilityLike
from metagen.strategies import MBR, BestOfN, SelfConsistency, WeightedVote
from metagen.strategies.selection import Selector
from metagen.strategies.parallel import check_counts, failure_reason
from metagen.types import SamplingParams, Usage

Stage = Callable[[str, int, int], None]  # (stage, done, total)
STRATEGIES = ("greedy", "best_of_n", "self_consistency", "weighted_vote", "mbr")
CONFIDENCE_STRATEGIES = ("best_of_n_confidence", "weighted_vote_confidence")
PRM_STRATEGIES = ("best_of_n_prm",) + FULL_STEP_SEARCHES  # only with a PRM (step_search)


@dataclass(slots=True, frozen=True)
class DemoConfig:
    """Demo settings; validated on construction.

    ``step_search``: PRM step searches to run (names of ``FULL_STEP_SEARCHES``; the legacy
    ``step_beam`` is accepted and its rows keep that name), each at every scale in ``step_ns``;
    non-empty also adds ``best_of_n_prm``. ``prm``: the process reward for those — the trained
    testbed PRM (``"trained"``) or the step confidence of the testbed's verifier, the ORM model
    (``"likelihood"``, :class:`~metagen.scorers.LikelihoodVerifier`; needs an ORM that has
    ``score_steps``). ``confidence``: add the
    ``CONFIDENCE_STRATEGIES`` rows (one more scoring pass over the samples)."""

    problems: int = 100
    ns: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
    temperature: float = 0.8
    max_tokens: int = 160
    seed: int = 0
    split: Literal["train", "val", "test"] = "test"
    backend: Literal["local", "hf"] = "local"
    mbr_utility: str = "answer"
    score_chunk: int = 512
    step_search: tuple[str, ...] = ()
    step_ns: tuple[int, ...] = (4, 16)
    prm: Literal["trained", "likelihood"] = "likelihood"
    confidence: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.problems, int) or not 1 <= self.problems <= 100_000:
            raise InvalidParameterError("problems", self.problems, "must be in [1, 100000]")
        if not self.ns or any(not isinstance(n, int) or n < 1 for n in self.ns) \
                or list(self.ns) != sorted(set(self.ns)):
            raise InvalidParameterError("ns", self.ns, "must be increasing positive integers")
        if self.backend not in ("local", "hf"):
            raise InvalidParameterError("backend", self.backend, "must be 'local' or 'hf'")
        if self.prm not in ("trained", "likelihood"):
            raise InvalidParameterError("prm", self.prm, "must be 'trained' or 'likelihood'")
        if self.split not in ("train", "val", "test"):
            raise InvalidParameterError("split", self.split, "must be train, val or test")
        SamplingParams(n=max(self.ns), temperature=self.temperature, max_tokens=self.max_tokens)
        if self.step_search:
            for name in self.step_search:
                if name not in STEP_SEARCH_NAMES and name not in LEGACY_NAMES:
                    raise InvalidParameterError("step_search", name,
                                                f"must be among {list(STEP_SEARCH_NAMES)}")
            if not self.step_ns or any(not isinstance(n, int) or n < 1 for n in self.step_ns):
                raise InvalidParameterError("step_ns", self.step_ns, "must be positive integers")


KV_CACHE_BYTES = 512 << 20  # the demo keeps ~3,000 sequences in flight; the engine's 64 MiB
# default made it preempt and recompute (measured: 357 s instead of 60 s for 960 sequences)


def load_generator(backend: str, path: Any) -> tuple[Any, str]:
    """(generator, backend used): the engine's LocalGenerator (with a KV cache sized for the
    demo's batch) when asked and available, else HFGenerator."""
    if backend == "local":
        try:
            from metagen.generators.local import LocalGenerator
        except ImportError:
            pass
        else:
            return LocalGenerator.from_pretrained(path, kv_cache_bytes=KV_CACHE_BYTES), "local"
    from metagen.generators.hf import HFGenerator
    return HFGenerator.from_pretrained(path), "hf"


def run_demo(config: DemoConfig, *, generator: Any = None, orm: Any = None,
             problems: Sequence[Any] | None = None, format_prompt: Callable[[Any], str] | None =
             None, grade: Callable[[str, Any], bool] | None = None,
             extract: Callable[[str], Any] | None = None,
             match: Callable[[Any, Any], bool] | None = None, prm: Any = None,
             verifier: Any = None, on_stage: Stage | None = None) -> dict[str, Any]:
    """Run the demo; returns ``{"problems": int, "results": [rows], "info": {...}}``.

    ``verifier`` (else a :class:`~metagen.scorers.LikelihoodVerifier` on the testbed policy)
    scores the samples for the confidence rows when ``config.confidence``.
    A PRM (``prm``, else the one ``config.prm`` names) is loaded and used only when ``config.step_search`` is
    non-empty: then ``best_of_n_prm`` rows join the N rows and one row per (search, step n)
    follows. Step-search rows are named as given in ``config.step_search``.
    """
    stage = on_stage or (lambda name, done, total: None)
    prm_injected = prm is not None
    info: dict[str, Any] = {}
    if problems is None or format_prompt is None or grade is None:
        from metagen import testbed
        problems = problems or testbed.make_problems(config.split, config.problems, config.seed)
        format_prompt = format_prompt or testbed.format_prompt
        grade = grade or testbed.grade
    if generator is None:
        generator, info["backend"] = load_generator(config.backend, _testbed_model("policy"))
    if orm is None:  # the testbed ORM: a generative verifier, scored by its confidence
        from metagen.scorers import LikelihoodVerifier
        orm = LikelihoodVerifier.from_pretrained(_testbed_model("orm"), batch_size=64)
    prompts = [format_prompt(p) for p in problems]
    answers = [p.answer for p in problems]
    difficulties = difficulties_of(problems)

    stage("greedy", 0, 1)
    greedy_row, greedy_usage = _greedy(generator, prompts, answers, grade, config,
                                       difficulties)
    stage("greedy", 1, 1)
    n_max = max(config.ns)
    stage("sampling", 0, 1)
    before = generator.usage
    samples = check_counts(generator.generate(prompts, SamplingParams(
        n=n_max, temperature=config.temperature, max_tokens=config.max_tokens,
        seed=config.seed)), len(prompts), n_max, type(generator).__name__)
    sampling = generator.usage - before
    stage("sampling", 1, 1)
    scores, scoring = _score_all(orm, prompts, samples, config.score_chunk, stage)
    demo_problems = [DemoProblem(p, a, s, o) for p, a, s, o in
                     zip(prompts, answers, samples, scores)]
    scored_by: dict[str, Usage] = {}
    if config.confidence and verifier is None:
        from metagen.scorers import LikelihoodVerifier
        verifier = LikelihoodVerifier.from_pretrained(_testbed_model("policy"), batch_size=64)
    if config.confidence:
        conf_scores, spent = _score_all(verifier, prompts, samples, config.score_chunk, stage,
                                        name="confidence scoring", who="LikelihoodVerifier")
        scored_by.update(dict.fromkeys(CONFIDENCE_STRATEGIES, spent))
        for d, cs in zip(demo_problems, conf_scores):
            d.confidence = cs
    if config.step_search:
        if prm is None and config.prm == "likelihood":
            prm = orm  # the verifier's step confidence: its weakest token so far
        elif prm is None:
            from metagen.scorers import HFProcessRewardModel
            prm = HFProcessRewardModel.from_pretrained(_testbed_model("prm"), batch_size=64)
        prm_scores, scored_by["best_of_n_prm"] = _score_all(
            PRMOutcome(prm, "min"), prompts, samples, config.score_chunk, stage,
            name="PRM scoring", who="PRM")
        for d, ps in zip(demo_problems, prm_scores):
            d.prm = ps
    reward = CachedReward(demo_problems)
    utility: UtilityLike | str = config.mbr_utility
    if utility == "answer":
        from metagen.scorers import AnswerMatchUtility
        utility = AnswerMatchUtility(extract=extract, match=match)
    selectors: dict[str, Selector] = {
        "best_of_n": BestOfN(reward),
        "self_consistency": SelfConsistency(extract, match),
        "weighted_vote": WeightedVote(reward, extract=extract, match=match),
        "mbr": MBR(utility)}
    if config.confidence:
        conf = CachedReward(demo_problems, "confidence")
        selectors["best_of_n_confidence"] = BestOfN(conf)
        selectors["weighted_vote_confidence"] = WeightedVote(conf, extract=extract, match=match)
    if config.step_search:
        selectors["best_of_n_prm"] = BestOfN(CachedReward(demo_problems, "prm"))
    stage("selection", 0, 1)
    rows = evaluate_prefixes(demo_problems, selectors, config.ns, grade, sampling=sampling,
                             scoring=scoring, uses_orm={"best_of_n", "weighted_vote"},
                             scored_by=scored_by, difficulties=difficulties)
    stage("selection", 1, 1)
    if config.step_search:
        rows += step_search_rows(config.step_search, config.step_ns, generator, prompts,
                                 answers, grade, prm, temperature=config.temperature,
                                 seed=config.seed, stage=stage, difficulties=difficulties)
    info.update({"greedy_usage": greedy_usage.to_dict(), "sampling_usage": sampling.to_dict(),
                 "scoring_usage": scoring.to_dict(), "failed_samples": sum(
                     failure_reason(c) is not None for row in samples for c in row)})
    if config.confidence:
        info["confidence_scoring_usage"] = scored_by["best_of_n_confidence"].to_dict()
    if config.step_search:
        info["prm"] = "injected" if prm_injected else config.prm
        info["prm_scoring_usage"] = scored_by["best_of_n_prm"].to_dict()
    return {"problems": len(problems), "results": [greedy_row] + rows, "info": info}


def _testbed_model(name: str) -> Any:
    from metagen.errors import ModelLoadError
    from metagen.testbed import model_path

    path = model_path(name)  # type: ignore[arg-type]
    if not (path / "config.json").is_file():
        raise ModelLoadError(f"the testbed {name} model is missing at {path}; train it with "
                             f"`metagen testbed train --only {name}`")
    return path


def _greedy(generator: Any, prompts: list[str], answers: list[Any],
            grade: Callable[[str, Any], bool], config: DemoConfig,
            difficulties: Sequence[str] | None = None) -> tuple[dict, Usage]:
    start, before = time.perf_counter(), generator.usage
    outs = check_counts(generator.generate(prompts, SamplingParams(
        temperature=0.0, max_tokens=config.max_tokens)), len(prompts), 1,
        type(generator).__name__)
    usage = generator.usage - before
    correct = [failure_reason(row[0]) is None and bool(grade(row[0].text, a))
               for row, a in zip(outs, answers)]
    return (with_difficulty({"strategy": "greedy", "n": 1,
                             "accuracy": sum(correct) / len(prompts),
                             "generated_tokens": usage.generated_tokens,
                             "flops": usage.generator_flops,
                             "seconds": time.perf_counter() - start}, correct, difficulties),
            usage)


def _score_all(orm: Any, prompts: list[str], samples: list[list[Any]], chunk: int,
               stage: Stage, name: str = "scoring", who: str = "ORM"
               ) -> tuple[list[list[float | None]], Usage]:
    """Outcome score of every successful sample (None for failed ones), in chunks for progress
    (stage ``name``)."""
    from metagen.scorers import check_scores, usage_of

    pairs = [(i, j) for i, row in enumerate(samples) for j, c in enumerate(row)
             if failure_reason(c) is None]
    out: list[list[float | None]] = [[None] * len(row) for row in samples]
    start, before = time.perf_counter(), usage_of(orm)
    for k in range(0, len(pairs), chunk):
        part = pairs[k:k + chunk]
        got = check_scores(orm.score([prompts[i] for i, _ in part],
                                     [samples[i][j].text for i, j in part]), len(part),
                           who=who)
        for (i, j), s in zip(part, got):
            out[i][j] = s
        stage(name, min(k + chunk, len(pairs)), len(pairs))
    usage = usage_of(orm) - before
    usage = Usage(**{**usage.to_dict(), "wall_time": time.perf_counter() - start})
    return out, usage
