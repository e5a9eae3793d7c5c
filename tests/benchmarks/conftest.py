"""Fixtures of the peer tests (``test_peer_*.py``): the quick benchmark models in the benchmark's own model
cache (so each peer's conversions, keyed by the model files, are reused from run to run) and the
transformers reference."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import factory
from benchmarks.peers import RemotePeer, TransformersPeer

VOCAB = factory.QUICK.vocab


@pytest.fixture(scope="module")
def paths() -> dict[str, Path]:
    return factory.build_models(factory.models_dir(), factory.QUICK, perturb=0.3)


@pytest.fixture(scope="module")
def ref(paths) -> TransformersPeer:
    p = TransformersPeer()
    p.load(paths)
    return p


def loaded(cls: type[RemotePeer], paths: dict[str, Path]):
    """A started peer of ``cls`` (skips the test when its environment is not installed)."""
    p = cls()
    if not p.available():
        pytest.skip(f"{p.name} peer not installed (bash benchmarks/setup_peers.sh {p.env})")
    p.load(paths)
    return p
