"""vLLM's tokenizer routes against the served model's own tokenizer: ``/tokenize`` (text and
chat), ``/detokenize``, ``/tokenizer_info`` (what lm-evaluation-harness's remote tokenizer reads)
and ``/version``, over plain HTTP on a running server."""

from __future__ import annotations

import pytest

import metagen
from tests.server.conftest import MODEL

MESSAGES = [{"role": "system", "content": "Tell a story."},
            {"role": "user", "content": "Once upon a time"}]
TEXTS = ["Once upon a time", "", "  two  spaces", "</s>", "Lily said: \"hi!\"\n"]


@pytest.mark.parametrize("text", TEXTS)
def test_tokenize_equals_the_tokenizer(http, served_gen, text):
    tok = served_gen.tokenizer
    for special in (True, False):
        got = http.post("/tokenize", json={"model": MODEL, "prompt": text,
                                           "add_special_tokens": special}).json()
        want = tok(text, add_special_tokens=special)["input_ids"]
        assert got == {"count": len(want), "max_model_len": served_gen.engine.max_model_len,
                       "tokens": want, "token_strs": None}
    default = http.post("/tokenize", json={"prompt": text}).json()  # model is optional
    assert default["tokens"] == tok(text)["input_ids"]


def test_tokenize_a_conversation_as_the_chat_route_renders_it(http, served_gen):
    tok = served_gen.tokenizer
    text = tok.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    want = tok(text, add_special_tokens=False)["input_ids"]
    got = http.post("/tokenize", json={"model": MODEL, "messages": MESSAGES,
                                       "return_token_strs": True}).json()
    assert got["tokens"] == want
    assert got["token_strs"] == tok.convert_ids_to_tokens(want)
    chat = http.post("/v1/chat/completions", json={"model": MODEL, "messages": MESSAGES,
                                                   "max_tokens": 1}).json()
    assert chat["usage"]["prompt_tokens"] == got["count"]
    bare = http.post("/tokenize", json={"messages": MESSAGES,
                                        "add_generation_prompt": False}).json()
    plain = tok.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=False)
    assert bare["tokens"] == tok(plain, add_special_tokens=False)["input_ids"]


@pytest.mark.parametrize("text", TEXTS)
def test_detokenize_equals_the_tokenizer(http, served_gen, text):
    tok = served_gen.tokenizer
    ids = tok(text)["input_ids"]
    got = http.post("/detokenize", json={"model": MODEL, "tokens": ids}).json()
    assert got == {"prompt": tok.decode(ids)}
    again = http.post("/detokenize", json={"tokens": tok(text, add_special_tokens=False)
                                           ["input_ids"]}).json()
    assert again["prompt"] == tok.decode(tok(text, add_special_tokens=False)["input_ids"])


@pytest.mark.parametrize("route, body, param, status", [
    ("/detokenize", {"tokens": [10 ** 6]}, "tokens", 400),
    ("/detokenize", {"tokens": "abc"}, "tokens", 400),
    ("/tokenize", {"prompt": "x", "model": "other"}, "model", 404),
    ("/tokenize", {"prompt": 3}, "prompt", 400),
    ("/tokenize", {"prompt": "x", "messages": MESSAGES}, "messages", 400),
    ("/tokenize", {"prompt": "x", "typo": 1}, "typo", 400),
])
def test_bad_tokenizer_requests_name_the_field(http, route, body, param, status):
    out = http.post(route, json=body)
    assert out.status_code == status
    assert out.json()["error"]["param"] == param


def test_tokenizer_info_is_the_tokenizer_config(http, served_gen):
    tok = served_gen.tokenizer
    info = http.get("/tokenizer_info").json()
    assert info["tokenizer_class"] == type(tok).__name__
    for name in ("bos_token", "eos_token", "pad_token", "unk_token"):
        assert info[name] == getattr(tok, name)
    assert info["chat_template"] == tok.chat_template
    assert info["model_max_length"] == served_gen.engine.max_model_len
    assert not [k for k in info if k.endswith(("_file", "_path", "name_or_path"))]
    # what lm-eval's remote tokenizer derives from it: the end and start token ids
    eos = http.post("/tokenize", json={"prompt": info["eos_token"],
                                       "add_special_tokens": False}).json()["tokens"]
    assert eos[0] == tok.eos_token_id


def test_version(http):
    assert http.get("/version").json() == {"version": metagen.__version__}


def test_tokenizer_routes_need_the_api_key(server):
    import httpx
    with httpx.Client(base_url=server.url, timeout=30) as anonymous:
        assert anonymous.post("/tokenize", json={"prompt": "x"}).status_code == 401
        assert anonymous.get("/tokenizer_info").status_code == 401
