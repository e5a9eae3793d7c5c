"""What CPU this is: the one reader of ``/proc/cpuinfo``, for the native kernels (their build
cache key, their ISA choice: :mod:`metagen.engine.native.cpu`), their benchmarks and a run's
provenance. Pure standard library, so reading it loads neither the engine nor torch.

One rule everywhere: a field is the FIRST processor's (``/proc/cpuinfo`` repeats the fields per
logical CPU, the same on all but a hybrid CPU, where the first stands for all); the model name
is its ``model name``, else :func:`platform.processor`, else the machine type; the flags are its
``flags`` (x86) or ``Features`` (Arm). Where the file cannot be read (not Linux) every field is
missing.
"""

from __future__ import annotations

import platform
from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")
IDENTITY_FIELDS = ("model name", "flags", "Features", "CPU part")


def cpuinfo_fields(path: str | Path = CPUINFO) -> dict[str, str]:
    """Field name -> value (stripped) of the first processor in ``path`` (each field's first
    occurrence); empty when the file cannot be read."""
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return {}
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() not in fields:
            fields[key.strip()] = value.strip()
    return fields


def cpu_identity(path: str | Path = CPUINFO) -> str:
    """The CPU's model and feature lines (:data:`IDENTITY_FIELDS`, as ``name: value``), else the
    machine type and :func:`platform.processor` (what the native build cache is keyed by)."""
    fields = cpuinfo_fields(path)
    if not fields:
        return f"{platform.machine()} {platform.processor()}"
    found = [f"{k}: {fields[k]}" for k in IDENTITY_FIELDS if k in fields]
    return "\n".join(found) or platform.machine()


def cpu_model(path: str | Path = CPUINFO) -> str:
    """The CPU's model name (``model name``), else :func:`platform.processor` or the machine
    type."""
    return (cpuinfo_fields(path).get("model name") or platform.processor()
            or platform.machine())


def cpu_class(path: str | Path = CPUINFO) -> str:
    """The CPU's machine class: vendor, family and model numbers (``AuthenticAMD family 25 model
    1``, a Zen 3; ``model 17``, a Zen 4), which tell apart CPUs that share a model name (a VM
    shows every EPYC as ``AMD EPYC``); where those fields are missing (Arm, no file), the model
    name (:func:`cpu_model`)."""
    fields = cpuinfo_fields(path)
    keys = ("vendor_id", "cpu family", "model")
    if all(fields.get(k) for k in keys):
        return f"{fields['vendor_id']} family {fields['cpu family']} model {fields['model']}"
    return cpu_model(path)


def cpu_flags(path: str | Path = CPUINFO) -> set[str]:
    """The CPU's feature flags (``flags``, or ``Features`` on Arm), else the empty set."""
    fields = cpuinfo_fields(path)
    return set((fields.get("flags") or fields.get("Features") or "").split())
