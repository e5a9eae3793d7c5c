"""PerTokenizer: one build per tokenizer object, shared by threads, dropped with its tokenizer."""

from __future__ import annotations

import gc
import threading

from metagen.decoding.per_tokenizer import PerTokenizer


class _Tok:
    """A stand-in tokenizer (any weak-referenceable object keys the cache)."""


def test_built_once_per_tokenizer_across_threads_and_released_with_it():
    builds: list[int] = []

    def build(tok: _Tok) -> list[int]:
        builds.append(id(tok))
        return [id(tok)]

    cache = PerTokenizer(build)
    a, b = _Tok(), _Tok()
    got: list[list[int]] = []
    threads = [threading.Thread(target=lambda t=t: got.append(cache(t))) for t in [a, b] * 8]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(builds) == sorted([id(a), id(b)])  # one build each, 16 calls
    assert cache(a) is cache(a) and cache(a) != cache(b)
    del a, got
    gc.collect()
    assert len(cache._tables) == 1  # a's table went with it
