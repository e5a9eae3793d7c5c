"""The exception types users catch.

Every error metagen raises on purpose derives from :class:`MetagenError`. Errors about bad input
also derive from :class:`ValueError`, so generic ``except ValueError`` handlers keep working.
"""

from __future__ import annotations

from typing import Any


class MetagenError(Exception):
    """Base class of every error metagen raises on purpose."""


class InvalidParameterError(MetagenError, ValueError):
    """A parameter has a value metagen refuses. ``param`` names it, ``value`` is what was given."""

    def __init__(self, param: str, value: Any, reason: str) -> None:
        shown = repr(value)
        if len(shown) > 200:  # bounded error size (V25)
            shown = shown[:200] + "...(truncated)"
        super().__init__(f"invalid {param}={shown}: {reason}")
        self.param = param
        self.value = value
        self.reason = reason


class InvalidPromptError(InvalidParameterError):
    """A prompt is empty, malformed, out of vocabulary or longer than the context."""


class NumericalError(MetagenError, ArithmeticError):
    """Logits or scores contained NaN or infinity for one sequence (V22)."""

    def __init__(self, message: str, row: int | None = None) -> None:
        super().__init__(message)
        self.row = row


class CapabilityError(MetagenError):
    """An algorithm needs a capability the backend does not have (no silent downgrade)."""


class EngineDeadError(MetagenError):
    """The engine loop serving a generator has stopped (closed, or its engine failed outside
    any request); ``cause`` is the exception that stopped it, if any."""

    def __init__(self, message: str, cause: BaseException | None = None) -> None:
        super().__init__(message)
        self.cause = cause


class ModelLoadError(MetagenError):
    """A model folder is missing, malformed, or of an architecture this backend cannot run.

    A checkpoint that is inconsistent (a config that does not match its weights, a truncated or
    corrupt file, an impossible config value) raises this class itself; only
    :class:`UnsupportedArchitectureError` means that another backend may run the model.
    """


class UnsupportedArchitectureError(ModelLoadError):
    """The checkpoint is well formed but uses an architecture, feature or file format that this
    backend does not implement; another backend (``metagen.HFGenerator``) may run it."""


class DeviceUnavailableError(InvalidParameterError, ModelLoadError):
    """The ``device`` asked for does not exist or cannot be used on this machine (``cuda``
    without CUDA, a misspelt name). Both an invalid parameter and a reason a model cannot load."""


class InsufficientSamples(MetagenError):
    """Fewer samples succeeded than a strategy's ``min_successful`` (C11/C12).

    ``partial`` carries whatever did succeed; ``failures`` maps a reason to its count.
    """

    def __init__(self, message: str, partial: Any = None, failures: dict[str, int] | None = None):
        super().__init__(message)
        self.partial = partial
        self.failures = dict(failures or {})


class CallCancelled(MetagenError):
    """A call stopped because its caller cancelled it (e.g. the HTTP client that asked for a
    strategy left); its requests were aborted and hold no engine resources."""


class CodeExecutionNotAllowed(MetagenError):
    """Running model-written code was asked for without the caller's explicit opt-in
    (``allow_code_execution=True`` or the environment variable ``METAGEN_ALLOW_CODE_EXECUTION=1``).
    Raised before anything runs, and checkable up front with
    :func:`metagen.sandbox.check_code_execution`."""


class SandboxUnavailable(CapabilityError):
    """No sandbox backend works on this machine (or the one asked for does not). ``reasons``
    lists what the capability check found; nothing falls back to unsandboxed execution unless the
    caller names the ``unsafe-local`` backend."""

    def __init__(self, message: str, reasons: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.reasons = tuple(reasons)


class BackendError(MetagenError):
    """A remote generation backend (an OpenAI-compatible server) failed one request.

    ``outcome`` is the sample outcome it stands for (``invalid_request``, ``rate_limited``,
    ``timeout``, ``server_error``, ``transport_error``); ``status`` the HTTP status (None when no
    response came), ``param`` the request parameter the server blamed (if it said), ``message``
    the server's message, bounded and with the API key redacted.
    """

    outcome = "server_error"

    def __init__(self, message: str, *, status: int | None = None, param: str | None = None,
                 cause: BaseException | None = None) -> None:
        if len(message) > 500:  # bounded error size
            message = message[:500] + "...(truncated)"
        shown = f"HTTP {status}: {message}" if status is not None else message
        super().__init__(shown + (f" (param {param!r})" if param else ""))
        self.message = message
        self.status = status
        self.param = param
        self.cause = cause


class InvalidRequest(BackendError):
    """The server refused the request (HTTP 4xx other than 408/429); never retried."""

    outcome = "invalid_request"


class RateLimited(BackendError):
    """HTTP 429 after every allowed retry, or with a ``Retry-After`` (``retry_after`` seconds)
    longer than the client is willing to wait."""

    outcome = "rate_limited"

    def __init__(self, message: str, *, retry_after: float | None = None,
                 status: int | None = 429, param: str | None = None,
                 cause: BaseException | None = None) -> None:
        super().__init__(message, status=status, param=param, cause=cause)
        self.retry_after = retry_after


class ServerError(BackendError):
    """HTTP 5xx (or 408) after every allowed retry."""


class BackendProtocolError(ServerError):
    """The server answered with something that is not a valid response (not JSON, an HTML error
    page, missing or inconsistent fields); ``cause`` is the decode or validation error."""


class BackendTimeout(BackendError, TimeoutError):
    """A request did not finish within its deadline (retries and waits included)."""

    outcome = "timeout"


class TransportError(BackendError, ConnectionError):
    """The connection failed (refused, reset, closed mid-body) after every allowed retry."""

    outcome = "transport_error"


class TruncatedStream(BackendError):
    """A streamed response ended (connection closed) before its ``finish_reason`` or its
    ``[DONE]`` marker: the text received so far is not a complete completion."""

    outcome = "truncated"


class RunFolderBusyError(InvalidParameterError):
    """Another process is running an evaluation into the same output folder (``param`` is
    ``out``); ``holder`` is its pid when it could be read. Raised before any model is loaded."""

    def __init__(self, folder: str, holder: int | None) -> None:
        who = f"pid {holder}" if holder is not None else "another process"
        super().__init__("out", folder, f"is in use by another metagen eval ({who}); wait for "
                         "it to end or use another --out")
        self.holder = holder


class RunFolderWriteError(MetagenError):
    """Writing a run's folder failed mid-run (no space left, a quota, a read-only or failing
    disk). ``path`` is the file that could not be written, ``reason`` what the system said. What
    was committed before stays; once the cause is fixed, rerunning the same command resumes."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"cannot write {path}: {reason}; the items already stored are kept, "
                         "and rerunning the same command resumes once that is fixed")
        self.path = path
        self.reason = reason
