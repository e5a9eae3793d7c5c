"""``metagen eval --base-url URL --model NAME`` over real HTTP (the loopback FaultServer): the
server's scripted 500s are failed samples counted by reason, never stored, and retried by the
rerun, which then equals a run that never failed; provenance names the server."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("httpx", reason="needs httpx: pip install 'metagen[openai]'")

from metagen.cli import main  # noqa: E402
from metagen.eval import get_task  # noqa: E402
from tests.generators.fault_server import Fault, FaultServer, Seen  # noqa: E402

ITEMS = get_task("testbed").items(None, 3)
ANSWER = {it.prompt: it.problem.answer for it in ITEMS}


def respond(body: dict) -> str:
    """Sample with seed s: right when s % 3 != 0 (sample i of a seeded request has seed + i)."""
    answer = ANSWER[body["prompt"]]
    return f"so\n#### {answer if body['seed'] % 3 else answer + 1}"


def _args(url: str, out) -> list[str]:
    return ["eval", "testbed", "--base-url", url, "--model", "m", "--max-retries", "0",
            "--strategy", "self_consistency", "--n", "1,3", "--limit", "3", "--seed", "2",
            "--max-tokens", "8", "--out", str(out)]


def _report(out) -> dict:
    report = json.loads((out / "results.json").read_text())
    report.pop("times")
    return report


def test_scripted_server_failures_are_counted_then_retried_on_resume(tmp_path):
    failing = {"on": True}

    def plan(seen: Seen) -> Fault:
        if failing["on"] and seen.body.get("prompt") == ITEMS[1].prompt \
                and seen.body["seed"] % 2:
            return Fault("status", status=500, body={"error": {"message": "scripted"}})
        return Fault()

    server = FaultServer(plan, respond=respond).start()
    try:
        assert main(_args(server.url, tmp_path / "run")) == 1
        first = _report(tmp_path / "run")
        assert first["status"] == "partial" and first["failed_items"] == [ITEMS[1].id]
        assert first["accounting"] == {"n_items_total": 3, "done": 2, "failed": 1,
                                       "skipped": 0}
        assert set(first["failures_by_reason"]) == {"server_error"}  # the 500s, by reason
        failing["on"] = False
        assert main(_args(server.url, tmp_path / "run")) == 0
        assert main(_args(server.url, tmp_path / "never")) == 0
    finally:
        server.stop()
    resumed, never = _report(tmp_path / "run"), _report(tmp_path / "never")
    assert never["failures_by_reason"] == {}
    assert resumed["failures_by_reason"] == first["failures_by_reason"]
    assert {**resumed, "failures_by_reason": {}} == never
    assert never["provenance"]["model"] == {"base_url": server.url, "model": "m",
                                            "revision": None}
    assert never["provenance"]["backends"] == ["OpenAIGenerator"]
