"""The OpenAI-compatible HTTP server (``metagen serve``): :func:`create_app` over a
:class:`Backend` (:class:`LocalBackend` wraps the built-in engine), limited by a
:class:`ServerConfig`. Needs the ``server`` extra (FastAPI, uvicorn)."""

from metagen.server.app import create_app
from metagen.server.backend import Backend, EngineSnapshot, LocalBackend
from metagen.server.config import ServerConfig

__all__ = ["Backend", "EngineSnapshot", "LocalBackend", "ServerConfig", "create_app"]
