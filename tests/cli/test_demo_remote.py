"""``metagen demo --base-url URL --model NAME``: the policy's samples come from a server over
real HTTP (the loopback FaultServer), the reward model stays local; the table equals the one of
the same scripted policy run in process."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("httpx", reason="needs httpx: pip install 'metagen[openai]'")

import metagen.eval.demo as preset  # noqa: E402
from metagen.cli import main  # noqa: E402
from metagen.eval.runner import REWARD  # noqa: E402
from metagen.eval.seeds import item_seed  # noqa: E402
from metagen.generators.mock import MockGenerator  # noqa: E402
from tests.eval.test_runner_scripted import ITEMS, reward, text  # noqa: E402
from tests.generators.fault_server import FaultServer  # noqa: E402

BASE_SEED = {it.prompt: item_seed(0, it.id) for it in ITEMS}


def _respond(body: dict) -> str:
    """Sample j of an item has seed item_seed + j (greedy sends none: sample 0)."""
    seed = body.get("seed")
    return text(body["prompt"], 0 if seed is None else seed - BASE_SEED[body["prompt"]])


def _rows(path) -> dict:
    return {(r["strategy"], r["n"]): (r["accuracy"], r["generated_tokens"])
            for r in json.loads(path.read_text())["results"]}


def test_scripted_demo_on_a_server_equals_the_in_process_run(tmp_path, monkeypatch,
                                                             capsys) -> None:
    server = FaultServer(respond=_respond)
    server.start()
    monkeypatch.setattr(preset, "load_testbed_policy", lambda backend: MockGenerator(text))
    monkeypatch.setattr(preset, "testbed_loaders", lambda s: {REWARD: lambda: reward})
    args = ["demo", "--problems", "2", "--ns", "1,2,4", "--max-tokens", "4"]
    try:
        remote, local = tmp_path / "remote.json", tmp_path / "local.json"
        assert main([*args, "--json", str(remote), "--out", str(tmp_path / "r"),
                     "--base-url", server.url, "--model", "m"]) == 0
        assert "backend OpenAIGenerator" in capsys.readouterr().out
        assert main([*args, "--json", str(local), "--out", str(tmp_path / "l")]) == 0
    finally:
        server.stop()
    remote_rows, local_rows = _rows(remote), _rows(local)
    assert {k: v[0] for k, v in remote_rows.items()} == {k: v[0] for k, v in local_rows.items()}
    assert len(remote_rows) == 1 + 4 * 3
    assert len(server.posts) == 2 + 2 * 4  # greedy once per problem, then 4 samples each
    report = json.loads((tmp_path / "r" / "parallel" / "results.json").read_text())
    assert report["config"]["model"] == {"base_url": server.url, "model": "m",
                                         "revision": None}


@pytest.mark.parametrize("argv, named", [
    (("--base-url", "http://127.0.0.1:9/v1"), "needs --model"),
    (("--model", "m"), "give --base-url too"),
    (("--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--backend", "hf"), "backend"),
])
def test_demo_remote_flags_are_one_line_errors(capsys, argv, named) -> None:
    assert main(["demo", *argv]) == 2
    err = capsys.readouterr().err
    assert named in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
