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
        if len(shown) > 200:  # bounded error size (RELIABILITY V25)
            shown = shown[:200] + "...(truncated)"
        super().__init__(f"invalid {param}={shown}: {reason}")
        self.param = param
        self.value = value
        self.reason = reason


class InvalidPromptError(InvalidParameterError):
    """A prompt is empty, malformed, out of vocabulary or longer than the context."""


class NumericalError(MetagenError, ArithmeticError):
    """Logits or scores contained NaN or infinity for one sequence (RELIABILITY V22)."""

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
    """Fewer samples succeeded than a strategy's ``min_successful`` (RELIABILITY C11/C12).

    ``partial`` carries whatever did succeed; ``failures`` maps a reason to its count.
    """

    def __init__(self, message: str, partial: Any = None, failures: dict[str, int] | None = None):
        super().__init__(message)
        self.partial = partial
        self.failures = dict(failures or {})


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
