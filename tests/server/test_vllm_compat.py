"""The server as a drop-in for vLLM's: the request fields vLLM and OpenAI clients send either do
what vLLM does (checked against the library, the tokenizer or the server's own plain answer) or
are a 400 that says "not supported by metagen" (distinct from an unknown field's 400); the
README's compatibility table is :mod:`metagen.server.vllm_compat`'s."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import openai
import pytest

from metagen.beam_params import BeamSearchParams
from metagen.server.vllm_compat import FIELDS, ROUTES, markdown
from metagen.types import SamplingParams
from tests.conftest import with_chat_template
from tests.server.conftest import API_KEY, MODEL, ROOT, TEMPLATE, start_server, stop_server

PROMPT = "Once upon a time"
MESSAGES = [{"role": "system", "content": "Tell a story."},
            {"role": "user", "content": "Once upon a time"}]
THINK_TEMPLATE = TEMPLATE + "{% if enable_thinking %}Let me think.\n{% endif %}"


@pytest.fixture(scope="module")
def client(server):
    with openai.OpenAI(base_url=server.base_url, api_key=API_KEY, max_retries=0) as sdk:
        yield sdk


def _greedy(http, **body):
    out = http.post("/v1/completions", json={"model": MODEL, "temperature": 0, **body})
    assert out.status_code == 200, out.text
    return out.json()


def _library(gen, ids, params):
    """The library's outputs for token-id prompts (the engine loop, from asyncio)."""
    async def run():
        return await gen.asubmit([list(i) for i in ids], params).aresult()
    return asyncio.run(run())


# -- chat_template_kwargs ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def think_server(tmp_path_factory, stories_path):
    from metagen.generators.local import LocalGenerator
    folder = with_chat_template(tmp_path_factory.mktemp("think"), THINK_TEMPLATE)
    gen = LocalGenerator.from_pretrained(folder)
    running = start_server(gen)
    yield running
    stop_server(running)
    gen.close()


def test_chat_template_kwargs_reach_the_template(think_server):
    import httpx
    tok = think_server.generator.tokenizer
    text = tok.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True,
                                   enable_thinking=True)
    assert "Let me think." in text
    ids = tok(text, add_special_tokens=False)["input_ids"]
    with httpx.Client(base_url=think_server.url, timeout=60) as http:
        body = {"model": MODEL, "messages": MESSAGES, "max_tokens": 12, "temperature": 0,
                "chat_template_kwargs": {"enable_thinking": True}}
        got = http.post("/v1/chat/completions", json=body).json()
        plain = http.post("/v1/chat/completions", json={**body, "chat_template_kwargs": None})
        want = _greedy(http, prompt=ids, max_tokens=12)
        tokenized = http.post("/tokenize", json={
            "model": MODEL, "messages": MESSAGES,
            "chat_template_kwargs": {"enable_thinking": True}}).json()
        reserved = http.post("/v1/chat/completions", json={
            **body, "chat_template_kwargs": {"add_generation_prompt": False}})
    assert got["usage"]["prompt_tokens"] == len(ids)
    assert plain.json()["usage"]["prompt_tokens"] < len(ids)
    assert got["choices"][0]["message"]["content"] == want["choices"][0]["text"]
    assert tokenized["tokens"] == ids
    assert reserved.status_code == 400
    assert reserved.json()["error"]["param"] == "chat_template_kwargs"


# -- add_special_tokens, truncate_prompt_tokens, skip_special_tokens -----------------------------


def test_add_special_tokens_false_drops_bos(http, ref_gen):
    tok = ref_gen.tokenizer
    bare = tok(PROMPT, add_special_tokens=False)["input_ids"]
    assert tok(PROMPT)["input_ids"] != bare  # the tokenizer adds BOS by default
    got = _greedy(http, prompt=PROMPT, max_tokens=10, add_special_tokens=False)
    want = _greedy(http, prompt=bare, max_tokens=10)
    assert got["usage"]["prompt_tokens"] == len(bare)
    assert got["choices"][0]["text"] == want["choices"][0]["text"]
    chat = http.post("/v1/chat/completions", json={
        "model": MODEL, "messages": MESSAGES, "max_tokens": 4, "add_special_tokens": True})
    text = tok.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    assert chat.json()["usage"]["prompt_tokens"] == len(tok(text)["input_ids"])


def test_truncate_prompt_tokens_keeps_the_last_k(http, ref_gen):
    tok = ref_gen.tokenizer
    long = "Once upon a time there was a little girl who liked to play in the park."
    ids = tok(long)["input_ids"]
    got = _greedy(http, prompt=long, max_tokens=8, truncate_prompt_tokens=5, echo=True)
    [want] = _library(ref_gen, [ids[-5:]], SamplingParams(temperature=0, max_tokens=8))
    assert got["usage"]["prompt_tokens"] == 5
    assert got["choices"][0]["text"] == tok.decode(ids[-5:], skip_special_tokens=True) + \
        want.outputs[0].text
    whole = _greedy(http, prompt=long, max_tokens=1, truncate_prompt_tokens=-1)
    assert whole["usage"]["prompt_tokens"] == len(ids)
    chat = http.post("/v1/chat/completions", json={
        "model": MODEL, "messages": MESSAGES, "max_tokens": 4, "truncate_prompt_tokens": 6})
    assert chat.json()["usage"]["prompt_tokens"] == 6
    bad = http.post("/v1/completions", json={"model": MODEL, "prompt": long,
                                             "truncate_prompt_tokens": 0})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "truncate_prompt_tokens"


def test_skip_special_tokens_false_keeps_them(http, ref_gen):
    tok = ref_gen.tokenizer
    bos = tok.bos_token_id
    body = {"prompt": PROMPT, "max_tokens": 3, "logit_bias": {str(bos): 100}, "logprobs": 0,
            "return_tokens_as_token_ids": True}
    skipped = _greedy(http, **body)
    kept = _greedy(http, **body, skip_special_tokens=False)
    [choice] = kept["choices"]
    out = [int(t.split(":")[1]) for t in choice["logprobs"]["tokens"]]
    assert out == [bos] * 3
    prompt = tok(PROMPT)["input_ids"]
    head = tok.decode(prompt, skip_special_tokens=False)
    assert choice["text"] == tok.decode(prompt + out, skip_special_tokens=False)[len(head):]
    assert tok.bos_token in choice["text"] and skipped["choices"][0]["text"] == ""
    # an output ended by the end token: its text stays out unless include_stop_str_in_output
    end = {"prompt": PROMPT, "max_tokens": 5, "logit_bias": {str(tok.eos_token_id): 100},
           "skip_special_tokens": False}
    ended = _greedy(http, **end)["choices"][0]
    assert ended["finish_reason"] == "stop" and ended["text"] == ""
    shown = _greedy(http, **end, include_stop_str_in_output=True)
    assert shown["choices"][0]["text"] == tok.eos_token
    refused = http.post("/v1/completions", json={"model": MODEL, "prompt": PROMPT,
                                                 "skip_special_tokens": False, "stream": True})
    assert refused.status_code == 400
    assert "not supported by metagen" in refused.json()["error"]["message"]


# -- beam search ---------------------------------------------------------------------------------


def test_beam_search_equals_the_library(client, ref_gen):
    got = client.completions.create(model=MODEL, prompt=PROMPT, n=2, max_tokens=12,
                                    extra_body={"use_beam_search": True, "best_of": 4,
                                                "length_penalty": 0.5})
    [want] = ref_gen.beam_search([PROMPT], BeamSearchParams(
        num_beams=4, max_tokens=12, num_return_sequences=2, length_penalty=0.5))
    assert [c.text for c in got.choices] == [h.text for h in want]
    assert [c.finish_reason for c in got.choices] == [h.finish_reason for h in want]
    assert got.usage.completion_tokens == sum(len(h.token_ids) for h in want)
    chat = client.chat.completions.create(model=MODEL, messages=MESSAGES, n=3, max_tokens=10,
                                          extra_body={"use_beam_search": True})
    [ref] = ref_gen.beam_search([MESSAGES], BeamSearchParams(
        num_beams=3, max_tokens=10, num_return_sequences=3))
    assert [c.message.content for c in chat.choices] == [h.text for h in ref]


@pytest.mark.parametrize("extra, param", [
    ({"use_beam_search": True, "top_p": 0.5}, "top_p"),
    ({"use_beam_search": True, "stream": True}, "stream"),
    ({"use_beam_search": True, "logprobs": 1}, "logprobs"),
    ({"best_of": 3}, "best_of"),
])
def test_what_a_beam_search_cannot_honour_is_refused(http, extra, param):
    out = http.post("/v1/completions", json={"model": MODEL, "prompt": PROMPT, **extra})
    assert out.status_code == 400
    error = out.json()["error"]
    assert error["param"] == param and error["code"] == "unsupported_field"
    assert "not supported by metagen" in error["message"]


# -- messages ------------------------------------------------------------------------------------


def test_content_parts_are_joined(client):
    parts = [{"role": "system", "content": [{"type": "text", "text": "Tell a "},
                                            {"type": "text", "text": "story."}]},
             {"role": "user", "content": [{"type": "text", "text": "Once upon a time"}]}]
    got = client.chat.completions.create(model=MODEL, messages=parts, max_tokens=10,
                                         temperature=0)
    want = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=10,
                                          temperature=0)
    assert got.choices[0].message.content == want.choices[0].message.content
    assert got.usage.prompt_tokens == want.usage.prompt_tokens
    # an SDK message sent back (null refusal, tool_calls, ...) is a plain message
    echoed = want.choices[0].message.model_dump()
    again = client.chat.completions.create(model=MODEL, max_tokens=4, messages=[
        *MESSAGES, echoed, {"role": "user", "content": "And then?"}])
    assert again.choices[0].message.content is not None


@pytest.mark.parametrize("message, param", [
    ({"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]},
     "messages[0].content"),
    ({"role": "assistant", "content": None, "tool_calls": [
        {"id": "1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
     "messages[0].tool_calls"),
])
def test_images_and_tool_calls_in_messages_are_refused(http, message, param):
    out = http.post("/v1/chat/completions", json={"model": MODEL, "messages": [message]})
    assert out.status_code == 400
    error = out.json()["error"]
    assert error["param"] == param and "not supported by metagen" in error["message"]


# -- refused fields ------------------------------------------------------------------------------


@pytest.mark.parametrize("field, value", [
    ("tools", [{"type": "function", "function": {"name": "f", "parameters": {}}}]),
    ("tool_choice", "auto"), ("reasoning_effort", "low"), ("chat_template", "{{ 1 }}"),
    ("priority", 1),
])
def test_refused_fields_say_not_supported_by_metagen(http, field, value):
    out = http.post("/v1/chat/completions", json={"model": MODEL, "messages": MESSAGES,
                                                  field: value})
    assert out.status_code == 400
    error = out.json()["error"]
    assert error["param"] == field and error["code"] == "unsupported_field"
    assert f"{field} is not supported by metagen" in error["message"]


def test_unknown_field_is_a_different_400(http, client):
    out = http.post("/v1/completions", json={"model": MODEL, "prompt": PROMPT, "frobnicate": 1})
    assert out.status_code == 400 and out.json()["error"]["code"] == "unknown_field"
    assert "not supported by metagen" not in out.json()["error"]["message"]
    with pytest.raises(openai.BadRequestError, match="not supported by metagen"):
        client.chat.completions.create(model=MODEL, messages=MESSAGES, tools=[
            {"type": "function", "function": {"name": "f", "parameters": {}}}])


def test_strategy_requests_refuse_the_vllm_fields(http):
    out = http.post("/v1/completions", json={
        "model": MODEL, "prompt": PROMPT, "truncate_prompt_tokens": 3,
        "metagen": {"strategy": "best_of_n", "n": 2}})
    assert out.status_code == 400
    assert out.json()["error"]["param"] == "truncate_prompt_tokens"


# -- the table -----------------------------------------------------------------------------------


def test_the_readme_table_is_the_compat_table():
    assert markdown() in (ROOT / "README.md").read_text()


def test_every_supported_row_names_a_test_that_exists():
    for row in (*FIELDS, *ROUTES):
        if not row.supported:
            assert not row.test
            continue
        path, name = row.test.split("::")
        assert re.search(rf"^def {name}\(", (ROOT / path).read_text(), re.M), row.test
        assert Path(ROOT / path).is_file()
