"""Server-sent events of a streamed OpenAI-compatible response, as pure functions.

A stream is ``data: <json>`` lines (blank lines and ``:`` comments between them) ending with
``data: [DONE]``. :func:`parse_sse_line` decodes one line; :class:`StreamState` folds the chunks
of one ``n=1`` completion: its text deltas, its ``finish_reason`` and the final ``usage`` chunk
(``stream_options.include_usage``). An ``{"error": ...}`` chunk (vLLM's in-stream error) becomes
its typed error; a stream that ends without both a finish reason and ``[DONE]`` is
:class:`~metagen.errors.TruncatedStream`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from metagen.errors import BackendProtocolError, TruncatedStream
from metagen.generators.openai_retry import http_error

DONE = "[DONE]"


def parse_sse_line(line: str) -> Any:
    """None for a line that carries no data; ``DONE``; else the decoded JSON chunk (raises
    :class:`BackendProtocolError` wrapping the decode error)."""
    if not line.startswith("data:"):
        return None
    payload = line[len("data:"):].strip()
    if payload == DONE:
        return DONE
    try:
        return json.loads(payload)
    except ValueError as exc:
        raise BackendProtocolError(f"stream chunk is not JSON: {exc}", cause=exc) from None


@dataclass
class StreamState:
    """What one streamed completion has delivered so far."""

    chat: bool
    emitted: bool = False
    finish_reason: str | None = None
    done: bool = False
    prompt_tokens: int | None = None
    completion_tokens: int | None = None

    def feed(self, chunk: Any, secret: str | None) -> str:
        """The text delta in ``chunk`` ('' for none); raises the typed error of an error chunk
        and :class:`BackendProtocolError` for a chunk that is not a completion chunk."""
        if chunk == DONE:
            self.done = True
            return ""
        if not isinstance(chunk, Mapping):
            raise BackendProtocolError("stream chunk is not a JSON object")
        if "error" in chunk:
            return _raise_error(chunk["error"], secret)
        usage = chunk.get("usage")
        if isinstance(usage, Mapping):
            p, c = usage.get("prompt_tokens"), usage.get("completion_tokens")
            self.prompt_tokens = p if isinstance(p, int) else None
            self.completion_tokens = c if isinstance(c, int) else None
        choices = chunk.get("choices")
        if not isinstance(choices, list) or len(choices) > 1:
            raise BackendProtocolError("stream chunk without a choices list of at most 1")
        text = ""
        for choice in choices:
            if not isinstance(choice, Mapping):
                raise BackendProtocolError("stream choice is not an object")
            if self.chat:
                delta = choice.get("delta")
                piece = delta.get("content") if isinstance(delta, Mapping) else None
            else:
                piece = choice.get("text")
            text += piece if isinstance(piece, str) else ""
            if isinstance(choice.get("finish_reason"), str):
                self.finish_reason = choice["finish_reason"]
        self.emitted = self.emitted or bool(text)
        return text

    def check_complete(self) -> None:
        """Raise :class:`TruncatedStream` unless the stream finished properly."""
        if self.finish_reason is None or not self.done:
            missing = " and ".join(m for m, ok in (("finish_reason", self.finish_reason),
                                                   ("[DONE]", self.done)) if not ok)
            raise TruncatedStream(f"the stream ended without {missing}")


def _raise_error(error: Any, secret: str | None) -> str:
    status = error.get("code") if isinstance(error, Mapping) else None
    status = status if isinstance(status, int) and 400 <= status < 600 else 500
    raise http_error(status, json.dumps({"error": error}).encode(), None, secret)


__all__ = ["DONE", "StreamState", "parse_sse_line"]
