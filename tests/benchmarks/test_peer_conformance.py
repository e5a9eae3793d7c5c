"""Every installed peer against transformers on the quick benchmark models — what the benchmark
relies on when it compares their speeds: the same greedy tokens (also past an EOS, which every
peer must ignore), the same beam search result, speculative decoding that equals greedy (or is
Unsupported), and best-of-N samples of exactly the asked length drawn from the model's
distribution. A peer whose environment is not installed (``bash benchmarks/setup_peers.sh``) is
skipped. Peer-specific behaviour is tested in ``test_peer_<name>.py``."""

from __future__ import annotations

import math

import pytest
import torch

from benchmarks.peers import (
    CTranslate2Peer,
    LlamaCppPeer,
    OnnxRuntimeGenAIPeer,
    OpenVINOGenAIPeer,
    Unsupported,
)
from benchmarks.workloads import random_prompt, repetitive_prompt
from tests.benchmarks.conftest import VOCAB, loaded

PEERS = [CTranslate2Peer, OnnxRuntimeGenAIPeer, OpenVINOGenAIPeer, LlamaCppPeer]
EOS = 2


@pytest.fixture(scope="module", params=PEERS, ids=lambda c: c.name)
def peer(request, paths):
    p = loaded(request.param, paths)
    yield p
    p.close()


@pytest.mark.parametrize("model", ["target", "good_target", "draft"])
def test_greedy_equals_transformers(peer, ref, model):
    prompt = random_prompt(40, VOCAB, 11)
    got = peer.greedy(model, prompt, 24)
    assert got == ref.greedy(model, prompt, 24) and len(got) == 24
    assert peer.greedy(model, prompt, 1) == got[:1]
    assert peer.greedy(model, prompt[:1], 5) == ref.greedy(model, prompt[:1], 5)  # 1-token prompt


def test_greedy_does_not_stop_at_eos(peer, ref):
    """A prompt whose greedy continuation emits EOS: the peer goes on to max_new tokens and
    still agrees with transformers (which treats EOS as a plain token)."""
    for seed in range(200):
        prompt = random_prompt(8, VOCAB, 1000 + seed)
        want = ref.greedy("target", prompt, 30)
        if EOS in want:
            break
    else:
        pytest.skip("no greedy continuation with EOS in 200 prompts")
    assert peer.greedy("target", prompt, 30) == want


@pytest.mark.parametrize("width", [2, 4])
def test_beam_equals_transformers(peer, ref, width):
    prompt = random_prompt(16, VOCAB, 12)
    got = peer.beam("target", prompt, width, 10)
    assert got == ref.beam("target", prompt, width, 10) and len(got) == 10


@pytest.mark.parametrize("mode,model", [("draft", "good_target"), ("ngram", "target")])
def test_speculative_equals_greedy_or_is_unsupported(peer, ref, mode, model):
    prompt = repetitive_prompt(48, VOCAB, 5, period=12)
    try:
        got = peer.speculative(model, prompt, 20, 3, mode)
    except Unsupported:
        return
    assert got == ref.greedy(model, prompt, 20)


def test_best_of_n_exact_length_and_distinct(peer):
    prompt = random_prompt(20, VOCAB, 13)
    a = peer.best_of_n("target", prompt, 4, 8, seed=3)
    assert len(a) == 4 and all(len(s) == 8 and all(0 <= t < VOCAB for t in s) for s in a)
    assert len({tuple(s) for s in a}) > 1


def test_best_of_n_first_tokens_follow_the_model(peer, ref):
    """256 first tokens of temperature-1 samples vs transformers' softmax: the count of each of
    the 3 most likely tokens is Binomial(256, p) and must lie within 5 standard deviations (+1)
    of 256 p (a false alarm has probability < 2e-6 per check)."""
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
