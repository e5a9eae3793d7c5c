"""The llama.cpp peer (llama-cpp-python in ``.peers/llama.cpp``) on the quick benchmark models,
against transformers. Skipped unless ``benchmarks/setup_peers.sh llama.cpp`` installed it.

The models are converted to fp32 GGUF by the worker and decoded with an fp32 KV cache, so greedy
and beam tokens must equal transformers' exactly; speculative outputs must equal the peer's own
greedy; best-of-N samples are checked against transformers' next-token distribution.
"""

from __future__ import annotations

import math
import os
import tempfile
from pathlib import Path

import pytest
import torch

from benchmarks import factory
from benchmarks.peers import LlamaCppPeer, TransformersPeer
from benchmarks.workloads import random_prompt, repetitive_prompt

pytestmark = pytest.mark.skipif(not LlamaCppPeer().available(),
                                reason="llama.cpp peer not installed (setup_peers.sh llama.cpp)")
VOCAB = factory.QUICK.vocab


@pytest.fixture(scope="module")
def paths():
    """The benchmark's own model cache (as ``engine_bench --quick``): the worker's GGUF
    conversions, keyed by the model files, are then reused across runs."""
    cache = Path(os.environ.get("METAGEN_BENCH_CACHE")
                 or Path(tempfile.gettempdir()) / "metagen-bench-models")
    return factory.build_models(cache, factory.QUICK, perturb=0.3)


@pytest.fixture(scope="module")
def peer(paths):
    p = LlamaCppPeer()
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
    assert peer.greedy(model, prompt, 1) == got[:1]  # a fresh prefill each call


@pytest.mark.parametrize("width", [2, 4])
def test_beam_equals_transformers(peer, ref, width):
    prompt = random_prompt(16, VOCAB, 12)
    got = peer.beam("target", prompt, width, 10)
    assert len(got) == 10
    assert got == ref.beam("target", prompt, width, 10)


@pytest.mark.parametrize("mode,model", [("ngram", "target"), ("draft", "good_target")])
def test_speculative_equals_own_greedy(peer, mode, model):
    prompt = repetitive_prompt(64, VOCAB, 5, period=16)
    greedy = peer.greedy(model, prompt, 20)
    assert peer.speculative(model, prompt, 20, 3, mode) == greedy
    assert peer.last["rounds"] >= 1 and 0.0 <= peer.last["acceptance_rate"] <= 1.0


def test_best_of_n_is_seeded_and_exact_length(peer):
    prompt = random_prompt(20, VOCAB, 13)
    a = peer.best_of_n("target", prompt, 4, 8, seed=3)
    assert len(a) == 4 and all(len(s) == 8 and all(0 <= t < VOCAB for t in s) for s in a)
    assert peer.best_of_n("target", prompt, 4, 8, seed=3) == a
    assert peer.best_of_n("target", prompt, 4, 8, seed=4) != a
    assert len({tuple(s) for s in a}) > 1


def test_best_of_n_first_tokens_follow_the_model(peer, ref, paths):
    """192 first tokens of temperature-1 samples vs transformers' softmax: the count of the
    most likely token is Binomial(192, p); it must lie within 5 standard deviations of 192 p
    (a false alarm has probability < 1e-6)."""
    prompt = random_prompt(12, VOCAB, 14)
    n = 192
    firsts = [s[0] for s in peer.best_of_n("target", prompt, n, 1, seed=0)]
    with torch.inference_mode():
        logits = ref.models["target"](torch.tensor([prompt])).logits[0, -1]
    probs = torch.softmax(logits.double(), -1)
    tok = int(probs.argmax())
    p = float(probs[tok])
    count = sum(t == tok for t in firsts)
    assert abs(count - n * p) <= 5 * math.sqrt(n * p * (1 - p)) + 1, (count, n * p)
