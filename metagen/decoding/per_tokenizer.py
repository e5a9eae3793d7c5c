"""A table built from a tokenizer once, on first use, and kept while the tokenizer lives."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class PerTokenizer(Generic[T]):
    """``cache(tokenizer)`` is ``build(tokenizer)``, built once per tokenizer object (held
    weakly: the table goes with its tokenizer). Safe to call from several threads: a table is
    built by one of them, under the cache's lock."""

    def __init__(self, build: Callable[[Any], T]) -> None:
        self._build = build
        self._tables: weakref.WeakKeyDictionary[Any, T] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def __call__(self, tokenizer: Any) -> T:
        with self._lock:
            table = self._tables.get(tokenizer)
            if table is None:
                table = self._build(tokenizer)
                self._tables[tokenizer] = table
            return table
