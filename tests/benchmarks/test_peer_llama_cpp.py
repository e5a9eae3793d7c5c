"""llama.cpp-specific behaviour (the common checks are in ``test_peer_conformance.py``):
speculative decoding reports rounds and acceptance, and sampling is seeded per call."""

from __future__ import annotations

import pytest

from benchmarks.peers import LlamaCppPeer
from benchmarks.workloads import random_prompt, repetitive_prompt
from tests.benchmarks.conftest import VOCAB, loaded


@pytest.fixture(scope="module")
def peer(paths):
    p = loaded(LlamaCppPeer, paths)
    yield p
    p.close()


@pytest.mark.parametrize("mode,model", [("ngram", "target"), ("draft", "good_target")])
def test_speculative_reports_rounds(peer, mode, model):
    peer.speculative(model, repetitive_prompt(64, VOCAB, 5, period=16), 20, 3, mode)
    assert peer.last["rounds"] >= 1 and 0.0 <= peer.last["acceptance_rate"] <= 1.0


def test_best_of_n_seeded_per_call(peer):
    prompt = random_prompt(20, VOCAB, 13)
    a = peer.best_of_n("target", prompt, 4, 8, seed=3)
    assert peer.best_of_n("target", prompt, 4, 8, seed=3) == a
    assert peer.best_of_n("target", prompt, 4, 8, seed=4) != a
