"""The real clients against the running server (S18): the official ``openai`` SDK (chat,
completions, streams, ``n > 1``, logprobs, errors as its exception types) and metagen's own
``OpenAIGenerator``, whose outputs must equal ``LocalGenerator``'s on the same model and seeds."""

from __future__ import annotations

import openai
import pytest

from metagen.generators.openai import OpenAIGenerator
from metagen.types import SamplingParams
from tests.server.conftest import API_KEY, MODEL, start_server, stop_server
from tests.tolerances import FLOAT_LOGPROB_TOL

PROMPT = "Once upon a time"
MESSAGES = [{"role": "system", "content": "Tell a story."},
            {"role": "user", "content": "Once upon a time"}]


@pytest.fixture(scope="module")
def client(server):
    with openai.OpenAI(base_url=server.base_url, api_key=API_KEY, max_retries=0) as sdk:
        yield sdk


@pytest.fixture(scope="module")
def remote(server):
    """metagen's OpenAIGenerator pointed at the server (dialect probed from /v1/models)."""
    gen = OpenAIGenerator(server.base_url, MODEL, api_key=API_KEY, max_retries=0)
    yield gen
    gen.close()


def test_sdk_models(client):
    assert [m.id for m in client.models.list()] == [MODEL]


def test_sdk_completions_n_and_logprobs_equal_the_library(client, ref_gen):
    got = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=12, n=2,
                                    temperature=0.8, seed=21, logprobs=3)
    [want] = ref_gen.generate([PROMPT], SamplingParams(n=2, temperature=0.8, seed=21,
                                                       max_tokens=12, logprobs=3))
    assert [c.text for c in got.choices] == [w.text for w in want]
    for choice, ref in zip(got.choices, want):
        assert choice.logprobs.token_logprobs == pytest.approx(list(ref.logprobs),
                                                               abs=FLOAT_LOGPROB_TOL)
        assert all(len(top) <= 3 for top in choice.logprobs.top_logprobs)
    assert got.usage.completion_tokens == sum(len(w.token_ids) for w in want)


def test_sdk_chat_equals_the_library(client, ref_gen):
    got = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=12, n=2,
                                         temperature=1.0, seed=4, logprobs=True,
                                         top_logprobs=2)
    [want] = ref_gen.generate([MESSAGES], SamplingParams(n=2, temperature=1.0, seed=4,
                                                         max_tokens=12, logprobs=2))
    assert [c.message.content for c in got.choices] == [w.text for w in want]
    assert [c.message.role for c in got.choices] == ["assistant", "assistant"]
    for choice, ref in zip(got.choices, want):
        assert [e.logprob for e in choice.logprobs.content] == \
            pytest.approx(list(ref.logprobs), abs=FLOAT_LOGPROB_TOL)
        assert all(len(e.top_logprobs) == 2 for e in choice.logprobs.content)


def test_sdk_extra_body_reaches_the_sampler(client, ref_gen):
    got = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=12, temperature=1.0,
                                    seed=2, extra_body={"top_k": 5, "min_p": 0.05,
                                                        "repetition_penalty": 1.2})
    [[want]] = ref_gen.generate([PROMPT], SamplingParams(temperature=1.0, seed=2, top_k=5,
                                                         min_p=0.05, repetition_penalty=1.2,
                                                         max_tokens=12))
    assert got.choices[0].text == want.text


def test_sdk_streams(client, ref_gen):
    [[want]] = ref_gen.generate([PROMPT], SamplingParams(temperature=1.0, seed=8, max_tokens=16))
    stream = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=16,
                                       temperature=1.0, seed=8, stream=True,
                                       stream_options={"include_usage": True})
    chunks = list(stream)
    assert "".join(c.choices[0].text for c in chunks if c.choices) == want.text
    assert chunks[-1].usage.completion_tokens == len(want.token_ids)
    [[chat_want]] = ref_gen.generate([MESSAGES], SamplingParams(temperature=1.0, seed=8,
                                                                max_tokens=16))
    stream = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=16,
                                            temperature=1.0, seed=8, stream=True, n=2)
    texts = ["", ""]
    finish = [None, None]
    for chunk in stream:
        for choice in chunk.choices:
            texts[choice.index] += choice.delta.content or ""
            finish[choice.index] = choice.finish_reason or finish[choice.index]
    assert texts[0] == chat_want.text and finish[0] == chat_want.finish_reason
    assert finish[1] in ("stop", "length")


def test_sdk_errors_are_its_exception_types(server, client):
    with pytest.raises(openai.BadRequestError) as bad:
        client.completions.create(model=MODEL, prompt=PROMPT, top_p=1.5)
    assert bad.value.param == "top_p" and bad.value.status_code == 400
    with pytest.raises(openai.BadRequestError) as unknown:
        client.completions.create(model=MODEL, prompt=PROMPT, extra_body={"best_of": 2})
    assert unknown.value.param == "best_of"
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="no-such-model", prompt=PROMPT)
    with openai.OpenAI(base_url=server.base_url, api_key="wrong", max_retries=0) as wrong:
        with pytest.raises(openai.AuthenticationError):
            wrong.models.list()
        with pytest.raises(openai.AuthenticationError):
            wrong.chat.completions.create(model=MODEL, messages=MESSAGES)


def test_sdk_rate_limit_error(served_gen):
    running = start_server(served_gen, max_concurrent=1)
    try:
        running.app.state.server.in_flight = 1  # as if one request were being served
        with openai.OpenAI(base_url=running.base_url, api_key="unused", max_retries=0) as sdk:
            with pytest.raises(openai.RateLimitError):
                sdk.completions.create(model=MODEL, prompt=PROMPT, max_tokens=4)
        running.app.state.server.in_flight = 0
    finally:
        stop_server(running)


def test_sdk_stream_error_raises(client, served_gen):
    def nan_late(logits, states):
        for row, state in enumerate(states):
            if state.params.presence_penalty == 0.123 and state.step >= 2:
                logits[row] = float("nan")
        return logits

    served_gen.logits_hook = nan_late
    try:
        stream = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=8,
                                           temperature=0, presence_penalty=0.123, stream=True)
        with pytest.raises(openai.APIError):
            list(stream)
    finally:
        served_gen.logits_hook = None


# -- metagen's OpenAIGenerator -------------------------------------------------------------------

def _sample_refs(ref_gen, prompt, params: SamplingParams):
    """What OpenAIGenerator's sample i is against metagen's server: the library's sample i of
    the same params (its request carries the seed and sample_index i)."""
    return ref_gen.generate([prompt], params)[0]


def test_openai_generator_detects_the_metagen_dialect(remote):
    assert remote.dialect.name == "metagen" and remote.dialect.wire == "vllm"
    assert remote.capabilities.prompt_scoring and remote.capabilities.logprobs


def test_openai_generator_passes_token_healing_to_metagen(remote, ref_gen):
    params = SamplingParams(temperature=0.0, max_tokens=10, token_healing=2, logprobs=1)
    [[got]] = remote.generate(["Once upon a ti"], params)
    [[want]] = ref_gen.generate(["Once upon a ti"], params)
    assert got.text == want.text and got.text.startswith("me")
    assert got.token_ids == want.token_ids


@pytest.mark.parametrize("prompt", [PROMPT, MESSAGES,
                                    MESSAGES + [{"role": "assistant", "content": "There was"}]],
                         ids=["text", "chat", "chat-continued"])
def test_openai_generator_generate_equals_local(remote, ref_gen, prompt):
    params = SamplingParams(n=3, temperature=0.9, top_k=40, seed=13, max_tokens=14, logprobs=2,
                            stop=("\n",))
    [got] = remote.generate([prompt], params)
    for g, w in zip(got, _sample_refs(ref_gen, prompt, params)):
        assert (g.text, g.token_ids, g.finish_reason, g.stop_reason) == \
            (w.text, w.token_ids, w.finish_reason, w.stop_reason)
        assert g.logprobs == pytest.approx(w.logprobs, abs=FLOAT_LOGPROB_TOL)
        assert [set(d) for d in g.top_logprobs] == [set(d) for d in w.top_logprobs]


def test_openai_generator_stream_equals_local(remote, ref_gen):
    params = SamplingParams(temperature=1.0, seed=6, max_tokens=20, stop=(".",))
    [[want]] = ref_gen.generate([PROMPT], params)
    assert "".join(remote.stream(PROMPT, params)) == want.text


def test_openai_generator_score_equals_local(remote, ref_gen):
    conts = [[" there was a girl", " Lily", "!"]]
    got = remote.score([PROMPT], conts)
    want = ref_gen.score([PROMPT], conts)
    assert got[0] == pytest.approx(want[0], abs=FLOAT_LOGPROB_TOL)
