"""Every strategy ``metagen`` exports runs on :class:`OpenAIGenerator` against a real HTTP server
on loopback (:class:`FaultServer` with a scripted vLLM-like policy, :mod:`.scripted_policy`).

The scripted policy solves ``Q`` in three steps separated by ``"\\n\\n"``: ``Step 1: idea X.``,
``Step 2: idea X.``, ``The answer is N.`` with ``X = "abc"[seed % 3]`` and ``N`` 5 for ``c``,
else 7. Parallel strategies get whole solutions, step searches one step per request (cut at the
step stop, which vLLM names in ``stop_reason``). Per strategy the test checks what the server saw
(requests, seeds, stops, continuation prompts), the chosen answer, that ``Result.usage`` counts
exactly the tokens the server reported (with FLOPs unknown: NaN, never 0), and that samples
failed by scripted HTTP 500s (retries exhausted) are left out and counted.

:func:`test_every_exported_strategy_is_covered` fails when ``metagen`` exports a strategy that
has no case here and is not covered by the registry-wide ``test_openai_registry``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("httpx", reason="needs httpx: pip install 'metagen[openai]'")

import metagen  # noqa: E402
from metagen.errors import CapabilityError  # noqa: E402
from metagen.generators.openai import OpenAIGenerator  # noqa: E402
from metagen.strategies import BestOfN, Budget, Feedback, LMStepValue, StepDefinition  # noqa: E402
from metagen.strategies.refine_prompts import (  # noqa: E402
    CRITIQUE_TEMPLATE,
    FEEDBACK_TEMPLATE,
    REFINE_TEMPLATE,
)
from metagen.types import Result, SamplingParams  # noqa: E402
from tests.scorers.conftest import prm_path  # noqa: E402,F401  (the tiny real PRM's folder)

from .fault_server import FaultServer  # noqa: E402
from .scripted_policy import ScriptedPolicy  # noqa: E402

Q = "Q: what is 3 + 4?\n"
STOP = "\n\n"
STEPS = StepDefinition(stop=(STOP,), final_marker="The answer is", max_step_tokens=12)
PARAMS = SamplingParams(temperature=0.7, max_tokens=32, seed=0)


def solution(prompt: str, seed: int) -> str:
    """The scripted policy: the rest of the solution after the steps already in ``prompt``."""
    if prompt.rstrip().endswith("Review:"):  # a self-refine critique
        return "NO ISSUES." if "The answer is 5" in prompt else "The answer is wrong."
    depth = min(prompt.count(STOP), 2)
    choice = "abc"[seed % 3]
    lines = [f"Step {d}: idea {choice}." for d in range(depth + 1, 3)]
    return STOP.join(lines + [f"The answer is {5 if choice == 'c' else 7}."])


def answer_of(text: str) -> str | None:
    found = re.findall(r"The answer is (\d+)", text)
    return found[-1] if found else None


def fails(*seeds: int) -> Callable[[dict[str, Any]], bool]:
    """Scripted HTTP 500 for the root-prompt requests with these seeds (every attempt)."""
    return lambda body: body.get("prompt") == Q and body.get("seed") in seeds


class Run:
    """A scripted server, its policy and an OpenAIGenerator on it (one retry, tiny backoff)."""

    def __init__(self, fail: Callable[[dict[str, Any]], bool] | None = None,
                 num_params: int | None = None) -> None:
        self.policy = ScriptedPolicy(solution, fail)
        self.server = FaultServer(self.policy).start()
        self.gen = OpenAIGenerator(self.server.url, "m", dialect="vllm", max_retries=1,
                                   backoff_base=0.001, backoff_cap=0.002, timeout=20.0,
                                   num_params=num_params)

    def close(self) -> None:
        self.gen.close()
        self.server.stop()

    def generation_posts(self) -> list[dict[str, Any]]:
        return [s.body for s in self.server.posts if not s.body.get("echo")]


@pytest.fixture
def make():
    runs: list[Run] = []

    def factory(fail=None, num_params=None) -> Run:
        runs.append(Run(fail, num_params))
        return runs[-1]

    yield factory
    for run in runs:
        run.close()


@pytest.fixture(scope="module")
def prm(prm_path):  # noqa: F811
    """A real local process reward model (tiny random-weight Llama token classifier)."""
    from metagen.scorers.hf_reward import HFProcessRewardModel
    return HFProcessRewardModel.from_pretrained(prm_path)


def outcome_reward(prm: Any) -> Any:
    """The PRM as an outcome reward (min over the solution's steps)."""
    from metagen.scorers.prm_outcome import PRMOutcome
    return PRMOutcome(prm, "min")


def assert_usage_is_the_servers(result: Result, run: Run, prompt_words: int | None = None
                                ) -> None:
    """Generated tokens = the server's completion_tokens summed; FLOPs unknown (NaN)."""
    assert result.usage.generated_tokens == run.policy.generated_tokens() > 0
    if prompt_words is not None:
        assert result.usage.prompt_tokens == prompt_words
    assert math.isnan(result.usage.generator_flops) and not result.usage.flops_known


def assert_no_failed_candidate(result: Result) -> None:
    assert result.best is not None and result.best.finish_reason != "error"
    assert all(c.finish_reason != "error" for c in result.candidates)


def assert_steps_extend_served(run: Run) -> None:
    """Every step-search request past the root continues an earlier answer: its prompt is an
    earlier prompt + the step text the server returned + the step stop."""
    continued = {s.body["prompt"] + s.text + STOP for s in run.policy.served
                 if s.body.get("stop") and STOP in s.body["stop"]}
    for body in run.generation_posts():
        if body["prompt"] != Q:
            assert body["prompt"] in continued, body["prompt"]
        assert body["n"] == 1 and body["model"] == "m"
        if body.get("stop"):
            assert STOP in body["stop"] and body["max_tokens"] <= STEPS.max_step_tokens


# --- parallel strategies ---------------------------------------------------------------------


def case_best_of_n(make, prm) -> None:
    run = make(fails(3))
    reward = outcome_reward(prm)
    before = prm.usage
    res = metagen.best_of_n(run.gen, Q, n=6, reward=reward, params=PARAMS)
    spent = prm.usage - before
    bodies = run.generation_posts()
    assert sorted(b["seed"] for b in bodies) == [0, 1, 2, 3, 3, 4, 5]  # seed 3: 2 attempts
    assert all(b["n"] == 1 and b["max_tokens"] == 32 and "stop" not in b for b in bodies)
    assert res.failures == {"server_error": 1} and res.trace["ok"] == 5
    assert res.trace["sample_index"] == [0, 1, 2, 4, 5]
    assert_no_failed_candidate(res)
    texts = [c.text for c in res.candidates]
    assert texts == [solution(Q, s) for s in (0, 1, 2, 4, 5)]
    ref = outcome_reward(prm).score([Q] * 5, texts)  # the same PRM, called again
    assert res.scores == pytest.approx(ref)
    assert res.best is not None and res.best.text == texts[ref.index(max(ref))]
    assert_usage_is_the_servers(res, run, prompt_words=len(Q.split()))
    assert res.usage.calls == 1
    assert res.usage.scorer_calls == spent.scorer_calls == 1  # all 5 candidates in one call
    assert spent.scorer_flops > 0 and res.usage.scorer_flops == pytest.approx(spent.scorer_flops)


def case_self_consistency(make, prm) -> None:
    run = make(fails(2))
    res = metagen.self_consistency(run.gen, Q, n=6, params=PARAMS, extract=answer_of)
    assert res.trace["votes"] == {"7": 4, "5": 1}  # seeds 0,1,3,4 -> 7; 5 -> 5; 2 failed
    assert res.trace["answer"] == "7" and res.failures == {"server_error": 1}
    assert len(run.generation_posts()) == 7
    assert_no_failed_candidate(res)
    assert_usage_is_the_servers(res, run, prompt_words=len(Q.split()))


def case_weighted_vote(make, prm) -> None:
    run = make(fails(4))
    res = metagen.weighted_vote(run.gen, Q, n=6, params=PARAMS, extract=answer_of,
                                reward=outcome_reward(prm))
    texts = [c.text for c in res.candidates]
    assert texts == [solution(Q, s) for s in (0, 1, 2, 3, 5)]
    weights = outcome_reward(prm).score([Q] * 5, texts)
    assert res.trace["weights"] == pytest.approx(weights)
    votes = {"7": sum(w for t, w in zip(texts, weights) if answer_of(t) == "7"),
             "5": sum(w for t, w in zip(texts, weights) if answer_of(t) == "5")}
    assert res.trace["votes"] == pytest.approx(votes)
    assert res.trace["answer"] == max(votes, key=lambda a: votes[a])
    assert answer_of(res.best.text if res.best else "") == res.trace["answer"]
    assert res.failures == {"server_error": 1}
    assert_no_failed_candidate(res)
    assert_usage_is_the_servers(res, run, prompt_words=len(Q.split()))


def case_mbr(make, prm) -> None:
    run = make(fails(0, 1))
    res = metagen.mbr(run.gen, Q, n=6, params=PARAMS, utility="answer")
    # seeds 2, 5 -> 5 and seeds 3, 4 -> 7: a tie in expected utility, the first sample wins
    assert [answer_of(c.text) for c in res.candidates] == ["5", "7", "7", "5"]
    assert res.best is not None and answer_of(res.best.text) == "5"
    assert res.failures == {"server_error": 2}
    assert_no_failed_candidate(res)
    assert_usage_is_the_servers(res, run, prompt_words=len(Q.split()))


def case_rejection_sampling(make, prm) -> None:
    run = make(fails(2))
    res = metagen.rejection_sampling(run.gen, Q, lambda p, t: float(answer_of(t) == "5"),
                                     batch=2, max_samples=8, params=PARAMS)
    # round r samples seeds r, r + 1: (0, 1) -> 7, 7; (1, 2) -> 7, failed; (2, 3) -> failed, 7
    # (the failing seed is retried once each time); (3, 4) -> 7, 7 -> no 5 within 8 samples
    assert res.trace["rounds"] == 4 and res.trace["accepted"] is False
    assert res.failures == {"server_error": 2} and len(res.candidates) == 6
    assert [b["seed"] for b in run.generation_posts()].count(2) == 4
    assert_no_failed_candidate(res)
    assert_usage_is_the_servers(res, run)
    run2 = make()
    res2 = metagen.rejection_sampling(run2.gen, Q, lambda p, t: float(answer_of(t) == "5"),
                                      batch=2, max_samples=8, params=PARAMS)
    assert res2.trace["accepted"] is True and answer_of(res2.best.text) == "5"  # type: ignore
    assert res2.trace["rounds"] == 2  # seeds (1, 2): 2 -> c -> 5


def case_strategy_generator(make, prm) -> None:
    run = make(fails(1))
    reward = lambda p, t: float(answer_of(t) == "5")  # noqa: E731
    inner = metagen.StrategyGenerator(run.gen, BestOfN(reward), group=3)
    res = metagen.self_consistency(inner, Q, n=2, params=PARAMS, extract=answer_of)
    # one inner call of 6 samples: groups (0, 1, 2) -> seed 2 (a 5); (3, 4, 5) -> seed 5
    assert sorted({b["seed"] for b in run.generation_posts()}) == [0, 1, 2, 3, 4, 5]
    assert [c.text for c in res.candidates] == [solution(Q, 2), solution(Q, 5)]
    assert res.trace["votes"] == {"5": 2}
    assert_usage_is_the_servers(res, run, prompt_words=len(Q.split()))


def case_beam_search_generator(make, prm) -> None:
    run = make()
    with pytest.raises(CapabilityError, match="beam_search"):
        metagen.BeamSearchGenerator(run.gen, 4)
    assert run.server.posts == []  # refused before any request


# --- step-level search -------------------------------------------------------------------------


def case_step_beam_search(make, prm) -> None:
    run = make(fails(5))
    before = prm.usage
    [res] = metagen.step_beam_search(run.gen, [Q], prm, width=2, branching=3, params=PARAMS,
                                     steps=STEPS)
    spent = prm.usage - before
    posts = run.generation_posts()
    depth = [[b for b in posts if b["prompt"].count(STOP) == d] for d in range(3)]
    # search step 1: width * branching = 6 samples of the question, seeds 0..5 (5 fails twice)
    assert sorted(b["seed"] for b in depth[0]) == [0, 1, 2, 3, 4, 5, 5]
    assert all(b["stop"] == [STOP] and b["max_tokens"] == 12 for b in posts)
    first = [f"Step 1: idea {'abc'[s % 3]}.{STOP}" for s in range(5)]
    ref1 = [row[-1] for row in prm.score_steps([Q] * 5, [[s] for s in first])]
    kept1 = sorted(range(5), key=lambda i: (-ref1[i], i))[:2]  # the beam: top-2 by PRM value
    assert sorted({b["prompt"] for b in depth[1]}) == sorted({Q + first[i] for i in kept1})
    assert len(depth[1]) == 2 * 3  # each beam branches 3 ways
    # search step 2's children, ranked by the PRM on their whole path, pick step 3's prompts
    served2 = [s for s in run.policy.served if s.body["prompt"].count(STOP) == 1]
    paths = [(s.body["prompt"][len(Q):], s.text + STOP) for s in served2]
    ref2 = [row[-1] for row in prm.score_steps([Q] * 6, [list(p) for p in paths])]
    kept2 = sorted(range(6), key=lambda i: (-ref2[i], i))[:2]
    assert {b["prompt"] for b in depth[2]} == {Q + "".join(paths[i]) for i in kept2}
    assert len(depth[2]) == 2 * 3
    # finished: the 6 final steps (>= width ends the search); best = highest last-step value
    assert len(res.candidates) == 6 and all(answer_of(c.text) for c in res.candidates)
    finals = [c.text for c in res.candidates]
    ref3 = [row[-1] for row in prm.score_steps([Q] * 6, [STEPS.split(t) for t in finals])]
    assert res.scores == pytest.approx(ref3)
    assert res.best is not None and res.best.text == finals[ref3.index(max(ref3))]
    assert res.failures == {"generation_error": 1} and res.trace["search_steps"] == 3
    assert_steps_extend_served(run)
    assert_usage_is_the_servers(res, run)
    assert res.usage.calls == 3  # one generate call per search step
    assert res.usage.scorer_calls == spent.scorer_calls == 3
    assert spent.scorer_flops > 0 and res.usage.scorer_flops == pytest.approx(spent.scorer_flops)


def case_dvts(make, prm) -> None:
    run = make(fails(1))
    [res] = metagen.dvts(run.gen, [Q], prm, subtrees=2, branching=2, params=PARAMS,
                         steps=STEPS)
    roots = [b for b in run.generation_posts() if b["prompt"] == Q]
    assert sorted(b["seed"] for b in roots) == [0, 1, 1, 2, 3]  # 2 subtrees x 2, seed 1 failed
    assert res.failures == {"generation_error": 1}
    assert_no_failed_candidate(res)
    assert answer_of(res.best.text) in ("5", "7")  # type: ignore[union-attr]
    assert_steps_extend_served(run)
    assert_usage_is_the_servers(res, run)


def case_best_first(make, prm) -> None:
    run = make()
    [res] = metagen.best_first(run.gen, [Q], lambda p, s: -len(s[-1]), branching=2,
                               max_expansions=6, params=PARAMS, steps=STEPS)
    assert_no_failed_candidate(res)
    assert res.best is not None and res.best.text.startswith("Step 1: idea ")
    assert answer_of(res.best.text) in ("5", "7")
    assert_steps_extend_served(run)
    assert_usage_is_the_servers(res, run)


def case_mcts(make, prm) -> None:
    run = make(fails(0))
    value = lambda p, s: 1.0 if answer_of(s[-1]) == "5" else 0.5  # noqa: E731
    [res] = metagen.mcts(run.gen, [Q], value, iterations=4, branching=2, params=PARAMS,
                         steps=STEPS)
    roots = [b["seed"] for b in run.generation_posts() if b["prompt"] == Q]
    assert sorted(roots) == [0, 0, 1]  # the root's 2 children: seed 0 failed (retried once)
    assert res.failures == {"generation_error": 1} and res.trace["search_steps"] == 4
    assert res.best is not None and res.best.text.startswith("Step 1: idea b.")
    assert_no_failed_candidate(res)
    assert_steps_extend_served(run)
    assert_usage_is_the_servers(res, run)


def case_rebase(make, prm) -> None:
    run = make()
    [res] = metagen.rebase(run.gen, [Q], prm, width=4, params=PARAMS, steps=STEPS,
                           answer=answer_of)
    roots = [b for b in run.generation_posts() if b["prompt"] == Q]
    assert sorted(b["seed"] for b in roots) == [0, 1, 2, 3]
    assert_no_failed_candidate(res)
    assert answer_of(res.best.text) in ("5", "7")  # type: ignore[union-attr]
    assert_steps_extend_served(run)
    assert_usage_is_the_servers(res, run)


def case_tree_of_thoughts(make, prm) -> None:
    run = make()
    judge = LMStepValue(run.gen)  # the server itself judges: prompt-only echo scoring
    [res] = metagen.tree_of_thoughts(run.gen, [Q], judge, branching=2, breadth=1,
                                     params=PARAMS, steps=STEPS)
    echoes = [s.body for s in run.server.posts if s.body.get("echo")]
    assert echoes and all(b["max_tokens"] == 0 and b["logprobs"] == 0 for b in echoes)
    assert {b["prompt"].rsplit("Answer:", 1)[1] for b in echoes} == {" Yes", " No"}
    assert_no_failed_candidate(res)
    assert_steps_extend_served(run)
    assert_usage_is_the_servers(res, run)
    assert res.usage.scorer_calls >= 1 and math.isnan(res.usage.scorer_flops)


# --- refinement --------------------------------------------------------------------------------


def _feedback(prompt: Any, attempt: str) -> Feedback:
    ok = answer_of(attempt) == "5"
    return Feedback(ok=ok, message="" if ok else "7 is wrong.", score=float(ok))


def case_refine_with_feedback(make, prm) -> None:
    run = make()
    [res] = metagen.refine_with_feedback(run.gen, [Q], _feedback, max_attempts=3,
                                         params=PARAMS)
    first = solution(Q, 0)
    # the revised attempt (a derived seed: choice a) is 7 again: no progress ends the chain
    assert run.policy.prompts() == [
        Q, FEEDBACK_TEMPLATE.format(prompt=Q, attempt=first, feedback="7 is wrong.")]
    assert [a["text"] for a in res.trace["chain"]] == [first, "The answer is 7."]
    assert res.trace["stop_reason"] == "no_progress"
    assert_no_failed_candidate(res)
    assert_usage_is_the_servers(res, run)
    assert res.usage.calls == 2


def case_self_refine(make, prm) -> None:
    run = make()
    [res] = metagen.self_refine(run.gen, [Q], max_attempts=2, params=PARAMS)
    first, critique = solution(Q, 0), "The answer is wrong."
    asked = CRITIQUE_TEMPLATE.format(prompt=Q, attempt=first)
    improve = REFINE_TEMPLATE.format(prompt=Q, attempt=first, feedback=critique)
    assert run.policy.prompts()[:3] == [Q, asked, improve]
    assert [s.text for s in run.policy.served][:3] == [first, critique, "The answer is 7."]
    assert [a["feedback"] for a in res.trace["chain"]][:1] == [critique]
    assert len(res.trace["chain"]) == 2 and res.trace["stop_reason"] == "max_attempts"
    assert_no_failed_candidate(res)
    assert_usage_is_the_servers(res, run)


def case_treefinement(make, prm) -> None:
    run = make(fails(1))
    [res] = metagen.treefinement(run.gen, [Q], _feedback, width=2, max_depth=2,
                                 params=PARAMS)
    served = run.policy.served
    # level 1: two attempts of the question (seed 1 fails twice: one attempt left); level 2:
    # one revision of that attempt per width slot, each asked with its feedback
    assert [s.body["seed"] for s in served if s.body["prompt"] == Q] == [0]
    revise = FEEDBACK_TEMPLATE.format(prompt=Q, attempt=solution(Q, 0), feedback="7 is wrong.")
    assert {s.body["prompt"] for s in served if s.body["prompt"] != Q} == {revise}
    assert res.failures == {"generation_error": 1}
    assert_no_failed_candidate(res)
    assert_usage_is_the_servers(res, run)



def case_adaptive_self_consistency(make, prm) -> None:
    run = make()
    res = metagen.adaptive_self_consistency(run.gen, Q, n=8, batch=2, rule="window", window=2,
                                            params=PARAMS, extract=answer_of)
    posts = run.generation_posts()
    assert len(posts) == len(res.candidates) <= 8 and len(posts) % 2 == 0
    assert res.trace["rounds"] == len(posts) // 2
    assert answer_of(res.text) in ("5", "7")
    assert_no_failed_candidate(res)
    assert_usage_is_the_servers(res, run)


def case_particle_filtering(make, prm) -> None:
    run = make()
    [res] = metagen.particle_filtering(run.gen, [Q], prm, particles=3, params=PARAMS,
                                       steps=STEPS, answer=answer_of)
    roots = [b for b in run.generation_posts() if b["prompt"] == Q]
    assert len(roots) == 3
    assert_no_failed_candidate(res)
    assert answer_of(res.best.text) in ("5", "7")  # type: ignore[union-attr]
    assert_steps_extend_served(run)
    assert_usage_is_the_servers(res, run)


def case_deepconf(make, prm) -> None:
    """DeepConf reads top-k logprobs, which the scripted policy does not return: it runs on
    OpenAIGenerator against ``metagen serve`` (stories260K, a real server on loopback) and gets
    the same traces as the local engine for the same seed (the server's seeds are sample
    indices: the same token ids)."""
    from metagen.generators.local import LocalGenerator
    from tests.conftest import SHARED
    from tests.server.conftest import MODEL, start_server, stop_server

    local = LocalGenerator.from_pretrained(SHARED / "models" / "stories260K")
    running = start_server(local)
    remote = OpenAIGenerator(running.base_url, MODEL, max_retries=0)
    try:
        params = SamplingParams(temperature=1.0, max_tokens=24, seed=5)
        steps = StepDefinition(stop=(".",), max_step_tokens=8)
        kwargs = dict(n=4, warmup=2, window=2, top_k=3, max_depth=3, params=params, steps=steps)
        [res] = metagen.deepconf(remote, ["Once upon a time"], **kwargs)
        [ref] = metagen.deepconf(local, ["Once upon a time"], **kwargs)
        assert [c.token_ids for c in res.candidates] == [c.token_ids for c in ref.candidates]
        assert len(res.trace["lowest"]) == 4 and res.trace["threshold"] is not None
        assert res.usage.generated_tokens == ref.usage.generated_tokens > 0
    finally:
        remote.close()
        stop_server(running)
        local.close()

CASES: dict[str, Callable[..., None]] = {
    name[len("case_"):]: fn for name, fn in globals().items() if name.startswith("case_")}
NOT_STRATEGIES = {"Budget"}  # a strategy option (tested below), not something that generates
LAZY_STRATEGIES = {"BeamSearchGenerator"}  # exported by metagen.__getattr__, not in __all__


def _camel(name: str) -> str:
    return re.sub(r"(?<!^)([A-Z])", r"_\1", name).lower()


def test_every_exported_strategy_is_covered() -> None:
    """Every strategy ``metagen`` exports runs on OpenAIGenerator: in a case here (what the
    server saw), or, registered and available there, in ``test_openai_registry`` (the same
    choice as the local engine, for every registered strategy)."""
    from metagen.strategies.registry import specs

    exported = {name for name in metagen.__all__
                if getattr(getattr(metagen, name), "__module__", "").startswith(
                    "metagen.strategies.")} - NOT_STRATEGIES
    registered = {s.function.__name__ for s in specs().values() if s.available("openai")}
    assert set(CASES) <= {_camel(n) for n in exported | LAZY_STRATEGIES}
    assert {_camel(n) for n in exported | LAZY_STRATEGIES} <= set(CASES) | registered


@pytest.mark.parametrize("name", sorted(CASES))
def test_strategy_runs_on_openai_generator(make, prm, name) -> None:
    CASES[name](make, prm)


def test_a_flops_budget_refuses_an_unknown_flops_server_before_any_request(make, prm) -> None:
    run = make()
    budget = Budget(max_flops=1e12)
    with pytest.raises(CapabilityError, match="max_flops.*num_params"):
        metagen.step_beam_search(run.gen, [Q], prm, width=2, branching=2, params=PARAMS,
                                 steps=STEPS, budget=budget)
    with pytest.raises(CapabilityError, match="max_flops.*num_params"):
        metagen.best_of_n(run.gen, Q, n=2, reward=lambda p, t: 1.0, params=PARAMS,
                          budget=budget)
    assert run.generation_posts() == []


def test_a_flops_budget_applies_once_num_params_is_declared(make) -> None:
    run = make(num_params=1000)
    value = lambda p, s: 0.5  # noqa: E731
    per_call = 2 * 1000 * (len(Q.split()) + 4 * 4)  # 4 first steps of 4 words: one call's FLOPs
    [res] = metagen.step_beam_search(run.gen, [Q], value, width=2, branching=2, params=PARAMS,
                                     steps=STEPS, budget=Budget(max_flops=per_call))
    assert res.stopped_by_budget and res.usage.calls == 1 and len(run.generation_posts()) == 4
    assert res.usage.generator_flops == per_call


def test_batched_results_share_the_servers_tokens_and_keep_flops_unknown(make, prm) -> None:
    """Over two prompts each Result's usage is unknown FLOPs (NaN, never a 0 share) and the
    shares of generated tokens add up to what the server reported."""
    q2 = "Q: and 2 + 5?\n"
    for search in ("best_of_n", "step_beam_search"):
        run = make()
        if search == "best_of_n":
            results = metagen.best_of_n(run.gen, [Q, q2], n=3, reward=lambda p, t: 1.0,
                                        params=PARAMS)
        else:
            results = metagen.step_beam_search(run.gen, [Q, q2], prm, width=1, branching=2,
                                               params=PARAMS, steps=STEPS)
        assert isinstance(results, list) and len(results) == 2
        assert sum(r.usage.generated_tokens for r in results) == run.policy.generated_tokens()
        assert all(math.isnan(r.usage.generator_flops) for r in results)
        assert all(not r.usage.flops_known for r in results)
