"""OpenAIGenerator against a fault-injecting OpenAI-compatible server on loopback.

Tests named ``test_cN_*`` are the rows of the remote-backend fault table.
"""

from __future__ import annotations

import asyncio
import logging
import math
import subprocess
import sys
import threading
import time
from collections import Counter
from typing import Any

import pytest

pytest.importorskip("httpx", reason="needs httpx: pip install 'metagen[openai]' (httpx openai)")

from metagen.errors import (  # noqa: E402
    BackendProtocolError,
    BackendTimeout,
    CapabilityError,
    InsufficientSamples,
    InvalidRequest,
    RateLimited,
    ServerError,
    TransportError,
    TruncatedStream,
)
from metagen.generators.openai import OpenAIGenerator  # noqa: E402
from metagen.generators.openai_retry import RetryPolicy, parse_retry_after  # noqa: E402
from metagen.types import SamplingParams  # noqa: E402

from .fault_server import Fault, FaultServer, Seen, fault_generators, ok_body  # noqa: E402

P = SamplingParams(n=1, temperature=0.7, max_tokens=8, seed=100)


@pytest.fixture
def make():
    """make(plan=None, **generator_options) -> (server, generator); both stopped afterwards."""
    with fault_generators() as factory:
        yield factory


def one(gen, params=P, prompt="q"):
    return gen.generate_samples([prompt], params)[0][0]


def first_attempts_fail(fault: Fault, times: int = 1):
    return lambda seen: fault if seen.attempt <= times else Fault()


# --- mapping, parsing, usage -----------------------------------------------------------------


def test_completions_and_chat_requests_map_every_param(make):
    server, gen = make()
    params = SamplingParams(n=3, temperature=0.5, top_p=0.9, top_k=5, min_p=0.1,
                            repetition_penalty=1.1, presence_penalty=0.2, frequency_penalty=0.3,
                            seed=7, stop=("\n",), max_tokens=9, min_tokens=1, ignore_eos=True,
                            logprobs=2)
    out = gen.generate(["a b", [{"role": "user", "content": "c d e"}]], params)
    assert [[c.text for c in row] for row in out] == [["answer 1", "answer 2", "answer 0"]] * 2
    assert out[0][0].logprobs == (-0.5, -0.5) and out[0][0].token_ids == (10, 11)
    assert out[1][0].top_logprobs == ({10: -0.5}, {11: -0.5})
    posts = server.posts
    paths = Counter(s.path for s in posts)
    assert paths == {"/v1/completions": 3, "/v1/chat/completions": 3}
    body = next(s.body for s in posts if s.path == "/v1/completions" and s.body["seed"] == 7)
    assert body == {"model": "m", "n": 1, "max_tokens": 9, "temperature": 0.5, "prompt": "a b",
                    "top_p": 0.9, "presence_penalty": 0.2, "frequency_penalty": 0.3, "seed": 7,
                    "stop": ["\n"], "logprobs": 2, "return_tokens_as_token_ids": True,
                    "top_k": 5, "min_p": 0.1, "repetition_penalty": 1.1, "min_tokens": 1,
                    "ignore_eos": True, "include_stop_str_in_output": False}
    chat = next(s.body for s in posts if s.path == "/v1/chat/completions")
    assert chat["logprobs"] is True and chat["top_logprobs"] == 2
    assert sorted(s.body["seed"] for s in posts) == [7, 7, 8, 8, 9, 9]
    usage = gen.usage
    assert usage.prompt_tokens == 2 + 3  # once per prompt, not once per sample
    assert usage.generated_tokens == 12 and usage.calls == 1
    assert not usage.flops_known and math.isnan(usage.generator_flops)


def test_flops_from_declared_num_params_and_budget_refuses_unknown_flops(make):
    from metagen.strategies.budget import Budget
    from metagen.types import Usage
    _, gen = make(num_params=1000)
    gen.generate(["a b"], P)
    assert gen.usage.generator_flops == 2 * 1000 * (2 + 2)
    with pytest.raises(CapabilityError, match="max_flops"):
        Budget(max_flops=1e9).exhausted(Usage(generator_flops=math.nan))


def test_unsupported_param_is_a_capability_error_naming_it_before_any_request(make):
    server, gen = make(dialect="openai")
    for params, name in ((P.with_(top_k=5), "top_k"), (P.with_(min_tokens=2), "min_tokens"),
                         (P.with_(logprobs=3), "logprobs=3")):
        with pytest.raises(CapabilityError, match=name):
            gen.generate(["q"], params)
    with pytest.raises(CapabilityError, match="mirostat_tau"):
        make()[1].generate(["q"], P.with_(mirostat_tau=3.0))
    assert server.posts == []
    assert gen.capabilities.seeded is False and gen.capabilities.logprobs is False


def test_a_final_assistant_message_is_continued_or_refused(make):
    server, gen = make()
    convo = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "Step 1:"}]
    gen.generate([convo], P)
    body = server.posts[0].body
    assert body["continue_final_message"] is True and body["add_generation_prompt"] is False
    server2, gen2 = make(dialect="openai")
    with pytest.raises(CapabilityError, match="continue a final assistant message"):
        gen2.generate([convo], P)
    assert server2.posts == []


def test_constructor_rejects_bad_options_without_starting_anything():
    from metagen.errors import InvalidParameterError
    threads = threading.active_count()
    for kw in ({"dialect": "tgi"}, {"max_concurrency": 0}, {"timeout": -1},
               {"max_retries": -1}, {"num_params": 0}):
        with pytest.raises(InvalidParameterError):
            OpenAIGenerator("http://127.0.0.1:9/v1", "m", **kw)
    with pytest.raises(InvalidParameterError, match="base_url"):
        OpenAIGenerator("127.0.0.1:9", "m")
    assert threading.active_count() == threads


def test_dialect_probed_from_models_owned_by(make):
    server, gen = make(dialect=None, server_kw={"owned_by": "sglang"})
    gen.generate(["q"], P.with_(top_k=4))
    assert gen.dialect.name == "sglang"
    assert "top_k" in server.posts[0].body and "include_stop_str_in_output" not in \
        server.posts[0].body


def test_dialect_probe_is_retried_and_a_server_without_models_is_plain_openai(make):
    server, gen = make(dialect=None, server_kw={"owned_by": "sglang", "models_status": [503]})
    gen.generate(["q"], P)
    assert gen.dialect.name == "sglang"  # the 503 was retried, not taken as "unknown server"
    server, gen = make(dialect=None, server_kw={"owned_by": "sglang", "models_status": [404]})
    gen.generate(["q"], P)
    assert gen.dialect.name == "openai"  # answered, without a model list: standard fields


def test_dialect_probe_of_an_unreachable_server_raises_instead_of_guessing(make):
    server, gen = make(dialect=None, max_retries=1)
    server.stop()
    with pytest.raises(TransportError):
        gen.generate(["q"], P.with_(top_k=4))  # not a CapabilityError for top_k on "openai"
    assert gen._dialect is None  # nothing cached: the next call probes again


def test_scripted_llama_cpp_servers_get_metagen_sampling_defaults_sent(make):
    """llama.cpp's servers sample with top_k=40, top_p=0.95, min_p=0.05 (llama-cpp-python's
    also repeat_penalty=1.1) when a field is left out: metagen's neutral values are sent. The
    llama-cpp-python server is probed by its /v1/models answer (owned_by "me", permissions)."""
    neutral = {"top_p": 1.0, "top_k": 0, "min_p": 0.0, "repeat_penalty": 1.0}
    server, gen = make(dialect=None, server_kw={"owned_by": "me"})
    gen.generate(["q"], P.with_(top_k=-1))
    assert gen.dialect.name == "llamacpp-python" and gen.capabilities.seeded
    assert {k: server.posts[0].body.get(k) for k in neutral} == neutral
    gen.generate(["q"], P.with_(top_k=5, top_p=0.9, min_p=0.1, repetition_penalty=1.2,
                                min_tokens=2))
    assert {k: server.posts[1].body.get(k) for k in [*neutral, "min_tokens"]} == \
        {"top_p": 0.9, "top_k": 5, "min_p": 0.1, "repeat_penalty": 1.2, "min_tokens": 2}
    for params, name in ((P.with_(typical_p=0.5), "typical_p"),
                         (P.with_(ignore_eos=True), "ignore_eos")):  # its server drops them
        with pytest.raises(CapabilityError, match=name):
            gen.generate(["q"], params)
    server2, gen2 = make(dialect="llamacpp")
    gen2.generate(["q"], P.with_(typical_p=0.5))
    assert {k: server2.posts[0].body.get(k) for k in [*neutral, "typical_p"]} == \
        {**neutral, "typical_p": 0.5}
    assert len(server.posts) == 2


def _llama_cpp_python_body(text: str, tokens: list[str]) -> dict[str, Any]:
    """A llama-cpp-python completions answer: no stop_reason; the logprobs tokens run to the
    end of the stop string that cut the text (as the real server answers)."""
    logprobs = {"tokens": tokens, "token_logprobs": [-0.5] * len(tokens),
                "text_offset": [0] * len(tokens), "top_logprobs": [{t: -0.5} for t in tokens]}
    return {"id": "x", "object": "text_completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "text": text, "finish_reason": "stop",
                         "logprobs": logprobs}],
            "usage": {"prompt_tokens": 2, "completion_tokens": len(tokens), "total_tokens": 9}}


@pytest.mark.parametrize("tokens, expected", [
    ([" Lily", " ran", "."], "."),          # cut by "." (the overhang)
    ([" Lily", " ran", "!\n"], "!"),        # the stop ends inside the last token
    ([" Lily", " ran"], None),              # the tokens end with the text: end of sequence
    ([" Lily", " ran", " on"], None),       # an overhang no stop string begins
    ([" Lucy", " ran", "."], None),         # tokens that do not spell the text
])
def test_scripted_stop_string_read_from_the_tokens_when_the_server_names_none(
        make, tokens, expected):
    server, gen = make(lambda seen: Fault("json", body=_llama_cpp_python_body(" Lily ran",
                                                                              tokens)),
                       dialect="llamacpp-python")
    params = P.with_(stop=(".", "!"))
    [[out]] = gen.generate(["q"], params)
    assert out.text == " Lily ran" and out.finish_reason == "stop"
    assert out.stop_reason == expected and out.logprobs is None  # logprobs not asked for
    assert server.posts[0].body["logprobs"] == 0
    gen.generate(["q"], P)  # no stop strings: no logprobs asked for them
    assert "logprobs" not in server.posts[1].body


def test_importing_metagen_does_not_import_httpx():
    code = "import sys, metagen; assert 'httpx' not in sys.modules; metagen.OpenAIGenerator"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_fault_server_speaks_the_protocol_the_openai_sdk_expects(make):
    openai = pytest.importorskip("openai", reason="pip install openai")
    server, _ = make()
    client = openai.OpenAI(base_url=server.url, api_key="k", max_retries=0)
    try:
        out = client.completions.create(model="m", prompt="x y", max_tokens=4, seed=4)
        chat = client.chat.completions.create(model="m", messages=[{"role": "user",
                                                                     "content": "x"}])
    finally:
        client.close()
    assert out.choices[0].text == "answer 1" and out.usage.prompt_tokens == 2
    assert chat.choices[0].message.content == "answer 0"


# --- C1 .. C4: rate limits, 5xx, 4xx, hangs --------------------------------------------------


def test_c1_retry_after_seconds_is_waited(make):
    _, gen = make(first_attempts_fail(Fault("status", 429, {"Retry-After": "1"})))
    start = time.monotonic()
    s = one(gen)
    assert s.outcome == "ok" and s.attempts == 2
    assert 0.9 <= time.monotonic() - start < 2.0


def test_c1_retry_after_beyond_cap_fails_fast(make):
    server, gen = make(lambda seen: Fault("status", 429, {"Retry-After": "600"}))
    start = time.monotonic()
    s = one(gen)
    # honouring the Retry-After would take 600 s; a tenth of it says the call did not wait,
    # whatever the machine's load (one attempt, one request: no retry at all)
    assert time.monotonic() - start < 60
    assert s.outcome == "rate_limited" and isinstance(s.error, RateLimited)
    assert s.error.retry_after == 600 and s.attempts == 1 and len(server.posts) == 1


def test_c1_retry_after_http_date_is_parsed(make):
    from email.utils import format_datetime
    from datetime import datetime, timedelta, timezone
    now = datetime.now(timezone.utc)
    assert parse_retry_after(format_datetime(now + timedelta(seconds=30), usegmt=True),
                             now) == pytest.approx(30, abs=1)
    when = format_datetime(datetime.now(timezone.utc) + timedelta(seconds=2), usegmt=True)
    _, gen = make(first_attempts_fail(Fault("status", 429, {"Retry-After": when})))
    start = time.monotonic()
    assert one(gen).outcome == "ok"
    assert 0.5 <= time.monotonic() - start < 2.5  # the date has whole-second resolution


def test_c1_garbage_retry_after_falls_back_to_backoff(make):
    assert parse_retry_after("soon-ish") is None and parse_retry_after("-3") is None
    _, gen = make(first_attempts_fail(Fault("status", 429, {"Retry-After": "soon-ish"}), 2))
    start = time.monotonic()
    s = one(gen)
    assert s.outcome == "ok" and s.attempts == 3 and time.monotonic() - start < 0.5


@pytest.mark.parametrize("status", [500, 502, 503, 504])
def test_c2_server_errors_then_success(make, status):
    server, gen = make(first_attempts_fail(Fault("status", status), 2))
    s = one(gen)
    assert s.outcome == "ok" and s.attempts == 3 and len(server.posts) == 3


def test_c2_attempts_bounded_and_backoff_jittered(make):
    server, gen = make(lambda seen: Fault("status", 503), max_retries=2)
    s = one(gen)
    assert s.outcome == "server_error" and isinstance(s.error, ServerError)
    assert s.error.status == 503 and s.attempts == 3 and len(server.posts) == 3
    import random
    policy, rng = RetryPolicy(backoff_base=1.0, backoff_cap=4.0), random.Random(0)
    waits = [policy.backoff(k, rng) for k in range(4) for _ in range(20)]
    assert all(0.5 <= w <= 1 for w in waits[:20]) and all(2 <= w <= 4 for w in waits[40:])
    assert len(set(waits)) == len(waits)  # jittered


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
def test_c3_client_errors_are_not_retried(make, status):
    body = {"error": {"message": "temperature is bad", "param": "temperature", "type": "x"}}
    server, gen = make(lambda seen: Fault("status", status, body=body))
    if status in (401, 403, 404):
        with pytest.raises(InvalidRequest) as info:
            gen.generate(["q"], P)
        err = info.value
    else:
        s = one(gen)
        assert s.outcome == "invalid_request" and s.attempts == 1
        err = s.error
    assert isinstance(err, InvalidRequest) and err.status == status
    assert err.param == "temperature" and err.message == "temperature is bad"
    assert len(server.posts) == 1


def _pending_tasks(gen, wait: float = 2.0) -> int:
    """Tasks left on the generator's loop once a cancelled call has had ``wait`` s to unwind."""
    async def count() -> int:
        return len(asyncio.all_tasks()) - 1
    end = time.monotonic() + wait
    while (left := asyncio.run_coroutine_threadsafe(count(), gen._loop.loop).result(2)) \
            and time.monotonic() < end:
        time.sleep(0.02)
    return left


def test_c4_hang_fails_at_the_call_deadline_without_leaks(make):
    server, gen = make(lambda seen: Fault("hang"), timeout=0.5, max_retries=3)
    start = time.monotonic()
    out = gen.generate_samples(["q"], P.with_(n=3))[0]
    assert 0.45 <= time.monotonic() - start < 1.5  # not (retries + 1) x timeout = 2 s
    assert [s.outcome for s in out] == ["timeout"] * 3
    assert all(isinstance(s.error, BackendTimeout) for s in out)
    deadline = time.monotonic() + 2
    while server.disconnects < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.disconnects == 3 and server.in_flight == 0  # sockets closed
    assert _pending_tasks(gen) == 0
    assert out[0].completion.finish_reason == "error" and out[0].completion.stop_reason == \
        "timeout"


# --- C8 .. C10: bad bodies, transport ------------------------------------------------------


def test_c8_invalid_json_is_a_protocol_error_wrapping_the_decode_error(make):
    server, gen = make(lambda seen: Fault("raw", 200, body=b"{not json"))
    s = one(gen)
    assert isinstance(s.error, BackendProtocolError) and isinstance(s.error.cause, ValueError)
    assert s.outcome == "server_error" and s.attempts == 1


def test_c8_html_502_page_is_a_protocol_error_after_retries(make):
    page = b"<html><body><h1>502 Bad Gateway</h1></body></html>"
    server, gen = make(lambda seen: Fault("raw", 502, body=page), max_retries=2)
    s = one(gen)
    assert isinstance(s.error, BackendProtocolError) and isinstance(s.error.cause, ValueError)
    assert s.error.status == 502 and "502 Bad Gateway" in s.error.message and s.attempts == 3


def _good() -> dict[str, Any]:
    return ok_body({"prompt": "q", "seed": 100}, "answer 1")


def _mutated(how: str) -> dict[str, Any]:
    body = _good()
    if how == "no_choices":
        body["choices"] = []
    elif how == "n_mismatch":
        body["choices"] = body["choices"] * 2
    elif how == "null_text":
        body["choices"][0]["text"] = None
    elif how == "no_finish_reason":
        body["choices"][0]["finish_reason"] = None
    elif how == "short_logprobs":
        body = ok_body({"prompt": "q", "seed": 100, "logprobs": 1}, "a b c")
        body["choices"][0]["logprobs"]["token_logprobs"].pop()
    return body


@pytest.mark.parametrize("how", ["no_choices", "n_mismatch", "null_text", "no_finish_reason",
                                 "short_logprobs"])
def test_c9_malformed_responses_are_typed_errors(make, how):
    _, gen = make(lambda seen: Fault("json", body=_mutated(how)))
    s = one(gen, P.with_(logprobs=1) if how == "short_logprobs" else P)
    assert s.outcome == "server_error" and isinstance(s.error, BackendProtocolError)
    assert s.attempts == 1 and s.completion.finish_reason == "error"


def test_c9_chat_null_content_and_missing_usage(make):
    body = ok_body({"messages": [{"role": "user", "content": "q"}]}, "hi")
    body["choices"][0]["message"]["content"] = None
    _, gen = make(lambda seen: Fault("json", body=body))
    s = one(gen, prompt=[{"role": "user", "content": "q"}])
    assert isinstance(s.error, BackendProtocolError) and "NoneType" in str(s.error)
    no_usage = _good()
    del no_usage["usage"]
    _, gen = make(lambda seen: Fault("json", body=no_usage), num_params=10)
    s = one(gen)
    assert s.outcome == "ok" and gen.missing_usage == 1
    assert math.isnan(gen.usage.generator_flops)  # unknown, not 0


def test_c10_connection_refused_is_a_retried_transport_error(make):
    server, gen = make(max_retries=2)
    server.stop()
    s = one(gen)
    assert s.outcome == "transport_error" and isinstance(s.error, TransportError)
    assert s.attempts == 3


def test_c10_reset_mid_body_is_retried(make):
    server, gen = make(first_attempts_fail(Fault("reset")))
    s = one(gen)
    assert s.outcome == "ok" and s.attempts == 2 and len(server.posts) == 2


# --- C11 .. C19: partial failure, cancellation, concurrency, storms ------------------------


def _failing_seeds(faults: dict[int, Fault]):
    return lambda seen: faults.get(seen.body.get("seed"), Fault())


def test_c11_partial_failures_keep_index_and_reason_and_min_successful(make):
    from metagen.strategies import best_of_n
    faults = {102: Fault("status", 400), 105: Fault("status", 503),
              111: Fault("status", 429, {"Retry-After": "600"})}
    _, gen = make(_failing_seeds(faults), max_retries=1)
    params = P.with_(n=16)
    row = gen.generate_samples(["q"], params)[0]
    assert [s.index for s in row] == list(range(16))
    bad = {s.index: s.outcome for s in row if s.outcome != "ok"}
    assert bad == {2: "invalid_request", 5: "server_error", 11: "rate_limited"}
    assert [c.text for c in gen.generate(["q"], params)[0]][:2] == ["answer 1", "answer 2"]
    reward = lambda prompt, text: float(text.split()[-1])  # noqa: E731
    res = best_of_n(gen, "q", n=16, reward=reward, params=params, min_successful=13)
    assert res.trace["ok"] == 13 and res.text == "answer 2"
    assert res.failures == {"invalid_request": 1, "server_error": 1, "rate_limited": 1}
    with pytest.raises(InsufficientSamples):
        best_of_n(gen, "q", n=16, reward=reward, params=params, min_successful=14)


def test_c12_all_failing_raises_insufficient_samples_and_scores_nothing(make):
    from metagen.strategies import best_of_n
    _, gen = make(lambda seen: Fault("status", 503), max_retries=1)
    scored: list[str] = []
    with pytest.raises(InsufficientSamples) as info:
        best_of_n(gen, "q", n=4, reward=lambda p, t: scored.append(t) or 0.0,
                  params=P.with_(n=4))
    assert info.value.failures == {"server_error": 4} and scored == []


def test_c13_cancelling_the_call_cancels_outstanding_requests(make):
    server, gen = make(lambda seen: Fault(delay=10.0))

    async def main() -> None:
        task = asyncio.ensure_future(gen.agenerate(["q"], P.with_(n=4)))
        while server.in_flight < 4:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    deadline = time.monotonic() + 2
    while server.disconnects < 4 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.disconnects == 4
    assert _pending_tasks(gen) == 0


def test_c14_max_concurrency_bounds_requests_in_flight(make):
    server, gen = make(lambda seen: Fault(delay=0.01), max_concurrency=8)
    out = gen.generate(["q"], P.with_(n=100))
    assert len(out[0]) == 100 and len(server.posts) == 100
    assert 2 <= server.peak <= 8


def test_c15_rate_limit_storm_does_not_multiply_requests(make):
    lock, count = threading.Lock(), [0]

    def storm(seen: Seen) -> Fault:
        with lock:
            count[0] += 1
            return Fault("status", 429) if count[0] % 2 else Fault()

    server, gen = make(storm, max_retries=2)
    row = gen.generate_samples(["q"], P.with_(n=40))[0]
    assert len(server.posts) <= 3 * 40
    assert sum(s.outcome == "ok" for s in row) >= 30


def test_c16_a_retried_sample_resends_its_seed_and_is_the_same_sample(make):
    clean_server, clean = make()
    reference = [c.text for c in clean.generate(["q"], P.with_(n=6))[0]]
    server, gen = make(first_attempts_fail(Fault("status", 503)))
    row = gen.generate_samples(["q"], P.with_(n=6))[0]
    assert [s.completion.text for s in row] == reference and all(s.attempts == 2 for s in row)
    seeds = Counter(s.body["seed"] for s in server.posts)
    assert seeds == {100 + i: 2 for i in range(6)}  # each retry carries its first seed


def test_c17_no_nested_retries(make):
    server, gen = make(lambda seen: Fault("status", 500), max_retries=2)
    gen.generate(["q"], P.with_(n=5))
    assert len(server.posts) == 5 * 3


def test_c18_api_key_never_logged_or_shown(make, caplog):
    key = "sk-very-secret-123"
    echo = lambda seen: Fault("status", 500 if seen.attempt == 1 else 401,  # noqa: E731
                              body={"error": {"message": f"bad key {key}"}})
    server, gen = make(echo, api_key=key)
    caplog.set_level(logging.DEBUG)
    with pytest.raises(InvalidRequest) as info:
        gen.generate(["q"], P)
    assert server.posts[0].headers["Authorization"] == f"Bearer {key}"
    assert key not in caplog.text and key not in str(info.value) and key not in repr(gen)
    assert "<redacted>" in str(info.value) and "retrying" in caplog.text


def test_c19_server_killed_and_restarted_mid_run(make):
    server, gen = make(lambda seen: Fault(delay=0.3), max_retries=6, backoff_base=0.05,
                       backoff_cap=0.3)

    def chaos() -> None:
        time.sleep(0.1)
        server.kill()
        time.sleep(0.3)
        server.restart()

    thread = threading.Thread(target=chaos)
    thread.start()
    row = gen.generate_samples(["q"], P.with_(n=8))[0]
    thread.join()
    assert [s.outcome for s in row] == ["ok"] * 8
    assert all(s.attempts >= 2 for s in row)  # the first attempts died with the server


# --- C5 .. C7: streaming -----------------------------------------------------------------------


def test_stream_and_astream_yield_the_deltas_and_count_usage(make):
    server, gen = make(first_attempts_fail(Fault("status", 503)))
    assert list(gen.stream("q", P)) == ["answer", " 1"]  # retried before the first delta
    assert len(server.posts) == 2 and server.posts[1].body["stream"] is True
    chat = [{"role": "user", "content": "q"}]

    async def collect() -> list[str]:
        return [d async for d in gen.astream(chat, P.with_(seed=101))]

    assert asyncio.run(collect()) == ["answer", " 2"]
    assert gen.usage.generated_tokens == 4 and gen.usage.calls == 2


def test_c5_slow_drip_stream_is_cut_at_the_deadline(make):
    server, gen = make(lambda seen: Fault("drip", delay=0.05), timeout=0.5)
    got: list[str] = []
    start = time.monotonic()
    with pytest.raises(BackendTimeout):
        for delta in gen.stream("q", P):
            got.append(delta)
    assert 0.45 <= time.monotonic() - start < 1.5 and len(got) >= 3
    deadline = time.monotonic() + 2
    while server.disconnects < 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.disconnects == 1 and _pending_tasks(gen) == 0


def test_c6_stream_without_finish_or_done_is_truncated(make):
    _, gen = make(lambda seen: Fault("truncate"))
    got: list[str] = []
    with pytest.raises(TruncatedStream, match="finish_reason and \\[DONE\\]"):
        for delta in gen.stream("q", P):
            got.append(delta)
    assert got == ["answer", " 1"]


def test_c7_in_stream_error_event_is_raised(make):
    server, gen = make(lambda seen: Fault("stream_error"))
    with pytest.raises(ServerError, match="engine died"):
        list(gen.stream("q", P))
    assert len(server.posts) == 1  # text was already delivered: not retried


def test_c13_stopping_a_stream_early_closes_its_request(make):
    server, gen = make(lambda seen: Fault("drip", delay=0.02))
    deltas = gen.stream("q", P)
    assert next(deltas) == " drip"
    deltas.close()
    deadline = time.monotonic() + 2
    while server.disconnects < 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.disconnects == 1 and _pending_tasks(gen) == 0


# --- score ------------------------------------------------------------------------------------


def test_score_sums_the_continuation_tokens_via_prompt_only_echo(make):
    server, gen = make(num_params=10)
    out = gen.score(["a b", "w x"], [[" c", " dd ee", ""], ["yz"]])
    # " c" -0.1; " dd ee" -0.2 -0.2; "" 0 without a request; " xyz" merges across the
    # boundary and is scored
    assert out == [pytest.approx([-0.1, -0.4, 0.0]), pytest.approx([-0.3])]
    posts = server.posts
    assert len(posts) == 3 and all(p.body["echo"] and p.body["max_tokens"] == 0
                                   and p.body["logprobs"] == 0 for p in posts)
    assert gen.usage.scorer_calls == 1 and gen.usage.scorer_tokens == 3 + 4 + 2
    assert gen.usage.scorer_flops == 2 * 10 * 9 and gen.capabilities.prompt_scoring
    with pytest.raises(BackendProtocolError, match="logprob None"):
        gen.score(["x"], [["yz"]])  # one token, the text's first: it has no logprob


def test_score_ignores_a_generated_tail_and_raises_typed_errors(make):
    from metagen.generators.openai_wire import parse_score
    from .fault_server import echo_body
    data = echo_body({"prompt": "a b c", "max_tokens": 1})
    assert parse_score(data, 3, 5)[0] == pytest.approx(-0.1)  # " c" only, not " gen"
    _, gen = make(lambda seen: Fault("status", 503), max_retries=1)
    with pytest.raises(ServerError):
        gen.score(["a"], [[" b"]])
    with pytest.raises(CapabilityError, match="score"):
        make(dialect="llamacpp")[1].score(["a"], [[" b"]])
    assert asyncio.run(make()[1].ascore(["a b"], [[" c"]])) == [[pytest.approx(-0.1)]]


def _vllm_echo(names: list[str], values: list[float | None], text: str) -> dict[str, Any]:
    """vLLM 0.32's prompt-only echo: ``text_offset`` sums the lengths of the token names,
    the special BOS named by its text (``<bos>``) though the echoed text leaves it out."""
    offsets = [sum(map(len, names[:i])) for i in range(len(names))]
    return {"id": "x", "object": "text_completion", "created": 0, "model": "orm",
            "choices": [{"index": 0, "text": text, "finish_reason": "length", "logprobs": {
                "tokens": names, "token_logprobs": values, "text_offset": offsets,
                "top_logprobs": [None] + [{n: v} for n, v in zip(names[1:], values[1:])]}}],
            "usage": {"prompt_tokens": len(names), "completion_tokens": 0,
                      "total_tokens": len(names)}}


def test_scripted_vllm_echo_that_names_its_bos_scores_the_continuation_tokens(make):
    """Real vLLM (0.32.0, testbed ORM) names the BOS ``<bos>`` in the echo and counts it in
    ``text_offset``; read as text positions, the offsets were 5 characters late and scored
    the prompt's last tokens instead of the continuation's last ones."""
    names = ["<bos>", "Q", ":", "\n", "1", " +", " ", "1", " =", " ", "2"]
    values: list[float | None] = [None, -1.0, -2.0, -3.0, -0.1, -0.2, -0.3, -0.4, -0.5, -0.6,
                                  -0.7]
    _, gen = make(lambda seen: Fault("json", body=_vllm_echo(names, values, "Q:\n1 + 1 = 2")))
    assert gen.token_logprobs(["Q:\n"], ["1 + 1 = 2"]) == [pytest.approx(values[4:])]
    assert gen.score(["Q:\n"], [["1 + 1 = 2"]]) == [[pytest.approx(-2.8)]]
    garbled = ["<bos>", "Q", ":", "\n", "1", " +", " ", "1", " =", " ", "\ufffd"]
    _, gen = make(lambda seen: Fault("json", body=_vllm_echo(garbled, values, "Q:\n1 + 1 = 2")))
    with pytest.raises(BackendProtocolError, match="do not spell"):
        gen.token_logprobs(["Q:\n"], ["1 + 1 = 2"])


# --- strategies run unchanged ----------------------------------------------------------------


def test_best_of_n_and_self_consistency_run_unchanged(make):
    from metagen.strategies import best_of_n, self_consistency
    _, gen = make()
    params = P.with_(n=6)
    res = best_of_n(gen, ["q", "r"], n=6, reward=lambda p, t: float(t.split()[-1]),
                    params=params)
    assert [r.text for r in res] == ["answer 2", "answer 2"]
    vote = self_consistency(gen, [{"role": "user", "content": "q"}], n=7, params=params,
                            extract=lambda t: t.split()[-1])
    assert vote.trace["answer"] == "1" and vote.trace["ok"] == 7  # seeds 100..106: 1 wins 3-2-2


@pytest.mark.parametrize("name", ["weighted_vote", "mbr", "rejection_sampling"])
def test_other_parallel_strategies_run_unchanged_and_skip_failed_samples(make, name):
    import metagen
    _, gen = make(_failing_seeds({101: Fault("status", 503)}), max_retries=0)
    params = P.with_(n=6, logprobs=0)
    last = lambda t: t.split()[-1]  # noqa: E731
    if name == "weighted_vote":
        res = metagen.weighted_vote(gen, "q", n=6, params=params, extract=last)
    elif name == "mbr":
        res = metagen.mbr(gen, "q", n=6, params=params, utility="answer")
    else:
        res = metagen.rejection_sampling(gen, "q", lambda p, t: float(t.endswith("0")),
                                         batch=3, max_samples=6, params=params.with_(n=1))
    assert res.best is not None and res.best.finish_reason != "error"
    if name != "rejection_sampling":  # sample 1 (seed 101) failed, was counted, not voted on
        assert res.failures == {"server_error": 1} and len(res.candidates) == 5
    assert not any(c.finish_reason == "error" for c in res.candidates)
