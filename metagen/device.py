"""Which torch device a backend loads on, checked before any weight is read."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar

from metagen.errors import DeviceUnavailableError

if TYPE_CHECKING:
    import torch

_M = TypeVar("_M", bound="torch.nn.Module")


def resolve_device(device: str) -> str:
    """The torch device string for ``device`` ("auto": CUDA when available, else CPU).

    Raises :class:`~metagen.errors.DeviceUnavailableError` (an ``InvalidParameterError`` and a
    ``ModelLoadError``) naming ``device`` when torch does not know the name, or when that device
    cannot be used here (``cuda`` without CUDA, ``cuda:3`` on a one-GPU machine, ``meta``), so a
    bad device fails before any weight is read.
    """
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise DeviceUnavailableError("device", device, "not a torch device name (e.g. 'cpu', "
                                     "'cuda', 'cuda:1', 'mps')") from exc
    if parsed.type == "cpu":
        return device
    if parsed.type == "meta":
        raise DeviceUnavailableError("device", device, "a meta tensor holds no data to run")
    backend = getattr(torch, parsed.type, None)
    available = (torch.backends.mps.is_available if parsed.type == "mps"
                 else getattr(backend, "is_available", None))
    if available is None or not available():
        raise DeviceUnavailableError("device", device,
                                     f"{parsed.type} is not available on this machine")
    count = getattr(backend, "device_count", None)
    if parsed.index is not None and count is not None and parsed.index >= count():
        raise DeviceUnavailableError("device", device,
                                     f"this machine has {count()} {parsed.type} device(s)")
    return device


def model_on(model: _M, device: str) -> _M:
    """``model.to(device)``, typed as the model (transformers wraps ``to`` in ``functools.wraps``,
    which type checkers read as an unbound function)."""
    return model.to(device)
