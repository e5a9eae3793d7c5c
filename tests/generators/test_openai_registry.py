"""Every registered strategy available on the ``openai`` surface runs on
:class:`OpenAIGenerator` against ``metagen serve`` (the testbed policy, a real server on
loopback) and chooses what it chooses on the local engine for the same seed: the server's
seeded sample ``i`` is ``LocalGenerator``'s (each request carries the seed and its
``sample_index``), and a step search's continuations are the same text either way. Scorers are
scripted (plain functions). This covers a strategy as soon as it is registered; the cases in
``test_openai_strategies`` check what the server saw, strategy by strategy."""

from __future__ import annotations

import pytest

pytest.importorskip("httpx", reason="needs httpx: pip install 'metagen[openai]'")

from metagen.feedback import Feedback  # noqa: E402
from metagen.generators.local import LocalGenerator  # noqa: E402
from metagen.generators.openai import OpenAIGenerator  # noqa: E402
from metagen.strategies.registry import names, specs  # noqa: E402
from metagen.strategies.spec import Scorers  # noqa: E402
from metagen.testbed import format_prompt, make_problems, model_path  # noqa: E402
from metagen.types import SamplingParams  # noqa: E402
from tests.server.conftest import MODEL, start_server, stop_server  # noqa: E402

PROBLEM = format_prompt(make_problems("test", 1, seed=3, difficulties=[2])[0])
PARAMS = SamplingParams(temperature=0.8, seed=5, max_tokens=48, logprobs=0)


def _reward(prompt, text):
    return float(len(text) % 7)


def _prm(prompt, steps):
    return [1.0 / (1 + len(s) % 5) for s in steps]


def _feedback(prompt, attempt):
    return Feedback(ok="####" in attempt, message="end with #### and the answer",
                    score=float("####" in attempt))


SCORERS = Scorers(reward=_reward, prm=_prm, feedback=_feedback, confidence=_reward)


@pytest.fixture(scope="module")
def backends():
    local = LocalGenerator.from_pretrained(model_path("policy"))
    served = LocalGenerator.from_pretrained(model_path("policy"))
    running = start_server(served)
    remote = OpenAIGenerator(running.base_url, MODEL, max_retries=0)
    try:
        yield local, remote
    finally:
        remote.close()
        stop_server(running)
        served.close()
        local.close()


@pytest.mark.parametrize("name", names(surface="openai"))
def test_strategy_on_openai_generator_chooses_what_the_engine_chooses(backends, name):
    local, remote = backends
    spec = specs()[name]
    got = spec.run(remote, PROBLEM, n=2, params=PARAMS, scorers=SCORERS)
    want = spec.run(local, PROBLEM, n=2, params=PARAMS, scorers=SCORERS)
    assert got.text == want.text and got.best is not None
    assert [c.text for c in got.candidates] == [c.text for c in want.candidates]
    assert got.usage.generated_tokens == want.usage.generated_tokens > 0
