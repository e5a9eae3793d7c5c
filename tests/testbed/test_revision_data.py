"""The revision fine-tune's data: the revision prompt's exact text, the loss on the revision
tokens only, the mixture's three kinds of example, and the config's checks."""

from __future__ import annotations

import itertools

import pytest

from metagen.errors import InvalidParameterError
from metagen.strategies.refine_prompts import revision_prompt
from metagen.testbed import format_prompt, make_problems
from metagen.testbed.revision import (RevisionConfig, ordinary_example, revision_example,
                                      revision_stream)
from metagen.testbed.rm_data import Sample
from metagen.testbed.tokenizer import Codec


@pytest.fixture(scope="module")
def problem():
    return make_problems("train", 1, seed=0, difficulties=(1,))[0]


def test_a_revision_example_is_golden(problem) -> None:
    codec = Codec()
    question = format_prompt(problem)
    attempt = "1 + 1 = 3\n#### 3"
    ids, weights = revision_example(codec, problem, attempt, problem.solutions[0])
    prompt = revision_prompt(question, attempt)
    assert prompt == question + "1 + 1 = 3\n#### 3\nRevision:\n"
    n_prompt = len(codec.encode(prompt))  # BOS included
    assert ids[0] == codec.bos and ids[-1] == codec.eos
    assert codec.decode(ids[:n_prompt]) == prompt
    assert codec.decode(ids[n_prompt:-1]) == problem.solutions[0]
    assert weights == [0.0] * n_prompt + [1.0] * (len(ids) - n_prompt)  # revision + EOS only


def test_an_ordinary_example_trains_the_solution_only(problem) -> None:
    codec = Codec()
    ids, weights = ordinary_example(codec, problem, problem.solutions[0])
    n_prompt = len(codec.encode(format_prompt(problem)))
    assert codec.decode(ids[:n_prompt]) == format_prompt(problem)
    assert codec.decode(ids[n_prompt:-1]) == problem.solutions[0] and ids[-1] == codec.eos
    assert weights == [0.0] * n_prompt + [1.0] * (len(ids) - n_prompt)


def test_the_stream_mixes_plain_pooled_and_synthetic_attempts() -> None:
    codec = Codec()
    problems = make_problems("train", 4, seed=1)
    pool = [Sample(p, p.solutions[0] + "7", False) for p in problems]  # a recognisable slip
    texts = [codec.decode(ids) for ids, _ in
             itertools.islice(revision_stream(pool, RevisionConfig(seed=3)), 300)]
    revisions = [t for t in texts if "\nRevision:\n" in t]
    pooled = [t for t in revisions if any(format_prompt(s.problem) + s.completion + "\nRevision"
                                          in t for s in pool)]
    assert 0 < len(pooled) < len(revisions) < len(texts)  # all three kinds occur
    for t in pooled:  # a pooled attempt's target is a correct path of its own problem
        [s] = [s for s in pool if t.startswith(format_prompt(s.problem))]
        assert t.split("\nRevision:\n")[1] in s.problem.solutions
    again = [codec.decode(ids) for ids, _ in
             itertools.islice(revision_stream(pool, RevisionConfig(seed=3)), 300)]
    assert again == texts  # seeded


@pytest.mark.parametrize("field,value", [("steps", 0), ("k", -1), ("ordinary_frac", 1.5),
                                         ("synthetic_frac", 0.9)])
def test_the_config_names_a_bad_parameter(field, value) -> None:
    with pytest.raises(InvalidParameterError) as err:
        RevisionConfig(**{field: value})
    assert err.value.param == field


def test_an_empty_pool_is_refused() -> None:
    with pytest.raises(InvalidParameterError) as err:
        next(revision_stream([], RevisionConfig()))
    assert err.value.param == "pool"
