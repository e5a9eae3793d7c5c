"""onnxruntime-genai-specific behaviour (the common checks are in ``test_peer_conformance.py``):
speculative decoding with any drafting model but the draft itself, prompt lookup that proposes,
and best-of-N that is seeded but prefills the prompt once per sample (said in its counters)."""

from __future__ import annotations

import pytest

from benchmarks.peers import OnnxRuntimeGenAIPeer, Unsupported
from benchmarks.workloads import random_prompt, repetitive_prompt
from tests.benchmarks.conftest import VOCAB, loaded


@pytest.fixture(scope="module")
def peer(paths):
    p = loaded(OnnxRuntimeGenAIPeer, paths)
    yield p
    p.close()


def test_speculative_draft_counts_rounds_and_refuses_self_drafting(peer, ref):
    prompt = random_prompt(24, VOCAB, 4)
    want = ref.greedy("good_target", prompt, 20)
    for k in (1, 3):
        assert peer.speculative("good_target", prompt, 20, k, "draft") == want
        assert peer.last["rounds"] > 0
    with pytest.raises(Unsupported):  # the draft cannot draft for itself
        peer.speculative("draft", prompt, 20, 3, "draft")


def test_speculative_ngram_proposes(peer):
    peer.speculative("target", repetitive_prompt(48, VOCAB, 5, period=12), 20, 3, "ngram")
    assert peer.last["rounds"] > 0


def test_best_of_n_seeded_and_prefills_per_sample(peer):
    prompt = random_prompt(20, VOCAB, 13)
    a = peer.best_of_n("target", prompt, 4, 8, seed=3)
    assert peer.best_of_n("target", prompt, 4, 8, seed=3) == a
    assert peer.last["prefill_tokens"] == 4 * len(prompt)  # no shared prefill: said, not hidden
