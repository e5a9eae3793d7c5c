"""Bad sampling input over HTTP (V1-V25): every bad field is a 400 with an OpenAI-style body
naming it, never a 422/500/reset; the error body is bounded; the next valid request succeeds."""

from __future__ import annotations

import math

import pytest

from tests.server.conftest import MODEL

PROMPT = "Once upon a time"
GOOD = {"model": MODEL, "prompt": PROMPT, "max_tokens": 4, "temperature": 0}
MAX_ERROR_BYTES = 64 * 1024

# (row, fields merged into a completions body, the param the error must name)
BAD = [
    ("V1", {"temperature": -0.1}, "temperature"),
    ("V1", {"temperature": "0.7"}, "temperature"),
    ("V1", {"temperature": True}, "temperature"),
    ("V4", {"top_p": 0}, "top_p"), ("V4", {"top_p": -0.1}, "top_p"),
    ("V4", {"top_p": 1.0000001}, "top_p"), ("V4", {"top_p": 1.5}, "top_p"),
    ("V5", {"top_k": -2}, "top_k"), ("V5", {"top_k": 0.01}, "top_k"),
    ("V5", {"top_k": 2.5}, "top_k"),
    ("V6", {"min_p": -0.1}, "min_p"), ("V6", {"min_p": 1.1}, "min_p"),
    ("V6", {"presence_penalty": 3}, "presence_penalty"),
    ("V6", {"frequency_penalty": -2.5}, "frequency_penalty"),
    ("V6", {"repetition_penalty": 0}, "repetition_penalty"),
    ("V7", {"n": 0}, "n"), ("V7", {"n": -1}, "n"), ("V7", {"n": 1.5}, "n"),
    ("V7", {"n": 5000, "temperature": 1.0}, "n"),
    ("V7", {"n": 1024, "max_tokens": 1_000_000, "temperature": 1.0}, "n"),
    ("V8", {"n": 2, "temperature": 0}, "n"),
    ("V9", {"max_tokens": 0}, "max_tokens"), ("V9", {"max_tokens": -1}, "max_tokens"),
    ("V9", {"max_tokens": -186}, "max_tokens"), ("V9", {"max_tokens": 10**12}, "max_tokens"),
    ("V9", {"max_tokens": 600}, "max_tokens"),  # prompt + max_tokens > the context (512)
    ("V9", {"max_tokens": "5"}, "max_tokens"),
    ("V10", {"min_tokens": 10, "max_tokens": 5}, "min_tokens"),
    ("V11", {"stop": ""}, "stop"), ("V11", {"stop": [""]}, "stop"),
    ("V11", {"stop": [f"s{i}" for i in range(10_000)]}, "stop"),
    ("V11", {"stop": "x" * 1_000_000}, "stop"),
    ("V11", {"stop": 5}, "stop"),
    ("V13", {"logprobs": -2}, "logprobs"), ("V13", {"logprobs": 21}, "logprobs"),
    ("V13", {"logprobs": -1}, "logprobs"),
    ("V14", {"logit_bias": {"abc": 1}}, "logit_bias"),
    ("V14", {"logit_bias": {"-1": 1}}, "logit_bias"),
    ("V14", {"logit_bias": {"512": 1}}, "logit_bias"),
    ("V14", {"logit_bias": [1, 2]}, "logit_bias"),
    ("V15", {"stop_token_ids": [512]}, "stop_token_ids"),
    ("V15", {"allowed_token_ids": []}, "allowed_token_ids"),
    ("V15", {"allowed_token_ids": [99999]}, "allowed_token_ids"),
    ("V16", {"prompt": ""}, "prompt"), ("V16", {"prompt": []}, "prompt"),
    ("V16", {"prompt": [[]]}, "prompt"), ("V16", {"prompt": [-1]}, "prompt"),
    ("V16", {"prompt": [512]}, "prompt"), ("V16", {"prompt": None}, "prompt"),
    ("V16", {"prompt": {"a": 1}}, "prompt"),
    ("V17", {"prompt": "Once upon a time " * 200}, "prompt"),
    ("V18", {"num_beams": 0}, "num_beams"),  # not a field: beam search is use_beam_search, n
    ("V19", {"guided_regex": "("}, "guided_regex"),  # a bad constraint (test_structured.py)
    ("V21", {"best_of": 2}, "best_of"), ("V21", {"foo": 1}, "foo"),
    ("V23", {"seed": 2**64}, "seed"), ("V23", {"seed": "abc"}, "seed"),
    ("V23", {"seed": -2}, "seed"),
    ("V25", {"prompt": ["x"] * 10_000}, "prompt"),
    ("V25", {"logit_bias": {str(-i): 1 for i in range(1, 10_000)}}, "logit_bias"),
    ("--", {"model": "other-model"}, "model"),
    ("--", {"stream": "yes"}, "stream"),
    ("--", {"echo": 1}, "echo"),
    ("--", {"stream_options": {"include_usage": True}}, "stream_options"),
]

CHAT_BAD = [
    ("V13", {"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ("V13", {"top_logprobs": 2}, "top_logprobs"),
    ("V9", {"max_completion_tokens": 0}, "max_completion_tokens"),
    ("--", {"messages": []}, "messages"),
    ("--", {"messages": "hi"}, "messages"),
    ("--", {"messages": [{"role": "wizard", "content": "x"}]}, "messages"),
    ("--", {"messages": [{"role": "user", "content": 5}]}, "messages"),
    ("--", {"messages": [{"role": "user"}]}, "messages"),
    ("--", {"continue_final_message": True, "add_generation_prompt": False},
     "continue_final_message"),  # the last message is the user's
    ("--", {"continue_final_message": True}, "continue_final_message"),  # both true
]


def _check_error(resp, param: str | None) -> dict:
    assert resp.status_code == 400, resp.text
    assert len(resp.content) <= MAX_ERROR_BYTES  # V25 / S14: bounded
    error = resp.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error" and error["param"] == param
    return error


def _good_after(http) -> None:
    resp = http.post("/v1/completions", json=GOOD)
    assert resp.status_code == 200 and resp.json()["choices"][0]["text"]


@pytest.mark.parametrize(("row", "fields", "param"), BAD,
                         ids=[f"{r}-{'-'.join(f)}-{i}" for i, (r, f, _) in enumerate(BAD)])
def test_bad_completion_field_is_a_400_naming_it(http, row, fields, param):
    resp = http.post("/v1/completions", json=GOOD | fields)
    if param == "model":
        assert resp.status_code == 404 and resp.json()["error"]["param"] == "model"
    else:
        _check_error(resp, param)
    _good_after(http)  # S11: the engine survived


@pytest.mark.parametrize(("row", "fields", "param"), CHAT_BAD,
                         ids=[f"{r}-{i}" for i, (r, _, _) in enumerate(CHAT_BAD)])
def test_bad_chat_field_is_a_400_naming_it(http, row, fields, param):
    body = {"model": MODEL, "max_tokens": 4, "temperature": 0,
            "messages": [{"role": "user", "content": "Hi"}]} | fields
    _check_error(http.post("/v1/chat/completions", json=body), param)
    _good_after(http)


def test_v9_context_overflow_names_both_numbers(http):
    error = _check_error(http.post("/v1/completions", json=GOOD | {"max_tokens": 600}),
                         "max_tokens")
    assert "600" in error["message"] and "512" in error["message"]


def test_v17_long_prompt_says_the_context_length(http):
    error = _check_error(http.post("/v1/completions",
                                   json=GOOD | {"prompt": "Once upon a time " * 200}), "prompt")
    assert "maximum context length" in error["message"] and "512" in error["message"]


def test_s7_caps_are_in_the_message(http):
    for fields, limit in (({"n": 5000, "temperature": 1.0}, "1024"),
                          ({"logprobs": 21}, "20"),
                          ({"n": 1024, "max_tokens": 1_000_000, "temperature": 1.0},
                           "16000000"),
                          ({"prompt": ["x"] * 10_000}, "256")):
        error = _check_error(http.post("/v1/completions", json=GOOD | fields),
                             next(iter(fields)))
        assert limit in error["message"]


@pytest.mark.parametrize("raw", [
    b"NaN", b"Infinity", b'{"model": "stories", "prompt": "x", "temperature": NaN}',
    b'{"model": "stories", "prompt": "x", "temperature": Infinity}',
    b'{"model": "stories", "prompt": "x", "temperature": -Infinity}',
    b'{"model": "stories", "prompt": "x", "temperature": 1e400}',
    b'"a string"', b"[1, 2]", b"null", b"", b"{", b'{"model": "stories",}', b"\xff\xfe{}",
    b"[" * 10_000 + b"]" * 10_000, b'{"a":' * 10_000 + b"1" + b"}" * 10_000,
    b'{"model": "stories", "prompt": "x", "seed": ' + b"9" * 5000 + b"}",
], ids=lambda raw: repr(raw[:24]))
def test_v20_hostile_json_bodies_are_400(http, raw):
    for route in ("/v1/completions", "/v1/chat/completions"):
        resp = http.post(route, content=raw, headers={"Content-Type": "application/json"})
        _check_error(resp, None)
    _good_after(http)


def test_v20_strings_with_brackets_do_not_count_as_nesting(http):
    body = GOOD | {"prompt": "[[[[{{{{" * 20 + "Once upon a time"}
    assert http.post("/v1/completions", json=body).status_code == 200


def test_v2_greedy_is_reproducible(http):
    body = GOOD | {"max_tokens": 12}
    first = http.post("/v1/completions", json=body).json()["choices"][0]["text"]
    assert http.post("/v1/completions", json=body).json()["choices"][0]["text"] == first


@pytest.mark.parametrize("temperature", [1e-8, 1e-4, 0.009])
def test_v3_tiny_temperatures_give_finite_nonempty_output(http, temperature):
    body = GOOD | {"temperature": temperature, "max_tokens": 8, "logprobs": 0, "seed": 1}
    [choice] = http.post("/v1/completions", json=body).json()["choices"]
    assert choice["text"] and all(math.isfinite(v)
                                  for v in choice["logprobs"]["token_logprobs"])


def test_accepted_edge_values(http):
    """V4 top_p 1.0, V5 top_k 1e9 (clamped) and -1/0, V14 bias 1e9 (clamped), V23 seed -1."""
    for fields in ({"top_p": 1.0}, {"top_k": 10**9}, {"top_k": -1}, {"top_k": 0},
                   {"logit_bias": {"5": 1e9}}, {"seed": -1, "temperature": 1.0}):
        assert http.post("/v1/completions", json=GOOD | fields).status_code == 200, fields


def test_v14_a_clamped_bias_forces_its_token(http):
    body = GOOD | {"logit_bias": {"5": 1e9}, "return_tokens_as_token_ids": True, "logprobs": 0}
    tokens = http.post("/v1/completions", json=body).json()["choices"][0]["logprobs"]["tokens"]
    assert tokens == ["token_id:5"] * 4


def test_v12_stop_string_across_tokens_never_leaks_into_the_stream(http):
    body = GOOD | {"max_tokens": 30}
    free = http.post("/v1/completions", json=body).json()["choices"][0]["text"]
    stop = "re wa"  # spans " there" + " was" in the greedy story
    assert stop in free
    body["stop"] = [stop]
    whole = http.post("/v1/completions", json=body).json()["choices"][0]
    assert whole["text"] == free[:free.index(stop)] and whole["stop_reason"] == stop
    resp = http.post("/v1/completions", json=body | {"stream": True})
    deltas = [line for line in resp.text.splitlines() if line.startswith("data: {")]
    import json
    parts = [json.loads(line[6:])["choices"][0]["text"] for line in deltas]
    assert "".join(parts) == whole["text"]
    streamed = ""
    for part in parts:  # no prefix of the stop string ever sent past the final text
        streamed += part
        assert whole["text"].startswith(streamed)


@pytest.mark.parametrize("prompt", ["   ", "\n\t "])
def test_v16_whitespace_prompt_is_bos_and_its_tokens_as_the_library(http, ref_gen, prompt):
    """Defined BOS behaviour: a whitespace-only text prompt is read as any text (BOS, then its
    tokens) and answered as the library answers it; the engine serves the next request."""
    from metagen.types import SamplingParams
    resp = http.post("/v1/completions", json=GOOD | {"prompt": prompt, "max_tokens": 6})
    assert resp.status_code == 200
    want_ids = ref_gen.tokenizer(prompt)["input_ids"]
    assert resp.json()["usage"]["prompt_tokens"] == len(want_ids) > 1
    [[want]] = ref_gen.generate([prompt], SamplingParams(temperature=0, max_tokens=6))
    assert resp.json()["choices"][0]["text"] == want.text
    _good_after(http)


def test_v15_empty_stop_token_ids_is_no_stop_tokens(http):
    """Policy: ``stop_token_ids: []`` indexes nothing and means none (``allowed_token_ids: []``,
    which would mask every token, is a 400 above)."""
    body = GOOD | {"max_tokens": 12}
    plain = http.post("/v1/completions", json=body).json()["choices"][0]
    empty = http.post("/v1/completions", json=body | {"stop_token_ids": []}).json()["choices"][0]
    assert empty["text"] == plain["text"] and empty["finish_reason"] == plain["finish_reason"]
