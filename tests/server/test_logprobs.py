"""Logprobs beyond the plain response, against the running server: with ``stream: true`` (each
chunk carries its own tokens' logprobs), the echoed prompt's logprobs and top alternatives
(``echo`` with ``logprobs`` k), and vLLM's ``prompt_logprobs`` k. The reference is the library:
``LocalGenerator`` for the same seed, and for a prompt position t the one-token generation after
``ids[:t]`` restricted to ``ids[t]`` (its logprob and top alternatives are those of the raw
distribution there, computed by the sampler, not by the scoring path the server uses)."""

from __future__ import annotations

import asyncio
import json

import openai
import pytest

from metagen.types import SamplingParams
from tests.server.conftest import API_KEY, MODEL
from tests.tolerances import FLOAT_LOGPROB_TOL

PROMPT = "Once upon a time there was a little"
MESSAGES = [{"role": "system", "content": "Tell a story."},
            {"role": "user", "content": "Once upon a time"}]
TOL = FLOAT_LOGPROB_TOL


@pytest.fixture(scope="module")
def client(server):
    with openai.OpenAI(base_url=server.base_url, api_key=API_KEY, max_retries=0) as sdk:
        yield sdk


def _position(gen, ids: list[int], t: int, k: int) -> tuple[float, dict[int, float]]:
    """(log p(ids[t] | ids[:t]), the k most likely tokens there) from the library's sampler."""
    params = SamplingParams(temperature=0, max_tokens=1, logprobs=k, allowed_token_ids=[ids[t]])

    async def run():
        [out] = await gen.asubmit([ids[:t]], params).aresult()
        return out.outputs[0]

    c = asyncio.run(run())
    assert c.token_ids == (ids[t],)
    return c.logprobs[0], dict(c.top_logprobs[0])


def _reference(gen, text: str, k: int) -> tuple[list[int], list[tuple[float, dict[int, float]]]]:
    ids = gen.tokenizer(text)["input_ids"]
    return ids, [_position(gen, ids, t, k) for t in range(1, len(ids))]


def _ids(names: list[str]) -> list[int]:
    return [int(n.split(":")[1]) for n in names]


def test_completion_stream_chunks_carry_the_logprobs_of_the_library(client, ref_gen):
    kwargs = dict(model=MODEL, prompt="Once upon a time", max_tokens=14, n=2, temperature=0.9,
                  seed=5, logprobs=3, stop=["."], extra_body={"return_tokens_as_token_ids": True})
    whole = client.completions.create(**kwargs)
    [want] = ref_gen.generate(["Once upon a time"], SamplingParams(
        n=2, temperature=0.9, seed=5, max_tokens=14, logprobs=3, stop=["."]))
    joined: dict[int, dict[str, list]] = {}
    text = {0: "", 1: ""}
    for chunk in client.completions.create(stream=True, **kwargs):
        for choice in chunk.choices:
            text[choice.index] += choice.text
            if choice.logprobs is None:
                continue
            block = joined.setdefault(choice.index, {"tokens": [], "token_logprobs": [],
                                                      "top_logprobs": [], "text_offset": []})
            for key in block:
                block[key] += getattr(choice.logprobs, key)
    for choice, ref in zip(whole.choices, want):
        block = joined[choice.index]
        assert text[choice.index] == choice.text == ref.text
        assert _ids(block["tokens"]) == list(ref.token_ids)
        assert block["token_logprobs"] == pytest.approx(list(ref.logprobs), abs=TOL)
        assert [set(_ids(list(d))) for d in block["top_logprobs"]] == \
            [set(d) for d in ref.top_logprobs]
        assert block["text_offset"] == choice.logprobs.text_offset


def test_completion_stream_text_offsets_index_the_streamed_text(client):
    text, tokens, offsets = "", [], []
    for chunk in client.completions.create(model=MODEL, prompt="One day", max_tokens=20,
                                           temperature=0, logprobs=0, stream=True):
        for choice in chunk.choices:
            text += choice.text
            if choice.logprobs is not None:
                tokens += choice.logprobs.tokens
                offsets += choice.logprobs.text_offset
                assert choice.logprobs.top_logprobs is None  # logprobs 0: no alternatives
    assert tokens and "".join(tokens) == text
    for token, offset in zip(tokens, offsets):
        assert text[offset:offset + len(token)] == token


def test_chat_stream_chunks_carry_the_logprobs_of_the_library(client, ref_gen):
    [want] = ref_gen.generate([MESSAGES], SamplingParams(n=1, temperature=1.0, seed=8,
                                                         max_tokens=16, logprobs=2))
    content, text = [], ""
    for chunk in client.chat.completions.create(
            model=MODEL, messages=MESSAGES, max_tokens=16, temperature=1.0, seed=8,
            logprobs=True, top_logprobs=2, stream=True,
            extra_body={"return_tokens_as_token_ids": True}):
        for choice in chunk.choices:
            text += choice.delta.content or ""
            if choice.logprobs is not None:
                content += choice.logprobs.content
    [ref] = want
    assert text == ref.text
    assert _ids([e.token for e in content]) == list(ref.token_ids)
    assert [e.logprob for e in content] == pytest.approx(list(ref.logprobs), abs=TOL)
    assert [{int(a.token.split(":")[1]) for a in e.top_logprobs} for e in content] == \
        [set(d) for d in ref.top_logprobs]


def test_echo_with_top_logprobs_reads_the_prompt_as_the_library(client, ref_gen):
    ids, ref = _reference(ref_gen, PROMPT, 3)
    got = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=4, temperature=0,
                                    echo=True, logprobs=3,
                                    extra_body={"return_tokens_as_token_ids": True})
    [choice] = got.choices
    [[gen]] = ref_gen.generate([PROMPT], SamplingParams(temperature=0, max_tokens=4,
                                                        logprobs=3))
    block = choice.logprobs
    assert choice.text == PROMPT + gen.text
    assert _ids(block.tokens) == ids + list(gen.token_ids)
    lps, tops = block.token_logprobs, block.top_logprobs
    assert lps[0] is None and tops[0] is None  # nothing predicts the first token
    assert lps[1:len(ids)] == pytest.approx([lp for lp, _ in ref], abs=TOL)
    assert lps[len(ids):] == pytest.approx(list(gen.logprobs), abs=TOL)
    for got_top, (_, want_top) in zip(tops[1:len(ids)], ref):
        assert {int(k.split(":")[1]): v for k, v in got_top.items()} == \
            pytest.approx(want_top, abs=TOL)
    [[tail]] = ref_gen.score(["Once upon a time"], [[" there was a little"]])
    head = len(ref_gen.tokenizer("Once upon a time")["input_ids"])
    assert sum(lps[head:len(ids)]) == pytest.approx(tail, abs=TOL)


def test_echo_only_with_top_logprobs_and_text_names(client, ref_gen):
    """``max_tokens`` 0: the prompt alone, its tokens named by their text."""
    [choice] = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=0, echo=True,
                                         logprobs=2).choices
    assert choice.text == PROMPT
    assert "".join(choice.logprobs.tokens) == PROMPT
    assert all(len(t) == 2 for t in choice.logprobs.top_logprobs[1:])


def test_vllm_prompt_logprobs_give_rank_and_alternatives_of_the_library(http, ref_gen):
    ids, ref = _reference(ref_gen, PROMPT, 20)
    body = {"model": MODEL, "prompt": PROMPT, "max_tokens": 3, "temperature": 0,
            "prompt_logprobs": 2}
    [choice] = http.post("/v1/completions", json=body).json()["choices"]
    got = choice["prompt_logprobs"]
    assert got[0] is None and len(got) == len(ids)
    for t, (entry, (lp, top20)) in enumerate(zip(got[1:], ref), start=1):
        ranked = list(top20)  # most likely first
        want_rank = ranked.index(ids[t]) + 1 if ids[t] in ranked else None
        mine = entry[str(ids[t])]
        assert mine["logprob"] == pytest.approx(lp, abs=TOL)
        if want_rank is not None:
            assert mine["rank"] == want_rank
        else:
            assert mine["rank"] > 20
        alts = {int(k): v for k, v in entry.items() if v["rank"] <= 2}
        assert set(alts) == set(ranked[:2])
        for tok, v in alts.items():
            assert v["logprob"] == pytest.approx(top20[tok], abs=TOL)
        assert set(entry) <= {str(ids[t]), *map(str, ranked[:2])}
    assert choice["logprobs"] is None  # not asked for


def test_prompt_logprobs_and_echo_in_a_stream_come_first(http):
    body = {"model": MODEL, "prompt": PROMPT, "max_tokens": 5, "temperature": 0, "echo": True,
            "logprobs": 1, "prompt_logprobs": 1}
    whole = http.post("/v1/completions", json=body).json()["choices"][0]
    resp = http.post("/v1/completions", json=body | {"stream": True})
    events = [json.loads(line[6:]) for line in resp.text.splitlines()
              if line.startswith("data: {")]
    [first] = events[0]["choices"]
    assert first["text"] == PROMPT
    assert first["prompt_logprobs"] == whole["prompt_logprobs"]
    n_prompt = len(whole["prompt_logprobs"])
    assert first["logprobs"]["tokens"] == whole["logprobs"]["tokens"][:n_prompt]
    rest = [c["logprobs"] for e in events[1:] for c in e["choices"] if c["logprobs"]]
    streamed = first["logprobs"]["token_logprobs"] + [x for b in rest
                                                      for x in b["token_logprobs"]]
    assert streamed == whole["logprobs"]["token_logprobs"]
    assert [o for b in [first["logprobs"], *rest] for o in b["text_offset"]] == \
        whole["logprobs"]["text_offset"]


@pytest.mark.parametrize("value", [-1, 21, 1.5, True, "2"])
def test_prompt_logprobs_out_of_range_is_a_400_naming_it(http, value):
    body = {"model": MODEL, "prompt": PROMPT, "prompt_logprobs": value}
    resp = http.post("/v1/completions", json=body)
    assert resp.status_code == 400
    assert resp.json()["error"]["param"] == "prompt_logprobs"


def test_chat_prompt_logprobs_read_the_rendered_conversation_as_the_library(http, ref_gen):
    """vLLM's chat ``prompt_logprobs``: a top-level list over the conversation's tokens as the
    template renders them, equal to ``/v1/completions`` on those token ids and, token by token,
    to the library's sampler."""
    text = ref_gen.tokenizer.apply_chat_template(MESSAGES, tokenize=False,
                                                 add_generation_prompt=True)
    ids = ref_gen.tokenizer(text, add_special_tokens=False)["input_ids"]
    body = {"model": MODEL, "messages": MESSAGES, "max_tokens": 3, "temperature": 0,
            "prompt_logprobs": 2}
    resp = http.post("/v1/chat/completions", json=body).json()
    got = resp["prompt_logprobs"]
    assert got[0] is None and len(got) == len(ids) == resp["usage"]["prompt_tokens"]
    [plain] = http.post("/v1/completions", json={
        "model": MODEL, "prompt": ids, "max_tokens": 1, "temperature": 0,
        "prompt_logprobs": 2}).json()["choices"]
    assert got == plain["prompt_logprobs"]
    for t in range(1, len(ids)):
        lp, top2 = _position(ref_gen, ids, t, 2)
        assert got[t][str(ids[t])]["logprob"] == pytest.approx(lp, abs=TOL)
        assert {int(k) for k, v in got[t].items() if v["rank"] <= 2} == set(top2)
    assert resp["choices"][0]["logprobs"] is None  # not asked for
    without = http.post("/v1/chat/completions", json=body | {"prompt_logprobs": None}).json()
    assert "prompt_logprobs" not in without
    assert without["choices"][0]["message"] == resp["choices"][0]["message"]


@pytest.mark.parametrize(("value", "stream"), [(-1, False), (21, False), ("2", False),
                                               (1, True), (0, True)])
def test_chat_prompt_logprobs_out_of_range_or_streamed_is_a_400_naming_it(http, value, stream):
    body = {"model": MODEL, "messages": MESSAGES, "max_tokens": 3, "prompt_logprobs": value,
            "stream": stream}
    resp = http.post("/v1/chat/completions", json=body)
    assert resp.status_code == 400
    assert resp.json()["error"]["param"] == "prompt_logprobs"
