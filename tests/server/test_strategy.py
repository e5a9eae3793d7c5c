"""Meta-generation in the request: ``metagen serve <testbed policy> --orm orm=<testbed ORM>``
answers a best-of-16 request from the openai SDK with the same choice as the library's
``best_of_n`` for the same seed, with ``usage`` counting all 16 samples and the ORM's calls."""

from __future__ import annotations

from pathlib import Path

import openai
import pytest

from metagen.generators.local import LocalGenerator
from metagen.server.rewards import load_orm, parse_named_paths
from metagen.strategies.best_of_n import best_of_n
from metagen.testbed import format_prompt, make_problems, model_path
from metagen.types import SamplingParams
from tests.server.conftest import MODEL, start_server, stop_server

BEST_OF_16 = {"strategy": "best_of_n", "n": 16, "reward": "orm", "return_candidates": True}


@pytest.fixture(scope="module")
def orm():
    return load_orm(model_path("orm"))


@pytest.fixture(scope="module")
def policy_server(orm):
    gen = LocalGenerator.from_pretrained(model_path("policy"))
    running = start_server(gen, rewards={"orm": orm})
    yield running
    stop_server(running)
    gen.close()


@pytest.fixture(scope="module")
def policy_ref():
    gen = LocalGenerator.from_pretrained(model_path("policy"))
    yield gen
    gen.close()


@pytest.fixture(scope="module")
def sdk(policy_server):
    with openai.OpenAI(base_url=policy_server.base_url, api_key="unused", max_retries=0) as client:
        yield client


@pytest.mark.parametrize("seed", [0, 7])
def test_best_of_16_equals_the_library(sdk, policy_ref, orm, seed):
    prompt = format_prompt(make_problems("test", 1, seed=seed, difficulties=[4])[0])
    params = SamplingParams(temperature=0.8, seed=seed, max_tokens=96)
    want = best_of_n(policy_ref, prompt, n=16, reward=orm, params=params)
    got = sdk.completions.create(model=MODEL, prompt=prompt, max_tokens=96, temperature=0.8,
                                 seed=seed, extra_body={"metagen": BEST_OF_16})
    info = got.model_extra["metagen"]
    assert got.choices[0].text == want.best.text
    assert info["candidates"] == [c.text for c in want.candidates]
    assert info["scores"] == pytest.approx(want.scores, abs=1e-5)
    assert info["chosen"] == next(i for i, c in enumerate(want.candidates) if c is want.best)
    assert got.usage.completion_tokens == want.usage.generated_tokens
    assert got.usage.prompt_tokens == want.usage.prompt_tokens
    assert got.usage.model_extra["scorer_calls"] == 1
    assert got.usage.model_extra["scorer_tokens"] == want.usage.scorer_tokens > 0
    assert len(set(info["candidates"])) > 1  # 16 real samples, not one repeated


def test_best_of_n_on_a_chat_prompt_is_refused_without_a_template(sdk):
    with pytest.raises(openai.BadRequestError) as err:
        sdk.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "1+1"}],
                                    extra_body={"metagen": BEST_OF_16})
    assert err.value.param == "messages"


@pytest.mark.parametrize(("metagen", "extra", "param"), [
    ({"strategy": "beam_me_up"}, {}, "metagen.strategy"),
    ({"strategy": "best_of_n", "width": 4}, {}, "metagen.width"),
    ({"strategy": "best_of_n", "reward": "prm"}, {}, "metagen.reward"),
    ({"strategy": "best_of_n", "n": 0}, {}, "metagen.n"),
    ({"strategy": "best_of_n", "n": 10_000}, {}, "metagen.n"),
    ({"strategy": "best_of_n", "return_candidates": "yes"}, {}, "metagen.return_candidates"),
    ("best_of_n", {}, "metagen"),
    ({"strategy": "best_of_n"}, {"n": 2}, "n"),
    ({"strategy": "best_of_n"}, {"stream": True}, "stream"),
    ({"strategy": "best_of_n", "n": 4}, {"temperature": 0}, "n"),  # 4 greedy samples (V8)
])
def test_bad_strategy_requests_are_400s_naming_the_field(sdk, metagen, extra, param):
    with pytest.raises(openai.BadRequestError) as err:
        sdk.completions.create(model=MODEL, prompt="Question: 2 + 2\nAnswer:\n", max_tokens=8,
                               extra_body={"metagen": metagen} | extra)
    assert err.value.param == param


def test_orm_option_parsing():
    assert parse_named_paths(["orm=/a", "v2=/b=c"], "--orm") == {"orm": Path("/a"),
                                                               "v2": Path("/b=c")}
    for bad in (["orm"], ["=x"], ["a=x", "a=y"]):
        with pytest.raises(ValueError, match="--orm"):
            parse_named_paths(bad, "--orm")
