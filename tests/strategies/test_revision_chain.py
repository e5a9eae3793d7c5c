"""Revision chains on the shipped testbed reviser (through HFGenerator, no prefix cache, so its
FLOPs are a plain recomputation): n attempts, each the revision of the last; usage equal to the
one recomputed from the chain's prompts and tokens plus the verifier's own usage; each
selection rule picks what it says; the registry runs it."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from metagen.errors import InvalidParameterError
from metagen.strategies.refine_prompts import revision_prompt
from metagen.strategies.registry import get
from metagen.strategies.revision import revision_chain
from metagen.strategies.selection import argmax_first
from metagen.strategies.spec import Scorers
from metagen.tasks.answer import extract_answer
from metagen.testbed import format_prompt, make_problems, model_path
from metagen.testbed.tokenizer import Codec
from metagen.types import SamplingParams

PARAMS = SamplingParams(temperature=0.8, max_tokens=96, seed=3)


@pytest.fixture(scope="module")
def models():
    from metagen.generators.hf import HFGenerator
    from metagen.scorers import LikelihoodVerifier

    return (HFGenerator.from_pretrained(model_path("revise")),
            LikelihoodVerifier.from_pretrained(model_path("orm")))


@pytest.fixture(scope="module")
def prompts():
    return [format_prompt(p) for p in make_problems("test", 2, seed=4, difficulties=(3, 4))]


def test_n_attempts_each_revising_the_last_with_recomputed_usage(models, prompts) -> None:
    gen, orm = models
    before_gen, before_orm = gen.usage, orm.usage
    results = revision_chain(gen, prompts, n=3, select="reward", reward=orm, params=PARAMS)
    codec = Codec()
    total_gen = gen.usage - before_gen
    total_orm = orm.usage - before_orm
    for prompt, r in zip(prompts, results):
        texts = [c.text for c in r.candidates]
        assert len(texts) == 3 and [e["text"] for e in r.trace["chain"]] == texts
        asked = [prompt] + [revision_prompt(prompt, t) for t in texts[:-1]]
        lengths = [len(codec.encode(a)) for a in asked]  # BOS included, as the model reads it
        generated = [c.num_tokens for c in r.candidates]
        assert r.usage.prompt_tokens == sum(lengths)  # every revision prompt's prefill counts
        assert r.usage.generated_tokens == sum(generated)
        assert r.usage.generator_flops == pytest.approx(
            sum(gen.flop_model.sequence(p, g) for p, g in zip(lengths, generated)), rel=1e-12)
        json.dumps(r.trace)
    # the parts add up to what the generator and the verifier spent
    assert sum(r.usage.generator_flops for r in results) == pytest.approx(
        total_gen.generator_flops, rel=1e-12)
    assert sum(r.usage.prompt_tokens for r in results) == total_gen.prompt_tokens
    assert sum(r.usage.scorer_flops for r in results) == pytest.approx(total_orm.scorer_flops,
                                                                       rel=1e-12)
    assert sum(r.usage.scorer_tokens for r in results) == total_orm.scorer_tokens > 0


def test_best_of_chain_is_the_verifiers_argmax(models, prompts) -> None:
    gen, orm = models
    [r] = revision_chain(gen, prompts[:1], n=4, select="reward", reward=orm, params=PARAMS)
    texts = [c.text for c in r.candidates]
    scores = list(orm.score([prompts[0]] * len(texts), texts))
    assert r.scores == pytest.approx(scores, rel=1e-9)
    assert r.trace["best_attempt"] == argmax_first(scores) and r.text == texts[argmax_first(scores)]


def test_vote_and_last(models, prompts) -> None:
    gen, _ = models
    [voted] = revision_chain(gen, prompts[1:], n=4, select="vote", params=PARAMS)
    [last] = revision_chain(gen, prompts[1:], n=4, select="last", params=PARAMS)
    assert [c.text for c in voted.candidates] == [c.text for c in last.candidates]  # seeded
    answers = [extract_answer(c.text) for c in voted.candidates]
    counts = Counter(a for a in answers if a is not None)
    top = max(counts.values())
    first_top = next(a for a in answers if a is not None and counts[a] == top)
    assert extract_answer(voted.text) == first_top  # majority; ties: the answer seen first
    assert last.text == last.candidates[-1].text and last.usage.scorer_flops == 0


def test_the_registry_runs_both_selections(models, prompts) -> None:
    gen, orm = models
    chained = get("revision_chain").run(gen, prompts[0], n=2, params=PARAMS,
                                        scorers=Scorers(reward=orm))
    voted = get("revision_vote").run(gen, prompts[0], n=2, params=PARAMS)
    assert chained.trace["select"] == "best_of_n" and voted.trace["select"] == "self_consistency"
    assert [c.text for c in chained.candidates] == [c.text for c in voted.candidates]


@pytest.mark.parametrize("kwargs,name", [({"n": 0}, "n"), ({"select": "reward"}, "reward"),
                                         ({"template": "{prompt} again"}, "template"),
                                         ({"select": "best"}, "select")])
def test_bad_arguments_are_named(models, kwargs, name) -> None:
    gen, _ = models
    with pytest.raises(InvalidParameterError) as err:
        revision_chain(gen, ["Question: 1\nAnswer:\n"], **kwargs)
    assert err.value.param == name


def test_a_chat_prompt_is_refused(models) -> None:
    gen, _ = models
    with pytest.raises(InvalidParameterError) as err:
        revision_chain(gen, [[{"role": "user", "content": "hi"}]], n=2, select="vote")
    assert err.value.param == "prompts"
