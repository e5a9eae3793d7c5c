"""OpenVINO GenAI-specific behaviour (the common checks are in ``test_peer_conformance.py``):
draft-model speculative decoding reports its acceptance, and sampling is seeded per call."""

from __future__ import annotations

import pytest

from benchmarks.peers import OpenVINOGenAIPeer
from benchmarks.workloads import random_prompt
from tests.benchmarks.conftest import VOCAB, loaded


@pytest.fixture(scope="module")
def peer(paths):
    p = loaded(OpenVINOGenAIPeer, paths)
    yield p
    p.close()


def test_speculative_draft_reports_acceptance(peer):
    peer.speculative("good_target", random_prompt(32, VOCAB, 4), 16, 3, "draft")
    stats = dict(peer.last)
    assert 0.0 <= stats["acceptance_rate"] <= 1.0 and stats["proposed"] > 0
    assert stats["accepted"] <= stats["proposed"]


def test_best_of_n_seeded_per_call(peer):
    prompt = random_prompt(20, VOCAB, 13)
    a = peer.best_of_n("target", prompt, 4, 8, seed=3)
    assert peer.best_of_n("target", prompt, 4, 8, seed=3) == a
    assert peer.best_of_n("target", prompt, 4, 8, seed=4) != a
