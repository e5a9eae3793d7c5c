"""The CTranslate2 peer (``.peers/ctranslate2``) on the quick benchmark models, against
transformers. Skipped unless ``benchmarks/setup_peers.sh ctranslate2`` installed it.

The worker converts the models to float32 CTranslate2 models (synthetic one-piece-per-id
vocabulary) and ignores EOS by an end token outside the vocabulary, so greedy and beam tokens must
equal transformers' exactly; best-of-N samples are checked against transformers' next-token
distribution; speculative decoding is Unsupported (CTranslate2 has none).
"""

from __future__ import annotations

import math

import pytest
import torch

from benchmarks import factory
from benchmarks.peers import CTranslate2Peer, TransformersPeer, Unsupported
from benchmarks.workloads import random_prompt

pytestmark = pytest.mark.skipif(
    not CTranslate2Peer().available(),
    reason="ctranslate2 peer not installed (setup_peers.sh ctranslate2)")
VOCAB = factory.QUICK.vocab


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    return factory.build_models(tmp_path_factory.mktemp("models"), factory.QUICK, perturb=0.3)


@pytest.fixture(scope="module")
def peer(paths):
    p = CTranslate2Peer()
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
    """A prompt whose greedy continuation emits EOS (id 2) somewhere: the peer must go on to
    max_new tokens and still agree with transformers (which treats EOS as a plain token)."""
    eos = 2
    for seed in range(200):
        prompt = random_prompt(8, VOCAB, 1000 + seed)
        want = ref.greedy("target", prompt, 30)
        if eos in want:
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


def test_speculative_is_unsupported(peer):
    for mode in ("draft", "ngram"):
        with pytest.raises(Unsupported):
            peer.speculative("good_target", random_prompt(16, VOCAB, 5), 8, 2, mode)


def test_best_of_n_exact_length_and_seeded_per_worker(peer, paths):
    """n distinct samples of exactly max_new tokens. CTranslate2 reads its seed once per thread,
    so only a worker's first sampling call is seeded: two fresh workers agree on it."""
    prompt = random_prompt(20, VOCAB, 13)
    samples = []
    for _ in range(2):
        fresh = CTranslate2Peer()
        fresh.load(paths)
        try:
            samples.append(fresh.best_of_n("target", prompt, 4, 8, seed=3))
        finally:
            fresh.close()
    a = samples[0]
    assert len(a) == 4 and all(len(s) == 8 and all(0 <= t < VOCAB for t in s) for s in a)
    assert samples[1] == a
    assert len({tuple(s) for s in a}) > 1


def test_best_of_n_first_tokens_follow_the_model(peer, ref):
    """256 first tokens of temperature-1 samples vs transformers' softmax: the count of each of
    the 3 most likely tokens is Binomial(256, p); it must lie within 5 standard deviations (+1)
    of 256 p (a false alarm has probability < 2e-6)."""
    prompt = random_prompt(12, VOCAB, 14)
    n = 256
    firsts = [s[0] for s in peer.best_of_n("target", prompt, n, 1, seed=0)]
    with torch.inference_mode():
        logits = ref.models["target"](torch.tensor([prompt])).logits[0, -1]
    probs = torch.softmax(logits.double(), -1)
    for tok in probs.topk(3).indices.tolist():
        p = float(probs[tok])
        count = sum(t == tok for t in firsts)
        assert abs(count - n * p) <= 5 * math.sqrt(n * p * (1 - p)) + 1, (tok, count, n * p)
