"""CTranslate2-specific behaviour (the common checks are in ``test_peer_conformance.py``):
no speculative decoding, and a sampling seed that only the worker's first call honours."""

from __future__ import annotations

import pytest

from benchmarks.peers import CTranslate2Peer, Unsupported
from benchmarks.workloads import random_prompt
from tests.benchmarks.conftest import VOCAB, loaded


def test_speculative_is_unsupported(paths):
    peer = loaded(CTranslate2Peer, paths)
    try:
        for mode in ("draft", "ngram"):
            with pytest.raises(Unsupported):
                peer.speculative("good_target", random_prompt(16, VOCAB, 5), 8, 2, mode)
    finally:
        peer.close()


def test_best_of_n_seeded_per_worker(paths):
    """CTranslate2 reads its seed once per thread, so only a worker's first sampling call is
    seeded: two fresh workers agree on it."""
    prompt = random_prompt(20, VOCAB, 13)
    samples = []
    for _ in range(2):
        fresh = loaded(CTranslate2Peer, paths)
        try:
            samples.append(fresh.best_of_n("target", prompt, 4, 8, seed=3))
        finally:
            fresh.close()
    assert samples[1] == samples[0]
