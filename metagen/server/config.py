"""ServerConfig: what one ``metagen serve`` process allows, validated on construction."""

from __future__ import annotations

from dataclasses import dataclass

from metagen.errors import InvalidParameterError

PUBLIC_PATHS = frozenset({"/health"})  # the only routes served without the API key


@dataclass(slots=True, frozen=True)
class ServerConfig:
    """Limits and identity of a server.

    - ``model_name``: the id ``/v1/models`` lists and requests must name.
    - ``api_key``: when set, every route but ``/health`` needs ``Authorization: Bearer KEY``.
    - ``max_body_bytes``: larger request bodies get 413 (before they are read, when the
      ``Content-Length`` says so; otherwise as soon as the count passes it).
    - ``max_json_depth``: deeper JSON nesting gets 400 before it is parsed.
    - ``max_concurrent``: generation requests in flight at once; one more gets 429 with
      ``Retry-After`` at once (admission control counts requests, not connections).
    - ``max_prompts``: prompts in one ``/v1/completions`` request.
    - ``max_messages``: messages in one chat request.
    - ``max_headers`` / ``max_header_bytes``: more request headers, or more bytes in them, get
      431.
    """

    model_name: str
    api_key: str | None = None
    max_body_bytes: int = 4 * 1024 * 1024
    max_json_depth: int = 64
    max_concurrent: int = 256
    max_prompts: int = 256
    max_messages: int = 1024
    max_headers: int = 100
    max_header_bytes: int = 16 * 1024

    def __post_init__(self) -> None:
        if not isinstance(self.model_name, str) or not self.model_name:
            raise InvalidParameterError("model_name", self.model_name, "must be a non-empty string")
        if self.api_key is not None and (not isinstance(self.api_key, str) or not self.api_key
                                         or not self.api_key.isascii()):
            raise InvalidParameterError("api_key", "<redacted>",
                                        "must be a non-empty ASCII string (or None)")
        for name in ("max_body_bytes", "max_json_depth", "max_concurrent", "max_prompts",
                     "max_messages", "max_headers", "max_header_bytes"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise InvalidParameterError(name, value, "must be an integer >= 1")
