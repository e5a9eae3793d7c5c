"""The OpenVINO GenAI peer (``.peers/openvino-genai``) on the quick benchmark models, against
transformers. Skipped unless ``benchmarks/setup_peers.sh openvino-genai`` installed it.

The worker exports the models to fp32 OpenVINO IR (optimum-intel) and runs them in fp32 with an
fp32 KV cache, ignoring EOS, so greedy, beam and speculative tokens must equal transformers'
exactly; best-of-N samples are checked against transformers' next-token distribution.

The models live in the benchmark's default cache folder (not a fresh temporary one), so the
peer's IR conversions (keyed by the source files' mtimes) are reused from run to run: the first
run exports three models (about a minute on two busy cores), later runs only compile them.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import pytest
import torch

from benchmarks import factory
from benchmarks.peers import OpenVINOGenAIPeer, TransformersPeer
from benchmarks.workloads import random_prompt, repetitive_prompt

pytestmark = pytest.mark.skipif(
    not OpenVINOGenAIPeer().available(),
    reason="openvino-genai peer not installed (setup_peers.sh openvino-genai)")
VOCAB = factory.QUICK.vocab


@pytest.fixture(scope="module")
def paths():
    return factory.build_models(Path(tempfile.gettempdir()) / "metagen-bench-models",
                                factory.QUICK, perturb=0.3)


@pytest.fixture(scope="module")
def peer(paths):
    p = OpenVINOGenAIPeer()
    p.load(paths)
    yield p
    p.close()


@pytest.fixture(scope="module")
def ref(paths):
    p = TransformersPeer()
    p.load(paths)
    return p


@pytest.mark.parametrize("model", ["target", "good_target", "draft"])
def test_greedy_equals_transformers(peer, ref, model):
    prompt = random_prompt(40, VOCAB, 11)
    got = peer.greedy(model, prompt, 24)
    assert len(got) == 24
    assert got == ref.greedy(model, prompt, 24)
    assert peer.greedy(model, prompt, 1) == got[:1]
    assert peer.greedy(model, prompt[:1], 5) == ref.greedy(model, prompt[:1], 5)  # 1-token prompt


def test_greedy_does_not_stop_at_eos(peer, ref):
    """A prompt whose greedy continuation emits EOS (id 2, the models' generation_config eos):
    the peer must go on to max_new tokens and still agree with transformers (which treats EOS
    as a plain token)."""
    eos = 2
    for seed in range(200):
        prompt = random_prompt(8, VOCAB, 1000 + seed)
        want = ref.greedy("target", prompt, 30)
        if eos in want[:-1]:
            break
    else:
        pytest.skip("no greedy continuation with EOS found in 200 prompts")
    assert peer.greedy("target", prompt, 30) == want


@pytest.mark.parametrize("width", [2, 4])
def test_beam_equals_transformers(peer, ref, width):
    prompt = random_prompt(16, VOCAB, 12)
    got = peer.beam("target", prompt, width, 10)
    assert len(got) == 10
    assert got == ref.beam("target", prompt, width, 10)


def test_speculative_draft_equals_greedy(peer, ref):
    prompt = random_prompt(32, VOCAB, 4)
    got = peer.speculative("good_target", prompt, 16, 3, "draft")
    stats = dict(peer.last)
    assert got == ref.greedy("good_target", prompt, 16)
    assert 0.0 <= stats["acceptance_rate"] <= 1.0 and stats["proposed"] > 0
    assert stats["accepted"] <= stats["proposed"]


def test_speculative_ngram_equals_greedy(peer, ref):
    prompt = repetitive_prompt(40, VOCAB, 5, period=12)
    assert peer.speculative("target", prompt, 16, 3, "ngram") == ref.greedy("target", prompt, 16)


def test_best_of_n_exact_length_and_seeded(peer):
    """n samples of exactly max_new tokens; ``rng_seed`` makes a call reproducible within a
    worker, and another seed gives other samples."""
    prompt = random_prompt(20, VOCAB, 13)
    a = peer.best_of_n("target", prompt, 4, 8, seed=3)
    assert len(a) == 4 and all(len(s) == 8 and all(0 <= t < VOCAB for t in s) for s in a)
    assert peer.best_of_n("target", prompt, 4, 8, seed=3) == a
    assert peer.best_of_n("target", prompt, 4, 8, seed=4) != a
    assert len({tuple(s) for s in a}) > 1


def test_best_of_n_first_tokens_follow_the_model(peer, ref):
    """256 first tokens of temperature-1 samples vs transformers' softmax: the count of each of
    the 3 most likely tokens is Binomial(256, p); it must lie within 5 standard deviations (+1)
    of 256 p (a false alarm has probability < 2e-6)."""
    prompt = random_prompt(12, VOCAB, 14)
    n = 256
    firsts = [s[0] for s in peer.best_of_n("target", prompt, n, 1, seed=0)]
    assert len(firsts) == n
    with torch.inference_mode():
        logits = ref.models["target"](torch.tensor([prompt])).logits[0, -1]
    probs = torch.softmax(logits.double(), -1)
    for tok in probs.topk(3).indices.tolist():
        p = float(probs[tok])
        count = sum(t == tok for t in firsts)
        assert abs(count - n * p) <= 5 * math.sqrt(n * p * (1 - p)) + 1, (tok, count, n * p)
