"""``POST /pooling`` (vLLM's shape) and ``POST /score`` (metagen's JSON contract) over the
server's loaded reward models, read by the library's remote scorers: every remote score equals
the local scorer's on the same folder; the reply shapes are vLLM's; unknown models are 404s and
bad inputs 400s naming the field."""

from __future__ import annotations

import math

import httpx
import pytest

from metagen.scorers import (
    HFRewardModel, LikelihoodVerifier, RemoteProcessRewardModel, RemoteRewardModel)
from tests.server.conftest import start_server, stop_server
from tests.tolerances import SCORE_TOL

PROMPTS = ["Once upon a time", "Once upon a time", "Lily had a ball."]
COMPLETIONS = [" there was a cat.", " a dog ran home.", " She was happy"]


@pytest.fixture(scope="module")
def classifier_path(tmp_path_factory, stories_path):
    """stories260K's backbone under a seeded two-label sequence-classification head."""
    import torch
    from transformers import AutoTokenizer, LlamaForSequenceClassification

    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("seq_cls")
    model = LlamaForSequenceClassification.from_pretrained(stories_path, num_labels=2)
    model.save_pretrained(folder)
    AutoTokenizer.from_pretrained(stories_path).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def scorers(classifier_path, stories_path):
    return {"cls": HFRewardModel.from_pretrained(classifier_path),
            "lik": LikelihoodVerifier.from_pretrained(stories_path)}


@pytest.fixture(scope="module")
def scoring_server(served_gen, scorers):
    running = start_server(served_gen, rewards=scorers, prms={"steps": scorers["lik"]})
    yield running
    stop_server(running)


@pytest.fixture
def client(scoring_server):
    with httpx.Client(base_url=scoring_server.url, timeout=60) as http:
        yield http


def test_pooling_reply_has_vllms_shape(client, scorers):
    local = scorers["cls"].score(PROMPTS, COMPLETIONS)
    texts = [p + c for p, c in zip(PROMPTS, COMPLETIONS)]
    reply = client.post("/pooling", json={"model": "cls", "input": texts})
    assert reply.status_code == 200
    body = reply.json()
    assert body["object"] == "list" and body["model"] == "cls"
    assert [d["index"] for d in body["data"]] == [0, 1, 2]
    assert {d["object"] for d in body["data"]} == {"pooling"}
    for item, want in zip(body["data"], local):
        assert len(item["data"]) == 2 and math.fsum(item["data"]) == pytest.approx(1.0)
        assert item["data"][1] == pytest.approx(want, abs=SCORE_TOL)  # softmax[1]: the score
    tok = scorers["cls"].tokenizer
    tokens = sum(len(tok(t)["input_ids"]) for t in texts)
    assert body["usage"] == {"prompt_tokens": tokens, "total_tokens": tokens,
                             "completion_tokens": 0}


def test_remote_pooling_scores_equal_the_local_folder(scoring_server, scorers, classifier_path):
    local = scorers["cls"].score(PROMPTS, COMPLETIONS)
    for tokenizer in (None, str(classifier_path)):  # strings, then token ids
        with RemoteRewardModel(scoring_server.url, "cls", api="pooling", positive_label=1,
                               tokenizer=tokenizer) as remote:
            assert remote.score(PROMPTS, COMPLETIONS) == pytest.approx(local, abs=SCORE_TOL)
            assert remote.usage.scorer_tokens > 0 and remote.missing_usage == 0


def test_remote_json_scores_equal_the_local_verifier(scoring_server, scorers):
    local = scorers["lik"].score(PROMPTS, COMPLETIONS)
    with RemoteRewardModel(scoring_server.url, "lik", api="json") as remote:
        assert remote.score(PROMPTS, COMPLETIONS) == pytest.approx(local, abs=SCORE_TOL)
    steps = [["Once upon", " a time"], ["The end."]]
    want = scorers["lik"].score_steps(["Hi", "Bye"], steps)
    with RemoteProcessRewardModel(scoring_server.url, "steps", api="json") as remote_prm:
        got = remote_prm.score_steps(["Hi", "Bye"], steps)
    assert [s for row in got for s in row] == pytest.approx([s for row in want for s in row],
                                                            abs=SCORE_TOL)


def _error(reply: httpx.Response) -> dict:
    return reply.json()["error"]


def test_an_unknown_model_is_a_404(client):
    for path, body in (("/pooling", {"model": "nope", "input": ["a"]}),
                       ("/score", {"model": "nope", "prompts": ["a"], "completions": ["b"]}),
                       ("/score", {"model": "cls", "prompts": ["a"], "steps": [["b"]]})):
        reply = client.post(path, json=body)
        assert reply.status_code == 404
        err = _error(reply)
        assert (err["type"], err["param"], err["code"]) == ("not_found_error", "model",
                                                            "model_not_found")


@pytest.mark.parametrize(("body", "param"), [
    ({"input": ["a"]}, "model"),
    ({"model": "cls"}, "input"),
    ({"model": "cls", "input": []}, "input"),
    ({"model": "cls", "input": 5}, "input"),
    ({"model": "cls", "input": [1, 2]}, "input"),
    ({"model": "cls", "input": [[]]}, "input"),
    ({"model": "cls", "input": ["a", [1]]}, "input"),
    ({"model": "cls", "input": [[1, 10 ** 9]]}, "input"),
    ({"model": "cls", "input": [[1, True]]}, "input"),
    ({"model": "lik", "input": ["a"]}, "model"),  # a verifier needs the split: /score
])
def test_bad_pooling_requests_are_400s_naming_the_field(client, body, param):
    reply = client.post("/pooling", json=body)
    assert reply.status_code == 400
    assert _error(reply)["param"] == param


@pytest.mark.parametrize(("body", "param"), [
    ({"model": "lik", "prompts": ["a"]}, "completions"),
    ({"model": "lik", "prompts": ["a"], "completions": ["b"], "steps": [["b"]]},
     "completions"),
    ({"model": "lik", "prompts": [], "completions": []}, "prompts"),
    ({"model": "lik", "prompts": ["a", "b"], "completions": ["c"]}, "completions"),
    ({"model": "lik", "prompts": ["a"], "completions": [""]}, "completions"),
])
def test_bad_score_requests_are_400s_naming_the_field(client, body, param):
    reply = client.post("/score", json=body)
    assert reply.status_code == 400
    assert _error(reply)["param"] == param


def test_pooling_says_where_a_verifier_is_served(client):
    message = _error(client.post("/pooling", json={"model": "lik", "input": ["a"]}))["message"]
    assert "/score" in message and "json+" in message
