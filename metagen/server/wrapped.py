""":class:`Wrapped`: a generator the server puts around the one a strategy runs on, changing
only ``generate`` (bounding, counting, cancelling or stopping its calls); its capabilities, its
usage and every other attribute are the inner generator's."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from metagen.generators.base import Capabilities, Generator, Prompt
from metagen.types import Completion, SamplingParams, Usage


class Wrapped:
    """``inner`` seen through a subclass's ``generate`` (which defaults to ``inner``'s)."""

    def __init__(self, inner: Generator) -> None:
        self._inner = inner

    @property
    def capabilities(self) -> Capabilities:
        return self._inner.capabilities

    @property
    def usage(self) -> Usage:
        return self._inner.usage

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def generate(self, prompts: Sequence[Prompt], params: SamplingParams
                 ) -> list[list[Completion]]:
        return self._inner.generate(prompts, params)
