"""``metagen demo --base-url URL --model NAME``: the policy's samples come from a server over
real HTTP (the loopback FaultServer), the reward models stay local; the table equals the one of
the same scripted policy run in process."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("httpx", reason="needs httpx: pip install 'metagen[openai]'")

import metagen.demo  # noqa: E402
from metagen.cli import main  # noqa: E402
from metagen.generators.mock import MockGenerator  # noqa: E402
from tests.generators.fault_server import FaultServer  # noqa: E402
from tests.scorers._answers import last_int, same  # noqa: E402
from tests.strategies._helpers import TableReward  # noqa: E402
from tests.strategies.test_demo_pipeline import PROBLEMS, _script  # noqa: E402


def _scripted_demo(real, seen: list):
    """run_demo on the scripted problems and ORM, with the policy the command passes."""
    def scripted(config, generator=None, on_stage=None):
        seen.append(generator)
        return real(config, generator=generator or MockGenerator(_script),
                    orm=TableReward({"#### 7": 0.9, "#### 5": 0.6}, default=0.1),
                    problems=PROBLEMS, format_prompt=lambda p: f"Q: {p.question}",
                    grade=lambda t, a: same(last_int(t) or "-1", a), extract=last_int,
                    match=same, on_stage=on_stage)
    return scripted


def _rows(path) -> dict:
    return {(r["strategy"], r["n"]): r["accuracy"] for r in json.loads(path.read_text())["results"]}


def test_scripted_demo_on_a_server_equals_the_in_process_run(tmp_path, monkeypatch,
                                                             capsys) -> None:
    # the server answers sample j (seed j; greedy sends none) as the in-process script does
    server = FaultServer(respond=lambda body: _script(body["prompt"], body.get("seed") or 0))
    server.start()
    seen: list = []
    monkeypatch.setattr(metagen.demo, "run_demo", _scripted_demo(metagen.demo.run_demo, seen))
    args = ["demo", "--problems", "2", "--ns", "1,2,4,8", "--max-tokens", "4"]
    try:
        remote, local = tmp_path / "remote.json", tmp_path / "local.json"
        assert main([*args, "--json", str(remote), "--plot", str(tmp_path / "r.png"),
                     "--base-url", server.url, "--model", "m"]) == 0
        assert "backend openai" in capsys.readouterr().out
        assert main([*args, "--json", str(local), "--plot", str(tmp_path / "l.png")]) == 0
    finally:
        server.stop()
    assert type(seen[0]).__name__ == "OpenAIGenerator" and seen[1] is None
    remote_rows, local_rows = _rows(remote), _rows(local)
    assert remote_rows == local_rows and len(remote_rows) == 1 + 4 * 4
    assert len(server.posts) == 2 + 2 * 8  # greedy once per problem, then 8 samples each


@pytest.mark.parametrize("argv, named", [
    (("--base-url", "http://127.0.0.1:9/v1"), "needs --model"),
    (("--model", "m"), "give --base-url too"),
    (("--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--backend", "hf"), "backend"),
])
def test_demo_remote_flags_are_one_line_errors(capsys, argv, named) -> None:
    assert main(["demo", *argv]) == 2
    err = capsys.readouterr().err
    assert named in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
