"""OpenAIGenerator against a real OpenAI-compatible server nobody here wrote: llama-cpp-python's
(``python -m llama_cpp.server``), serving stories260K converted to an fp32 GGUF with its own
vocabulary, compared with metagen's built-in engine (LocalGenerator) on the same weights.

Needs the llama.cpp peer environment (``bash benchmarks/setup_peers.sh llama.cpp``, which also
installs the server's dependencies); skipped without it. The server runs as a subprocess on a
free loopback port for the module and is stopped by its pid at teardown, also when a test fails.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

import pytest

httpx = pytest.importorskip("httpx", reason="needs httpx: pip install 'metagen[openai]'")

from benchmarks.peers.llama_cpp_server import SETUP, llama_cpp_python, serve  # noqa: E402
from metagen.errors import CapabilityError  # noqa: E402
from metagen.generators.openai import OpenAIGenerator  # noqa: E402
from metagen.strategies import best_of_n  # noqa: E402
from metagen.strategies.step_beam import step_beam_search  # noqa: E402
from metagen.strategies.steps import StepDefinition  # noqa: E402
from metagen.strategies.voting import weighted_vote  # noqa: E402
from metagen.types import SamplingParams  # noqa: E402
from tests.tolerances import FLOAT_LOGPROB_TOL

pytestmark = pytest.mark.slow

GREEDY = SamplingParams(temperature=0.0, max_tokens=48)
PROMPTS = ["Once upon a time", "Tom had a dog", "The sun was"]
SENTENCES = StepDefinition(stop=(".",), max_step_tokens=30, final_marker=None)


def _length_value(prompt: str, steps: list[str]) -> list[float]:
    """A plain-callable PRM: prefers sentences of about 40 characters."""
    return [-abs(len(s) - 40) / 40 for s in steps]


@pytest.fixture(scope="module")
def server(stories_path, tmp_path_factory) -> Iterator[dict[str, Any]]:
    """``{"url", "version", "model"}`` of a running llama-cpp-python server on stories260K (one
    thread, its fp32 KV cache, the model's 512-token context)."""
    if llama_cpp_python() is None:
        pytest.skip(f"llama.cpp peer environment not installed ({SETUP})")
    log = tmp_path_factory.mktemp("llama_server") / "server.log"
    with serve(stories_path, "stories260K", log, threads=1, ready_timeout=120.0) as running:
        yield {"url": running.url, "version": running.version, "model": running.model}


@pytest.fixture(scope="module")
def gen(server) -> Iterator[OpenAIGenerator]:
    with OpenAIGenerator(server["url"], server["model"], timeout=120.0,
                         max_concurrency=2) as g:
        yield g


@pytest.fixture(scope="module")
def local(stories_path):
    from metagen.generators.local import LocalGenerator
    with LocalGenerator.from_pretrained(stories_path) as g:
        yield g


@pytest.fixture(scope="module")
def tokenizer(stories_path):
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(stories_path)


def _post(server: dict[str, Any], body: dict[str, Any]) -> dict[str, Any]:
    resp = httpx.post(server["url"] + "/completions", json={"model": server["model"], **body},
                      timeout=60.0)
    resp.raise_for_status()
    return dict(resp.json())


def test_probe_finds_llama_cpp_python_and_what_it_honours(server, gen):
    """The dialect probe recognises the server; seeds, stop, logprobs (no token ids) are
    honoured; ``n`` is ignored (one choice), hence one request per sample; echo returns the
    prompt, but ``max_tokens=0`` means "until the context is full" there, so the prompt-only
    echo ``score`` needs is refused before any request."""
    assert gen.dialect.name == "llamacpp-python"
    caps = gen.capabilities
    assert (caps.seeded, caps.logprobs, caps.prompt_scoring) == (True, False, False)
    two = _post(server, {"prompt": "Once upon a time", "n": 2, "max_tokens": 4,
                         "temperature": 1.0, "seed": 1})
    assert len(two["choices"]) == 1
    echo = _post(server, {"prompt": "Once upon a time", "echo": True, "max_tokens": 1,
                          "temperature": 0.0})
    assert echo["choices"][0]["text"].startswith("Once upon a time")
    print(f"\nllama-cpp-python {server['version']}: dialect {gen.dialect.name}, {caps}; "
          f"n=2 -> {len(two['choices'])} choice; echo ok")


def test_the_gguf_vocabulary_splits_text_as_the_models_tokenizer(server, tokenizer):
    """The GGUF's sentencepiece vocabulary (restated from tokenizer.json: merge ranks as piece
    scores, byte fallback) gives the ids of the model's own tokenizer, BOS included."""
    texts = ["Once upon a time, there was a little girl.", "Tom's dog ran  fast!\n\"Wow\"",
             "naïve café 42 €", "The the THE tHe."]
    for text in texts:
        resp = httpx.post(server["url"].removesuffix("/v1") + "/extras/tokenize",
                          json={"input": text}, timeout=30.0)
        assert resp.json()["tokens"] == tokenizer(text).input_ids, text


def test_greedy_equals_the_builtin_engine_token_for_token(gen, local):
    """Temperature 0: the same text, the same number of tokens and the same per-token logprobs
    (fp32 weights and KV cache on both; ggml's kernels vs torch's) as LocalGenerator on the
    same weights."""
    params = GREEDY.with_(logprobs=0)
    remote = gen.generate(PROMPTS, params)
    ref = local.generate(PROMPTS, params)
    for [r], [e] in zip(remote, ref):
        assert r.text == e.text and r.finish_reason == e.finish_reason
        assert r.logprobs is not None and e.logprobs is not None
        assert len(r.logprobs) == len(e.token_ids)
        worst = max(abs(a - b) for a, b in zip(r.logprobs, e.logprobs))
        print(f"\n{len(e.token_ids)} greedy tokens equal; max |logprob diff| {worst:.2e}")
        assert worst < FLOAT_LOGPROB_TOL


def test_seeded_sampling_is_reproducible_and_samples_differ(gen):
    params = SamplingParams(n=4, temperature=1.0, seed=11, max_tokens=24)
    first = [c.text for c in gen.generate(["Once upon a time"], params)[0]]
    again = [c.text for c in gen.generate(["Once upon a time"], params)[0]]
    assert first == again and len(set(first)) > 1


def test_stop_max_tokens_and_usage_come_from_the_server(gen, local, tokenizer):
    full = local.generate(["Once upon a time"], GREEDY)[0][0].text
    assert "Lily" in full
    [stopped] = gen.generate(["Once upon a time"], GREEDY.with_(stop=("Lily",)))[0]
    assert stopped.text == full.split("Lily")[0] and stopped.finish_reason == "stop"
    assert stopped.stop_reason == "Lily"  # read from the tokens: the server names none
    before = gen.usage
    [[short]] = gen.generate_samples(["Once upon a time"], GREEDY.with_(max_tokens=5))
    assert short.parsed is not None and short.parsed.completion_tokens == 5
    assert short.completion.finish_reason == "length"
    [[ref]] = local.generate(["Once upon a time"], GREEDY.with_(max_tokens=5))
    assert short.completion.text == ref.text and len(ref.token_ids) == 5
    call = gen.usage - before
    prompt_tokens = len(tokenizer("Once upon a time").input_ids)  # BOS included, as served
    assert short.parsed.prompt_tokens == prompt_tokens
    assert (call.prompt_tokens, call.generated_tokens, call.calls) == (prompt_tokens, 5, 1)
    assert math.isnan(gen.usage.generator_flops)  # no num_params declared: unknown, not 0


def test_best_of_n_picks_the_highest_reward_and_counts_the_servers_tokens(gen):
    params = SamplingParams(temperature=1.0, seed=3, max_tokens=16)
    reward = lambda p, t: float(t.count(" "))  # noqa: E731
    rows = gen.generate_samples(["Once upon a time"], params.with_(n=6))[0]
    res = best_of_n(gen, "Once upon a time", n=6, reward=reward, params=params)
    assert [c.text for c in res.candidates] == [s.completion.text for s in rows]
    assert res.text == max((s.completion.text for s in rows), key=lambda t: reward("", t))
    assert res.usage.generated_tokens == sum(s.parsed.completion_tokens for s in rows
                                             if s.parsed is not None)


def test_weighted_vote_and_the_servers_sampled_logprobs(gen, local):
    """weighted_vote by its default weight, exp(mean logprob) over the server's logprobs (it
    returns no token ids), and with a reward. The sampled candidates' logprobs equal the
    built-in engine's score of the same text where the server's tokens are the tokenizer's own
    split of it (a sampled non-canonical split has another probability)."""
    params = SamplingParams(temperature=1.0, seed=5, max_tokens=8, logprobs=0)
    first = lambda t: (t.split() or [""])[0]  # noqa: E731
    by_prob = weighted_vote(gen, "Once upon a time", n=2, params=params, extract=first)
    assert by_prob.trace["weights"] == pytest.approx(
        [math.exp(sum(c.logprobs) / len(c.logprobs)) for c in by_prob.candidates])
    reward = lambda p, t: 1.0 + t.count(" ")  # noqa: E731
    res = weighted_vote(gen, "Once upon a time", n=6, params=params, extract=first,
                        reward=reward)
    assert res.best is not None and len(res.candidates) == 6 and not res.failures
    assert res.trace["weights"] == [reward("", c.text) for c in res.candidates]
    votes = res.trace["votes"]
    assert votes[res.trace["answer"]] == max(votes.values())
    assert first(res.text) == res.trace["answer"]
    assert res.usage.generated_tokens == sum(len(c.logprobs or ()) for c in res.candidates)
    scored = local.score(["Once upon a time"], [[c.text for c in res.candidates]])[0]
    sums = [sum(c.logprobs or ()) for c in res.candidates]
    matched = sum(abs(a - b) < 1e-3 for a, b in zip(sums, scored))
    assert matched >= 4, (sums, scored)


def test_step_beam_search_with_a_prm_matches_the_builtin_engine(gen, local):
    """Greedy width-1 step beam search over sentences gives the built-in engine's text (each
    step closed by the "." the server cut, which it does not name); a sampled search over two
    prompts grows sentence steps and accounts the server's token counts."""
    kw: dict[str, Any] = {"steps": SENTENCES, "max_depth": 3, "width": 1, "branching": 1,
                          "params": SamplingParams(temperature=0.0)}
    [remote] = step_beam_search(gen, ["Once upon a time"], _length_value, **kw)
    [ref] = step_beam_search(local, ["Once upon a time"], _length_value, **kw)
    assert remote.text == ref.text and remote.text.count(".") == 3
    before = gen.usage
    res = step_beam_search(gen, ["Once upon a time", "Tom had a dog"], _length_value, width=2,
                           branching=2, max_depth=2, steps=SENTENCES,
                           params=SamplingParams(temperature=1.0, seed=1))
    spent = gen.usage - before
    steps = 0
    for r in res:
        assert r.best is not None and r.candidates
        stack = list(r.trace["tree"]["children"])
        while stack:
            node = stack.pop()
            steps += 1
            assert node["step"].endswith(".") or node["terminal"]
            stack.extend(node["children"])
        json.dumps(r.trace)
    assert res[0].trace["batch_usage"]["generated_tokens"] == spent.generated_tokens >= steps
    assert sum(r.usage.generated_tokens for r in res) == spent.generated_tokens


def test_score_is_refused_with_a_capability_error_before_any_request(gen):
    with pytest.raises(CapabilityError, match="cannot score"):
        gen.score(["Once upon a time"], [[", there was"]])
