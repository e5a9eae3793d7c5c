"""Strategies count a remote completion's tokens from the server's ``completion_tokens`` when the
server returns no token ids (most servers but vLLM's): tree nodes, chains and the per-prompt
split of usage are then right, not zero."""

from __future__ import annotations

import pytest

pytest.importorskip("httpx", reason="needs httpx: pip install 'metagen[openai]' (httpx openai)")

from metagen.generators.openai import OpenAIGenerator  # noqa: E402
from metagen.strategies import best_of_n, step_beam_search  # noqa: E402
from metagen.types import Completion, SamplingParams  # noqa: E402
from tests.generators.fault_server import FaultServer  # noqa: E402


def test_num_tokens_prefers_ids_then_server_count_then_logprobs():
    assert Completion("a b", token_ids=(1, 2, 3), generated_tokens=9).num_tokens == 3
    assert Completion("a b", generated_tokens=9, logprobs=(-1.0,)).num_tokens == 9
    assert Completion("a b", logprobs=(-1.0, -2.0)).num_tokens == 2
    assert Completion("a b").num_tokens == 0


def _steps(body):  # scripted: two words per step, "\n\n" ends a step, the third step ends it all
    prompt = body["prompt"]
    depth = prompt.count("\n\n")
    return f"step {depth} word" + ("\n\n" if depth < 2 else "")


@pytest.fixture
def remote():
    server = FaultServer(respond=_steps).start()
    gen = OpenAIGenerator(server.url, "m", dialect="vllm", timeout=5.0, max_retries=0)
    yield server, gen
    gen.close()
    server.stop()


def test_scripted_step_search_nodes_count_the_servers_tokens(remote):
    server, gen = remote
    res = step_beam_search(gen, ["q"], lambda p, steps: [1.0] * len(steps), width=2,
                           branching=2, params=SamplingParams(temperature=1.0, max_tokens=16,
                                                              seed=1))[0]
    nodes, todo = [], list(res.trace["tree"]["children"])
    while todo:
        node = todo.pop()
        nodes.append(node)
        todo += node["children"]
    assert nodes and all(n["tokens"] == 3 for n in nodes)  # "step k word": 3 words = 3 tokens
    posts = [s for s in server.seen if s.path.endswith("/completions")]
    assert len(posts) == len(nodes)  # one request per sampled step
    assert res.usage.generated_tokens == 3 * len(posts)


def test_scripted_best_of_n_splits_usage_by_the_servers_tokens(remote):
    _, gen = remote
    a, b = best_of_n(gen, ["q", "q\n\nq\n\nq"], n=2, reward=lambda p, t: 0.0,
                     params=SamplingParams(temperature=1.0, max_tokens=16, seed=1))
    # the second prompt's samples are 3 words + "\n\n"-free; the first's too: equal shares
    assert a.usage.generated_tokens == b.usage.generated_tokens == 6
