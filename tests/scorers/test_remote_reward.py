"""Remote reward models against a loopback server that computes REAL rewards: vLLM's ``/pooling``
and ``/classify`` reply shapes (PoolingResponse, ClassificationResponse) computed with plain
transformers forward passes of the tiny random-weight reward models, and the plain JSON contract
served by the local scorers. Remote scores must equal the local scorer's within 1e-5.

Fault tests script the server's answers (the fault server of tests/generators) and are named
"scripted"; so are the strategy runs on a scripted generator.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("httpx", reason="needs httpx: pip install 'metagen[openai]' (httpx openai)")

from metagen.errors import (  # noqa: E402
    BackendProtocolError,
    BackendTimeout,
    CapabilityError,
    InvalidParameterError,
    InvalidPromptError,
    InvalidRequest,
    RateLimited,
    ServerError,
)
from metagen.generators.mock import MockGenerator  # noqa: E402
from metagen.scorers import (  # noqa: E402
    HFProcessRewardModel,
    HFRewardModel,
    RemoteProcessRewardModel,
    RemoteRewardModel,
    load_prm,
    split_steps,
)
from metagen.strategies import best_of_n, step_beam_search  # noqa: E402

from tests.generators.fault_server import Fault, FaultServer  # noqa: E402
from tests.scorers.test_prm_layouts import separator_path, tokenizer_dir  # noqa: E402,F401
from tests.tolerances import SCORE_TOL

TOL = SCORE_TOL
PROMPTS = ["Q: 2+3?\n", "Q: what is 12 * 4?\n", "Q: 7-1?\n"]
COMPLETIONS = ["2 + 3 = 5\n#### 5", "12 * 4 = 48\n48 + 0 = 48\n#### 48", "#### 6"]
STEPS = [split_steps(c) for c in COMPLETIONS]
FAST = dict(max_retries=2, backoff_base=0.01, backoff_cap=0.05, max_retry_after=2.0,
            timeout=10.0)


# --- the loopback reward server ----------------------------------------------------------------


class VLLMShapes:
    """vLLM's /pooling and /classify replies, computed with transformers: a sequence classifier
    gives one activated vector per input, a token classifier one per token (sigmoid for one
    label, softmax otherwise, vLLM's default activation). String inputs are tokenized with
    special tokens (vLLM's default add_special_tokens=True); token-id inputs are used as given."""

    def __init__(self, path: Path, token_level: bool) -> None:
        from transformers import (AutoModelForSequenceClassification,
                                  AutoModelForTokenClassification, AutoTokenizer)
        auto = AutoModelForTokenClassification if token_level else \
            AutoModelForSequenceClassification
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.model = auto.from_pretrained(path).eval()

    def _outputs(self, body: dict[str, Any]) -> tuple[list[torch.Tensor], int]:
        outs, tokens = [], 0
        for item in body["input"]:
            ids = self.tokenizer(item)["input_ids"] if isinstance(item, str) else item
            with torch.inference_mode():
                logits = self.model(input_ids=torch.tensor([ids])).logits[0].float()
            act = logits.sigmoid() if logits.shape[-1] == 1 else logits.softmax(-1)
            outs.append(act)  # (L,) per sequence or (T, L) per token
            tokens += len(ids)
        return outs, tokens

    def pooling(self, body: dict[str, Any]) -> dict[str, Any]:
        outs, tokens = self._outputs(body)
        return {"id": "pool-1", "object": "list", "created": 0, "model": body["model"],
                "data": [{"index": i, "object": "pooling", "data": o.tolist()}
                         for i, o in enumerate(outs)],
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens,
                          "completion_tokens": 0}}

    def classify(self, body: dict[str, Any]) -> dict[str, Any]:
        outs, tokens = self._outputs(body)
        names = self.model.config.id2label
        return {"id": "classify-1", "object": "list", "created": 0, "model": body["model"],
                "data": [{"index": i, "label": names[int(o.argmax())], "probs": o.tolist(),
                          "num_classes": len(o)} for i, o in enumerate(outs)],
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens,
                          "completion_tokens": 0}}


@pytest.fixture
def serve():
    """serve(routes, plan=None) -> the started fault server; stopped afterwards."""
    servers: list[FaultServer] = []

    def start(routes, plan=None):
        server = FaultServer(plan, routes=routes).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def remote():
    """remote(cls, url, **kw) -> a remote reward model closed afterwards."""
    made: list[Any] = []

    def build(cls, url, model="rm", **kw):
        opts = dict(FAST)
        opts.update(kw)
        rm = cls(url, model, **opts)
        made.append(rm)
        return rm

    yield build
    for rm in made:
        rm.close()


@pytest.fixture(scope="module")
def orm2_local(orm2_path):
    return HFRewardModel.from_pretrained(orm2_path)


@pytest.fixture(scope="module")
def orm2_shapes(orm2_path):
    return VLLMShapes(orm2_path, token_level=False)


def _diff(got, want) -> float:
    return max(abs(a - b) for a, b in zip(got, want))


def _diff2(got, want) -> float:
    assert [len(g) for g in got] == [len(w) for w in want]
    return max(_diff(g, w) for g, w in zip(got, want))


# --- equal to the local scorers -----------------------------------------------------------------


@pytest.mark.parametrize("labels", [1, 2])
def test_pooling_orm_matches_the_local_reward_model(serve, remote, orm_path, orm2_path,
                                                    orm2_local, orm2_shapes, labels):
    path = orm_path if labels == 1 else orm2_path
    shapes = orm2_shapes if labels == 2 else VLLMShapes(path, token_level=False)
    server = serve({"/pooling": shapes.pooling})
    rm = remote(RemoteRewardModel, server.root, api="pooling", batch_size=2, num_params=1000,
                positive_label=None if labels == 1 else 1)
    got = rm.score(PROMPTS, COMPLETIONS)
    local = orm2_local if labels == 2 else HFRewardModel.from_pretrained(path)
    diff = _diff(got, local.score(PROMPTS, COMPLETIONS))
    print(f"pooling ORM ({labels} labels) max abs diff {diff:.2e}")
    assert diff <= TOL
    assert [s.path for s in server.posts] == ["/pooling", "/pooling"]  # batches of <= 2
    # the batches go out concurrently: they may arrive in either order
    assert sorted(s.body["input"] for s in server.posts) == \
        sorted([[p + c for p, c in zip(PROMPTS, COMPLETIONS)][:2], [PROMPTS[2] + COMPLETIONS[2]]])
    tokens = sum(len(shapes.tokenizer(p + c)["input_ids"]) for p, c in zip(PROMPTS, COMPLETIONS))
    assert rm.usage.scorer_calls == 1 and rm.usage.scorer_tokens == tokens
    assert rm.usage.scorer_flops == 2.0 * 1000 * tokens and rm.missing_usage == 0


@pytest.mark.parametrize("positive", [1, "LABEL_1"])
def test_classify_orm_is_the_declared_positive_labels_probability(serve, remote, orm2_local,
                                                                  orm2_shapes, positive):
    server = serve({"/classify": orm2_shapes.classify})
    rm = remote(RemoteRewardModel, server.root, api="classify", positive_label=positive,
                labels=["LABEL_0", "LABEL_1"])
    got = rm.score(PROMPTS, COMPLETIONS)
    assert _diff(got, orm2_local.score(PROMPTS, COMPLETIONS)) <= TOL
    assert server.posts[0].path == "/classify" and server.posts[0].body["model"] == "rm"


def test_classify_positive_label_is_declared_never_guessed(serve, remote, orm2_shapes):
    server = serve({"/classify": orm2_shapes.classify})
    rm = remote(RemoteRewardModel, server.root, api="classify")
    with pytest.raises(InvalidParameterError) as info:
        rm.score(PROMPTS, COMPLETIONS)
    assert info.value.param == "positive_label"
    swapped = remote(RemoteRewardModel, server.root, api="classify", positive_label="LABEL_1",
                     labels=["LABEL_1", "LABEL_0"])  # names in the wrong order: caught
    with pytest.raises(BackendProtocolError, match="declared name"):
        swapped.score(PROMPTS, COMPLETIONS)
    with pytest.raises(InvalidParameterError) as info:
        RemoteRewardModel(server.root, "rm", api="classify", positive_label="good")
    assert info.value.param == "positive_label"


def test_pooling_prm_sends_token_ids_and_matches_the_local_prm(serve, remote, prm_path):
    shapes = VLLMShapes(prm_path, token_level=True)
    server = serve({"/pooling": shapes.pooling})
    prm = remote(RemoteProcessRewardModel, server.root, api="pooling", tokenizer=prm_path)
    got = prm.score_steps(PROMPTS, STEPS)
    local = HFProcessRewardModel.from_pretrained(prm_path)
    diff = _diff2(got, local.score_steps(PROMPTS, STEPS))
    print(f"pooling PRM (step ends) max abs diff {diff:.2e}")
    assert diff <= TOL
    [sent] = server.posts
    assert sent.body["input"] == [shapes.tokenizer(p + "".join(s))["input_ids"]
                                  for p, s in zip(PROMPTS, STEPS)]
    assert prm.score(PROMPTS, COMPLETIONS) == pytest.approx(
        local.score(PROMPTS, COMPLETIONS), abs=TOL)


def test_pooling_separator_prm_matches_formatted_prm(serve, remote, separator_path):
    shapes = VLLMShapes(separator_path, token_level=True)
    server = serve({"/pooling": shapes.pooling})
    prm = remote(RemoteProcessRewardModel, server.root, api="pooling",
                 format="qwen2.5-math-prm", tokenizer=separator_path, positive_label=1)
    prompts = PROMPTS[:2] + [[{"role": "user", "content": PROMPTS[2]}]]  # a chat prompt too
    got = prm.score_steps(prompts, STEPS)
    local = load_prm(separator_path, format="qwen2.5-math-prm")
    diff = _diff2(got, local.score_steps(prompts, STEPS))
    print(f"pooling separator PRM max abs diff {diff:.2e}")
    assert diff <= TOL


def test_chat_prompts_with_the_models_tokenizer_match_the_local_scorers(serve, remote, orm_path,
                                                                       prm_path):
    from transformers import AutoTokenizer

    from tests.scorers.test_chat_prompts import COMPLETIONS as CHAT_COMPLETIONS
    from tests.scorers.test_chat_prompts import MESSAGES, TEMPLATE
    from tests.scorers.test_chat_prompts import STEPS as CHAT_STEPS

    def templated(path):
        tok = AutoTokenizer.from_pretrained(path)
        tok.chat_template = TEMPLATE
        return tok

    orm_shapes, prm_shapes = VLLMShapes(orm_path, False), VLLMShapes(prm_path, True)
    server = serve({"/pooling": orm_shapes.pooling})
    prm_server = serve({"/pooling": prm_shapes.pooling})
    rm = remote(RemoteRewardModel, server.root, tokenizer=templated(orm_path))
    prm = remote(RemoteProcessRewardModel, prm_server.root, api="pooling",
                 tokenizer=templated(prm_path))
    local_rm = HFRewardModel.from_pretrained(orm_path)
    local_rm.tokenizer.chat_template = TEMPLATE
    local_prm = HFProcessRewardModel.from_pretrained(prm_path)
    local_prm.tokenizer.chat_template = TEMPLATE
    prompts = [MESSAGES, MESSAGES, PROMPTS[0]]
    got = rm.score(prompts, CHAT_COMPLETIONS + [COMPLETIONS[0]])
    assert _diff(got, local_rm.score(prompts, CHAT_COMPLETIONS + [COMPLETIONS[0]])) <= TOL
    steps = CHAT_STEPS + [STEPS[0]]
    assert _diff2(prm.score_steps(prompts, steps), local_prm.score_steps(prompts, steps)) <= TOL
    assert all(isinstance(x, list) for x in server.posts[0].body["input"])  # token ids sent


def test_json_contract_orm_and_prm_match_the_local_scorers(serve, remote, orm2_local,
                                                           prm_path):
    local_prm = HFProcessRewardModel.from_pretrained(prm_path)

    def score(body):
        usage = {"prompt_tokens": 7}
        if "steps" in body:
            return {"step_scores": local_prm.score_steps(body["prompts"], body["steps"]),
                    "usage": usage}
        return {"scores": orm2_local.score(body["prompts"], body["completions"]),
                "usage": usage}

    server = serve({"/score": score})
    rm = remote(RemoteRewardModel, server.root, api="json", batch_size=2)
    prm = remote(RemoteProcessRewardModel, server.root, api="json")
    assert _diff(rm.score(PROMPTS, COMPLETIONS), orm2_local.score(PROMPTS, COMPLETIONS)) <= TOL
    assert _diff2(prm.score_steps(PROMPTS, STEPS), local_prm.score_steps(PROMPTS, STEPS)) <= TOL
    # the ORM's two batches go out concurrently: either may arrive first
    assert {"model": "rm", "prompts": PROMPTS[:2], "completions": COMPLETIONS[:2]} in \
        [p.body for p in server.posts[:2]]
    assert server.posts[2].body == {"model": "rm", "prompts": PROMPTS, "steps": STEPS}
    assert rm.usage.scorer_tokens == 14 and rm.usage.scorer_calls == 1
    assert math.isnan(rm.usage.scorer_flops)  # num_params not declared: unknown, not 0
    assert prm.usage.scorer_tokens == 7


def test_refusals_name_the_parameter(prm_path):
    url = "http://127.0.0.1:9"
    with pytest.raises(CapabilityError, match="one value per sequence"):
        RemoteProcessRewardModel(url, "prm", api="classify")
    with pytest.raises(CapabilityError, match="next-token"):
        RemoteProcessRewardModel(url, "prm", api="pooling", format="math-shepherd",
                                 tokenizer=prm_path)
    for kwargs, param in [(dict(api="pooling"), "tokenizer"), (dict(api="grpc"), "api"),
                          (dict(batch_size=0), "batch_size"), (dict(timeout=0), "timeout"),
                          (dict(aggregation="max"), "aggregation")]:
        with pytest.raises(InvalidParameterError) as info:
            RemoteProcessRewardModel(url, "prm", **kwargs)
        assert info.value.param == param
    with pytest.raises(InvalidParameterError) as info:
        RemoteRewardModel("ftp://x", "rm")
    assert info.value.param == "base_url"
    with RemoteRewardModel(url, "rm") as rm, pytest.raises(InvalidPromptError):
        rm.score([[{"role": "user", "content": "q"}]], ["a"])  # before any request


# --- failures are typed errors, never scores (scripted server answers) --------------------------


def _first(fault: Fault, times: int = 1):
    return lambda seen: fault if seen.attempt <= times else Fault()


def test_scripted_429_with_retry_after_then_success(serve, remote, orm2_local, orm2_shapes):
    server = serve({"/pooling": orm2_shapes.pooling},
                   _first(Fault("status", 429, {"Retry-After": "0.1"})))
    rm = remote(RemoteRewardModel, server.root, positive_label=1)
    assert _diff(rm.score(PROMPTS, COMPLETIONS), orm2_local.score(PROMPTS, COMPLETIONS)) <= TOL
    assert len(server.posts) == 2
    beyond = serve({"/pooling": orm2_shapes.pooling},
                   lambda seen: Fault("status", 429, {"Retry-After": "600"}))
    rm = remote(RemoteRewardModel, beyond.root, positive_label=1)
    with pytest.raises(RateLimited) as info:
        rm.score(PROMPTS, COMPLETIONS)
    assert info.value.retry_after == 600 and len(beyond.posts) == 1


def test_scripted_500s_exhaust_retries_and_raise_never_score(serve, remote, orm2_shapes):
    server = serve({"/pooling": orm2_shapes.pooling}, lambda seen: Fault("status", 500))
    rm = remote(RemoteRewardModel, server.root, positive_label=1, max_retries=2)
    with pytest.raises(ServerError) as info:
        rm.score(PROMPTS, COMPLETIONS)
    assert info.value.status == 500 and "reward model 'rm'" in str(info.value)
    assert "/pooling" in str(info.value) and len(server.posts) == 3  # 1 + max_retries
    assert rm.usage.scorer_calls == 1 and rm.usage.scorer_tokens == 0


def test_scripted_4xx_is_not_retried(serve, remote, orm2_shapes):
    body = {"error": {"message": "input too long", "param": "input"}}
    server = serve({"/pooling": orm2_shapes.pooling}, lambda seen: Fault("status", 400,
                                                                          body=body))
    rm = remote(RemoteRewardModel, server.root, positive_label=1)
    with pytest.raises(InvalidRequest) as info:
        rm.score(PROMPTS, COMPLETIONS)
    assert info.value.param == "input" and len(server.posts) == 1


@pytest.mark.parametrize("reply", [
    pytest.param(Fault("raw", 200, body=b"<html>502 Bad Gateway</html>"), id="not-json"),
    pytest.param(Fault("json", body={"scores": [0.5, 0.5]}), id="wrong-length"),
    pytest.param(Fault("json", body={"scores": [0.5, float("nan"), 0.1]}), id="nan"),
    pytest.param(Fault("json", body={"scores": [0.5, "high", 0.1]}), id="not-a-number"),
    pytest.param(Fault("json", body={"result": [0.5, 0.5, 0.1]}), id="missing-field"),
])
def test_scripted_invalid_json_contract_replies_raise_and_are_not_retried(serve, remote,
                                                                         reply):
    server = serve({}, lambda seen: reply)
    rm = remote(RemoteRewardModel, server.root, api="json")
    with pytest.raises(BackendProtocolError):
        rm.score(PROMPTS, COMPLETIONS)
    assert len(server.posts) == 1


@pytest.mark.parametrize("case", ["rows", "items", "index", "inf"])
def test_scripted_invalid_pooling_replies_raise(serve, remote, prm_path, case):
    shapes = VLLMShapes(prm_path, token_level=True)

    def broken(body):
        reply = shapes.pooling(body)
        if case == "rows":  # one token row short: positions could not be trusted
            reply["data"][0]["data"] = reply["data"][0]["data"][:-1]
        elif case == "items":
            reply["data"] = reply["data"][:-1]
        elif case == "index":
            reply["data"][1]["index"] = 0
        else:
            reply["data"][2]["data"][-1] = [float("inf")]
        return reply

    server = serve({"/pooling": broken})
    prm = remote(RemoteProcessRewardModel, server.root, api="pooling", tokenizer=prm_path)
    with pytest.raises(BackendProtocolError):
        prm.score_steps(PROMPTS, STEPS)
    assert len(server.posts) == 1


def test_scripted_hang_fails_at_the_call_deadline(serve, remote, orm2_shapes):
    server = serve({"/pooling": orm2_shapes.pooling}, lambda seen: Fault("hang"))
    rm = remote(RemoteRewardModel, server.root, positive_label=1, timeout=0.5)
    with pytest.raises(BackendTimeout):
        rm.score(PROMPTS, COMPLETIONS)


def test_scripted_one_failed_batch_fails_the_whole_call(serve, remote, orm2_shapes):
    bad = PROMPTS[2] + COMPLETIONS[2]
    server = serve({"/pooling": orm2_shapes.pooling},
                   lambda seen: Fault("status", 503) if bad in seen.body["input"] else Fault())
    rm = remote(RemoteRewardModel, server.root, positive_label=1, batch_size=2, max_retries=1)
    with pytest.raises(ServerError):
        rm.score(PROMPTS, COMPLETIONS)  # never two scores and a gap


def test_scripted_api_key_is_sent_as_a_header_and_never_shown(serve, remote, orm2_shapes,
                                                              caplog):
    key = "sk-remote-reward-SECRET"
    caplog.set_level(logging.DEBUG)
    server = serve({"/pooling": orm2_shapes.pooling}, lambda seen: Fault(
        "status", 503 if seen.attempt == 1 else 401,
        body={"error": {"message": f"bad key {key}"}}))
    rm = remote(RemoteRewardModel, server.root, api_key=key, positive_label=1)
    with pytest.raises(InvalidRequest) as info:
        rm.score(PROMPTS, COMPLETIONS)
    assert server.posts[0].headers["Authorization"] == f"Bearer {key}"
    assert key not in caplog.text and key not in str(info.value) and key not in repr(rm)
    assert "<redacted>" in str(info.value) and "retrying" in caplog.text


# --- strategies see rewards, or the exception ---------------------------------------------------


def _script(prompt: str, i: int) -> str:
    return f"{i} + {i} = {2 * i}\n#### {2 * i}"


def test_best_of_n_scripted_with_a_remote_orm(serve, remote, orm2_local, orm2_shapes):
    server = serve({"/classify": orm2_shapes.classify})
    rm = remote(RemoteRewardModel, server.root, api="classify", positive_label=1)
    gen = MockGenerator(_script)
    res = best_of_n(gen, "Q: double it\n", n=6, reward=rm)
    want = orm2_local.score(["Q: double it\n"] * 6, [_script("", i) for i in range(6)])
    assert res.text == _script("", max(range(6), key=want.__getitem__))
    assert res.scores == pytest.approx(want, abs=TOL)
    assert res.usage.scorer_calls == 1 and res.usage.scorer_tokens > 0
    failing = serve({"/classify": orm2_shapes.classify}, lambda seen: Fault("status", 500))
    broken = remote(RemoteRewardModel, failing.root, api="classify", positive_label=1)
    with pytest.raises(ServerError):  # a failed reward is not a reward of 0
        best_of_n(gen, "Q: double it\n", n=6, reward=broken)


def test_step_beam_search_scripted_with_a_remote_prm_equals_the_local_prm(serve, remote,
                                                                         prm_path):
    shapes = VLLMShapes(prm_path, token_level=True)
    server = serve({"/pooling": shapes.pooling})
    prm = remote(RemoteProcessRewardModel, server.root, api="pooling", tokenizer=prm_path)

    def script(prompt: str, i: int) -> str:
        depth = prompt.count("\n")
        return f"so the answer is {i} #### {i}" if depth >= 3 else f"Step {depth}: try {i}\n"

    kw = dict(width=2, branching=3, max_depth=6)
    [got] = step_beam_search(MockGenerator(script), ["Q: 2+3?\n"], prm, **kw)
    [want] = step_beam_search(MockGenerator(script), ["Q: 2+3?\n"],
                              HFProcessRewardModel.from_pretrained(prm_path), **kw)
    assert got.text == want.text and "####" in got.text
    assert got.scores == pytest.approx(want.scores, abs=TOL)
    assert got.usage.scorer_calls == want.usage.scorer_calls == len(server.posts) >= 3


def test_scripted_pooled_embedding_is_refused_for_declared_labels(serve, remote):
    """vLLM (0.32.0) serving a causal LM with ``--runner pooling`` and no ``--convert
    classify`` answers ``/pooling`` with its normalized embedding (192 values for the testbed
    ORM), not class probabilities: with the labels declared that is refused, not read as a
    reward (one coordinate of a hidden state)."""
    def embedding(body: dict[str, Any]) -> dict[str, Any]:
        vector = [(-1.0) ** k / math.sqrt(192) for k in range(192)]
        return {"id": "pooling-1", "object": "list", "created": 0, "model": body["model"],
                "data": [{"index": i, "object": "pooling", "data": vector}
                         for i in range(len(body["input"]))],
                "usage": {"prompt_tokens": 9, "total_tokens": 9, "completion_tokens": 0}}

    server = serve({"/pooling": embedding})
    rm = remote(RemoteRewardModel, server.root, labels=["wrong", "right"],
                positive_label="right")
    with pytest.raises(BackendProtocolError, match="192 values for 2 declared labels"):
        rm.score(PROMPTS, COMPLETIONS)
    assert len(server.posts) == 1
