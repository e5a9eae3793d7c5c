"""``metagen eval testbed --prompt-format chat`` on a chat-templated copy of the testbed policy
gives the same run locally and through ``metagen serve`` (the chat messages rendered by the
local engine, and by the server behind ``/v1/chat/completions``): equal stored texts and
accuracies. Its template renders the testbed's own text prompt, so the chat run also equals
the text run."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from metagen.cli import main
from metagen.testbed import model_path
from tests.server.conftest import MODEL, start_server, stop_server

#: ``Question: {user}\nAnswer:\n`` (the testbed's prompt), the assistant's turns as they are
TEMPLATE = ("{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}"
            "Question: {{ m['content'] }}\nAnswer:\n{% elif m['role'] == 'assistant' %}"
            "{{ m['content'] }}{% if not (loop.last and continue_final_message) %}\n{% endif %}"
            "{% endif %}{% endfor %}")
ARGS = ["eval", "testbed", "--strategy", "greedy,self_consistency", "--n", "1,2",
        "--limit", "3", "--max-tokens", "96", "--concurrency", "2"]


@pytest.fixture(scope="module")
def chat_policy(tmp_path_factory) -> Path:
    """A copy of the testbed policy whose tokenizer_config.json carries :data:`TEMPLATE`."""
    folder = tmp_path_factory.mktemp("chat_policy") / "policy"
    shutil.copytree(model_path("policy"), folder)
    config_file = folder / "tokenizer_config.json"
    config = json.loads(config_file.read_text())
    config["chat_template"] = TEMPLATE
    config_file.write_text(json.dumps(config, indent=2))
    return folder


def _stored(out: Path) -> tuple[list, list]:
    """(the samples' texts, the accuracy rows with their texts) of a run folder."""
    db = sqlite3.connect(out / "run.sqlite")
    try:
        texts = db.execute("SELECT item_id, sample_index, text FROM samples ORDER BY 1, 2"
                           ).fetchall()
        rows = db.execute("SELECT item_id, strategy, n, metric, value, trace FROM results "
                          "WHERE metric IN ('accuracy', 'pass@k') ORDER BY 1, 2, 3, 4"
                          ).fetchall()
    finally:
        db.close()
    return texts, [(*r[:5], json.loads(r[5]).get("text") if r[5] else None) for r in rows]


def _results(out: Path) -> list:
    report = json.loads((out / "results.json").read_text())
    assert report["status"] == "complete", report
    return [r for r in report["results"] if r["metric"] in ("accuracy", "pass@k")]


def test_a_chat_run_is_the_same_locally_and_through_the_server(chat_policy, tmp_path):
    from metagen.generators.local import LocalGenerator

    local, remote, text = tmp_path / "local", tmp_path / "remote", tmp_path / "text"
    assert main([*ARGS, "--model", str(chat_policy), "--prompt-format", "chat",
                 "--out", str(local)]) == 0
    generator = LocalGenerator.from_pretrained(chat_policy)
    running = start_server(generator)
    try:
        assert main([*ARGS, "--base-url", running.base_url, "--model", MODEL,
                     "--prompt-format", "chat", "--out", str(remote)]) == 0
    finally:
        stop_server(running)
        generator.close()
    assert main([*ARGS, "--model", str(chat_policy), "--prompt-format", "text",
                 "--out", str(text)]) == 0

    config = json.loads((local / "results.json").read_text())["config"]
    assert config["prompt_template"].startswith("chat:")
    assert json.loads((text / "results.json").read_text())["config"]["prompt_template"] \
        != config["prompt_template"]
    texts, rows = _stored(local)
    assert len(texts) == 3 * 2 and {r[1] for r in rows} == {"greedy", "self_consistency",
                                                            "samples"}
    assert _stored(remote) == (texts, rows)
    assert _results(remote) == _results(local)
    assert _stored(text) == (texts, rows)  # the template renders the text prompt's tokens


def test_the_default_form_of_a_templated_model_is_chat(chat_policy, tmp_path):
    out = tmp_path / "run"
    assert main(["eval", "testbed", "--model", str(chat_policy), "--strategy", "greedy",
                 "--limit", "1", "--max-tokens", "32", "--out", str(out)]) == 0
    config = json.loads((out / "results.json").read_text())["config"]
    assert config["prompt_template"].startswith("chat:")


def test_completions_that_never_close_their_thinking_grade_as_no_answer(tmp_path):
    """The testbed policy never writes ``</think>``: with a thinking budget every completion
    is unanswered, so every accuracy (and pass@k) is 0; the budget and token are in the key."""
    out = tmp_path / "run"
    assert main([*ARGS, "--model", str(model_path("policy")), "--max-tokens", "64",
                 "--max-thinking-tokens", "16", "--out", str(out)]) == 0
    report = json.loads((out / "results.json").read_text())
    assert report["config"]["thinking"] == {"end_token": "</think>", "max_thinking_tokens": 16}
    texts, rows = _stored(out)
    plain = [t[2].decode() if isinstance(t[2], bytes) else t[2] for t in texts]
    assert any("####" in t for t in plain)  # answers the plain grader would read
    assert rows and all(r[4] == 0.0 for r in rows)
