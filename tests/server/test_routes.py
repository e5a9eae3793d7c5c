"""The routes against the library: a running server on loopback answers what ``LocalGenerator``
computes for the same model, prompt and seed (texts, token ids, logprobs), streamed or not."""

from __future__ import annotations

import json

import pytest

from metagen.types import SamplingParams
from tests.server.conftest import MODEL
from tests.tolerances import FLOAT_LOGPROB_TOL

PROMPT = "Once upon a time"
MESSAGES = [{"role": "system", "content": "Tell a story."},
            {"role": "user", "content": "Once upon a time"}]


def _events(text: str) -> list:
    """The JSON events of an SSE body, and the final marker."""
    out = []
    for line in text.splitlines():
        if line.startswith("data: "):
            data = line[len("data: "):]
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


def test_models_and_health(http):
    models = http.get("/v1/models").json()
    assert [m["id"] for m in models["data"]] == [MODEL]
    assert "vllm" in models["data"][0]["owned_by"]  # clients that detect vLLM use its extensions
    assert http.get("/health").json() == {"status": "ok"}


def test_completions_equal_the_library_for_the_same_seed(http, ref_gen):
    body = {"model": MODEL, "prompt": PROMPT, "max_tokens": 16, "n": 3, "temperature": 0.9,
            "top_k": 50, "seed": 11, "logprobs": 2, "return_tokens_as_token_ids": True}
    got = http.post("/v1/completions", json=body).json()
    [want] = ref_gen.generate([PROMPT], SamplingParams(n=3, temperature=0.9, top_k=50, seed=11,
                                                       max_tokens=16, logprobs=2))
    assert [c["index"] for c in got["choices"]] == [0, 1, 2]
    for choice, ref in zip(got["choices"], want):
        assert choice["text"] == ref.text
        block = choice["logprobs"]
        assert [int(t.split(":")[1]) for t in block["tokens"]] == list(ref.token_ids)
        assert block["token_logprobs"] == pytest.approx(list(ref.logprobs), abs=FLOAT_LOGPROB_TOL)
        assert [{int(k.split(":")[1]) for k in d} for d in block["top_logprobs"]] == \
            [set(d) for d in ref.top_logprobs]
        assert choice["finish_reason"] == ref.finish_reason
    usage = got["usage"]
    assert usage["completion_tokens"] == sum(len(c.token_ids) for c in want)
    assert usage["prompt_tokens"] == len(ref_gen.tokenizer(PROMPT)["input_ids"])


def test_text_offsets_index_the_text(http):
    body = {"model": MODEL, "prompt": PROMPT, "max_tokens": 12, "temperature": 0, "logprobs": 0}
    [choice] = http.post("/v1/completions", json=body).json()["choices"]
    block = choice["logprobs"]
    assert "".join(block["tokens"]) == choice["text"]
    for token, offset in zip(block["tokens"], block["text_offset"]):
        assert choice["text"][offset:offset + len(token)] == token


def test_several_prompts_and_token_id_prompts(http, ref_gen):
    ids = ref_gen.tokenizer("One day")["input_ids"]
    body = {"model": MODEL, "prompt": [PROMPT, "One day"], "max_tokens": 8, "temperature": 0}
    by_text = http.post("/v1/completions", json=body).json()["choices"]
    body["prompt"] = [ref_gen.tokenizer(PROMPT)["input_ids"], ids]
    by_ids = http.post("/v1/completions", json=body).json()["choices"]
    want = ref_gen.generate([PROMPT, "One day"], SamplingParams(temperature=0, max_tokens=8))
    assert [c["text"] for c in by_text] == [c["text"] for c in by_ids] == \
        [w[0].text for w in want]


def test_echo_gives_the_prompt_logprobs_of_the_library(http, ref_gen):
    body = {"model": MODEL, "prompt": PROMPT, "max_tokens": 0, "echo": True, "logprobs": 0,
            "temperature": 0}
    [choice] = http.post("/v1/completions", json=body).json()["choices"]
    assert choice["text"] == PROMPT
    lps = choice["logprobs"]["token_logprobs"]
    assert lps[0] is None and len(lps) == len(ref_gen.tokenizer(PROMPT)["input_ids"])
    [[tail]] = ref_gen.score(["Once upon"], [[" a time"]])
    assert sum(lps[-2:]) == pytest.approx(tail, abs=1e-4)


def test_echo_with_generation_prepends_the_prompt(http):
    body = {"model": MODEL, "prompt": PROMPT, "max_tokens": 6, "echo": True, "temperature": 0}
    plain = http.post("/v1/completions", json=body | {"echo": False}).json()["choices"][0]
    [echoed] = http.post("/v1/completions", json=body).json()["choices"]
    assert echoed["text"] == PROMPT + plain["text"]


def test_chat_equals_the_library(http, ref_gen):
    body = {"model": MODEL, "messages": MESSAGES, "max_tokens": 16, "n": 2, "temperature": 1.0,
            "seed": 3, "logprobs": True, "top_logprobs": 3, "return_tokens_as_token_ids": True}
    got = http.post("/v1/chat/completions", json=body).json()
    [want] = ref_gen.generate([MESSAGES], SamplingParams(n=2, temperature=1.0, seed=3,
                                                         max_tokens=16, logprobs=3))
    assert got["object"] == "chat.completion"
    for choice, ref in zip(got["choices"], want):
        assert choice["message"] == {"role": "assistant", "content": ref.text}
        content = choice["logprobs"]["content"]
        assert [int(e["token"].split(":")[1]) for e in content] == list(ref.token_ids)
        assert [e["logprob"] for e in content] == pytest.approx(list(ref.logprobs),
                                                                abs=FLOAT_LOGPROB_TOL)
        assert all(len(e["top_logprobs"]) == 3 for e in content)


def test_chat_continues_a_final_assistant_message(http, ref_gen):
    partial = MESSAGES + [{"role": "assistant", "content": "There was a"}]
    body = {"model": MODEL, "messages": partial, "max_tokens": 10, "temperature": 0,
            "add_generation_prompt": False, "continue_final_message": True}
    [choice] = http.post("/v1/chat/completions", json=body).json()["choices"]
    [[want]] = ref_gen.generate([partial], SamplingParams(temperature=0, max_tokens=10))
    assert choice["message"]["content"] == want.text


@pytest.mark.parametrize("route", ["/v1/completions", "/v1/chat/completions"])
def test_stream_equals_the_whole_response(http, route):
    body = {"model": MODEL, "max_tokens": 20, "n": 2, "temperature": 1.0, "seed": 9,
            "stop": ["."]}
    body |= {"prompt": PROMPT} if route == "/v1/completions" else {"messages": MESSAGES}
    whole = http.post(route, json=body).json()
    resp = http.post(route, json=body | {"stream": True,
                                         "stream_options": {"include_usage": True}})
    assert resp.headers["content-type"].startswith("text/event-stream")
    events = _events(resp.text)
    assert events[-1] == "[DONE]"
    texts, finish = {0: "", 1: ""}, {}
    for event in events[:-2]:
        for choice in event["choices"]:
            part = choice.get("text") if "text" in choice else choice["delta"].get("content")
            texts[choice["index"]] += part or ""
            if choice["finish_reason"]:
                finish[choice["index"]] = choice["finish_reason"]
    chat = route.endswith("chat/completions")
    for choice in whole["choices"]:
        assert texts[choice["index"]] == (choice["message"]["content"] if chat
                                          else choice["text"])
        assert finish[choice["index"]] == choice["finish_reason"]
    assert events[-2]["choices"] == [] and events[-2]["usage"] == whole["usage"] | {
        "prompt_tokens_details": events[-2]["usage"]["prompt_tokens_details"]}


def test_include_stop_str_in_output(http):
    body = {"model": MODEL, "prompt": PROMPT, "max_tokens": 40, "temperature": 0, "stop": ["."]}
    [plain] = http.post("/v1/completions", json=body).json()["choices"]
    assert plain["finish_reason"] == "stop" and plain["stop_reason"] == "."
    body["include_stop_str_in_output"] = True
    [with_stop] = http.post("/v1/completions", json=body).json()["choices"]
    assert with_stop["text"] == plain["text"] + "."


def _metrics(http) -> dict[str, str]:
    text = http.get("/metrics").text
    return dict(line.rsplit(" ", 1) for line in text.splitlines() if not line.startswith("#"))


def test_metrics_count_requests_tokens_and_the_engine(http):
    before = _metrics(http)
    body = {"model": MODEL, "prompt": PROMPT, "max_tokens": 4, "temperature": 0,
            "ignore_eos": True}
    http.post("/v1/completions", json=body)
    http.post("/v1/completions", json=body | {"stream": True})
    lines = _metrics(http)
    assert int(lines['metagen_requests_total{route="/v1/completions",status="200"}']) >= 2
    assert int(lines["metagen_generation_tokens_total"]) == \
        int(before["metagen_generation_tokens_total"]) + 8
    assert int(lines["metagen_prompt_tokens_total"]) == \
        int(before["metagen_prompt_tokens_total"]) + 2 * 5
    assert int(lines["metagen_kv_blocks_free"]) + int(lines["metagen_kv_blocks_used"]) > 0
    assert int(lines["metagen_num_requests_running"]) == 0
    # idle: no sequence holds a block; every block is free or kept by the prefix cache alone
    assert int(lines["metagen_kv_blocks_in_requests"]) == 0
    assert int(lines["metagen_kv_blocks_free"]) + int(lines["metagen_kv_blocks_cached"]) == \
        int(lines["metagen_kv_blocks_free"]) + int(lines["metagen_kv_blocks_used"])
    assert 0.0 < float(lines["metagen_prefix_cache_hit_rate"]) <= 1.0  # the prompt repeats
    assert int(lines['metagen_request_latency_seconds_count{route="/v1/completions"}']) >= 2
