"""``metagen generate --base-url URL --model NAME PROMPT`` against a real HTTP server on loopback
(:class:`FaultServer`, scripted answers and faults): what is printed, the exit status, and the
requests the server saw."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("httpx", reason="needs httpx: pip install 'metagen[openai]'")

from metagen.cli import main  # noqa: E402
from tests.generators.fault_server import Fault, FaultServer, Seen  # noqa: E402

MISSING = {"error": {"message": "The model `nope` does not exist.", "type": "NotFoundError"}}


def served_model_only(seen: Seen) -> Fault:
    """vLLM's answer to a model name it does not serve: 404."""
    return Fault() if seen.body.get("model") == "m" else Fault("status", 404, body=MISSING)


@pytest.fixture
def server():
    srv = FaultServer(served_model_only).start()
    yield srv
    srv.stop()


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def remote(server: FaultServer, *argv: str) -> tuple[str, ...]:
    return ("generate", "--base-url", server.url, "--model", "m", *argv)


def test_scripted_generate_maps_every_flag_onto_the_requests(capsys, server) -> None:
    code, out, err = run(capsys, *remote(server, "Q:", "--n", "3", "--seed", "10",
                                         "--temperature", "0.5", "--top-p", "0.9", "--top-k",
                                         "7", "--max-tokens", "5", "--stop", "\n",
                                         "--presence-penalty", "0.25"))
    assert code == 0 and err == "", err
    texts = [line for line in out.splitlines() if not line.startswith("---")]
    assert texts == ["Q:answer 1", "Q:answer 2", "Q:answer 0"]  # seeds 10, 11, 12
    # each header counts the server's completion_tokens (2 words), not the absent token ids
    heads = [line for line in out.splitlines() if line.startswith("---")]
    assert heads == [f"--- completion {i} (stop, 2 tokens)" for i in range(3)]
    posts = server.posts
    assert [p.path for p in posts] == ["/v1/completions"] * 3
    assert sorted(p.body["seed"] for p in posts) == [10, 11, 12]
    body = next(p.body for p in posts if p.body["seed"] == 10)
    assert body == {"model": "m", "n": 1, "max_tokens": 5, "temperature": 0.5, "prompt": "Q:",
                    "top_p": 0.9, "presence_penalty": 0.25, "seed": 10, "stop": ["\n"],
                    "top_k": 7, "include_stop_str_in_output": False}


def test_scripted_json_has_the_local_schema_with_backend_openai(capsys, server,
                                                                stories_path) -> None:
    code, out, err = run(capsys, *remote(server, "Q:", "--n", "2", "--seed", "0", "--json"))
    assert code == 0, err
    doc = json.loads(out, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))
    code, local, err = run(capsys, "generate", str(stories_path), "Q:", "--n", "2", "--seed",
                           "0", "--max-tokens", "2", "--backend", "local", "--json")
    assert code == 0, err
    ref = json.loads(local)
    assert set(doc) == set(ref) and set(doc["usage"]) == set(ref["usage"])
    assert set(doc["completions"][0]) == set(ref["completions"][0])
    assert doc["backend"] == "openai" and doc["model"] == "m" and doc["params"]["seed"] == 0
    assert [c["text"] for c in doc["completions"]] == ["answer 0", "answer 1"]
    usage = doc["usage"]  # ok_body counts words: prompt "Q:" once, 2 words per completion
    assert usage["prompt_tokens"] == 1 and usage["generated_tokens"] == 4
    assert usage["calls"] == 1 and usage["generator_flops"] is None  # unknown, never 0


def test_scripted_stream_prints_what_the_plain_run_prints(capsys, server) -> None:
    code, plain, err = run(capsys, *remote(server, "Q:", "--seed", "1"))
    assert code == 0 and plain == "Q:answer 1\n", err
    code, streamed, err = run(capsys, *remote(server, "Q:", "--seed", "1", "--stream"))
    assert code == 0 and err == "" and streamed == plain
    assert server.posts[-1].body["stream"] is True


@pytest.mark.parametrize("flags, named", [
    (("--mirostat-tau", "3"), "mirostat_tau"),
    (("--typical-p", "0.5"), "typical_p"),
    (("--bad-words", "x"), "bad_words"),
    (("--no-repeat-ngram-size", "2"), "no_repeat_ngram_size"),
])
def test_scripted_flag_the_server_cannot_honour_fails_before_any_request(
        capsys, server, flags, named) -> None:
    code, out, err = run(capsys, *remote(server, "Q:", *flags))
    (line,) = err.strip().splitlines()
    assert code == 2 and out == "" and line.startswith("error: ") and named in line
    assert "cannot honour" in line and server.posts == []


@pytest.mark.parametrize("flags, named", [
    (("--device", "cpu"), "device"), (("--dtype", "float16"), "dtype"),
    (("--speculative-model", "/some/draft"), "speculative_model"),
    (("--speculative-quantization", "int8"), "speculative_quantization"),
    (("--prompt-lookup", "3"), "prompt_lookup"), (("--num-beams", "2"), "num_beams"),
    (("--backend", "hf"), "backend"),
])
def test_local_only_flags_are_refused_with_base_url(capsys, server, flags, named) -> None:
    code, out, err = run(capsys, *remote(server, "Q:", *flags))
    (line,) = err.strip().splitlines()
    assert code == 2 and out == "" and named in line
    assert server.seen == []  # refused before the dialect probe


@pytest.mark.parametrize("argv, says", [
    (("--base-url", "http://127.0.0.1:9/v1", "Q:"), "needs --model"),
    (("--model", "m", "/a/folder", "Q:"), "give --base-url too"),
    (("--base-url", "http://127.0.0.1:9/v1", "--model", "m", "/a/folder", "Q:"),
     "give only PROMPT"),
    (("Q:",), "give MODEL PROMPT"),
    (("--backend", "openai", "/a/folder", "Q:"), "needs --base-url"),
    (("/a/folder", "Q:", "--timeout", "3"), "--base-url only"),
])
def test_model_argument_and_model_option_cannot_be_confused(capsys, argv, says) -> None:
    code, out, err = run(capsys, "generate", *argv)
    (line,) = err.strip().splitlines()
    assert code == 2 and out == "" and line.startswith("error: ") and says in line


@pytest.mark.parametrize("stream", [False, True])
def test_server_down_is_one_line_naming_the_url_exit_2(capsys, stream) -> None:
    srv = FaultServer().start()
    srv.stop()  # nothing listens on its port now
    code, out, err = run(capsys, *remote(srv, "Q:", "--max-retries", "1",
                                         *(("--stream",) if stream else ())))
    (line,) = err.strip().splitlines()
    assert code == 2 and out == "" and "Traceback" not in err
    assert line.startswith(f"error: {srv.url}: ") and "Connect" in line


@pytest.mark.parametrize("stream", [False, True])
def test_scripted_wrong_model_name_is_the_servers_404_exit_2(capsys, server, stream) -> None:
    argv = ("generate", "--base-url", server.url, "--model", "nope", "Q:", "--n", "2")
    code, out, err = run(capsys, *argv, *(("--stream", "--n", "1") if stream else ()))
    (line,) = err.strip().splitlines()
    assert code == 2 and out == ""
    assert "HTTP 404" in line and server.url in line and "`nope` does not exist" in line
    assert len(server.posts) == (1 if stream else 2)  # a 404 is never retried


def test_scripted_one_failed_sample_of_three_is_exit_1_with_the_others_printed(capsys) -> None:
    srv = FaultServer(lambda seen: Fault("status", 503) if seen.body["seed"] == 21
                      else Fault()).start()
    try:
        code, out, err = run(capsys, *remote(srv, "Q:", "--n", "3", "--seed", "20",
                                             "--max-retries", "1"))
    finally:
        srv.stop()
    assert code == 1 and err.strip().splitlines() == [
        "error: completion 1 failed (server_error: HTTP 503: status 503)"]
    assert [line for line in out.splitlines() if not line.startswith("---")] == \
        ["Q:answer 2", "Q:answer 1"]
    assert sum(p.body["seed"] == 21 for p in srv.posts) == 2  # retried once


def test_scripted_api_key_from_env_is_sent_and_never_printed(capsys, monkeypatch) -> None:
    key = "sk-test-secret-123"
    srv = FaultServer(lambda seen: Fault("status", 401, body={"error": {
        "message": f"Incorrect API key provided: {key}"}})).start()
    monkeypatch.setenv("OPENAI_API_KEY", key)
    try:
        code, out, err = run(capsys, *remote(srv, "Q:"))
    finally:
        srv.stop()
    assert code == 2 and out == "" and "HTTP 401" in err and key not in err
    assert srv.posts[0].headers["Authorization"] == f"Bearer {key}"
