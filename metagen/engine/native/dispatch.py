"""Which row counts the small-row kernel takes, read from tables measured per vector ISA.

Whether ``small_matmul.c`` beats MKL for M rows depends on the ISA it was built for, the thread
count and the machine, so the rule is measured, not assumed: ``python -m benchmarks.small_matmul
--table metagen/engine/native/dispatch_tables.json`` times both on the benchmark target's
products and records, per thread count, the row counts the kernel wins (:func:`rule_from`).
The shipped ``dispatch_tables.json`` holds one table per (ISA, machine class), each naming its
CPU model, its class (vendor, family and model numbers: :func:`~metagen.cpuinfo.cpu_class`, which
tells a Zen 3 from a Zen 4 where a VM names both ``AMD EPYC``), build flags and date. Tables
shipped (see the file for each one's speedups):

- AVX-512 (``-march=native``) and AVX2 (``-mavx2 -mfma -mno-avx512f``, against MKL limited to
  AVX2 with ``MKL_ENABLE_INSTRUCTIONS=AVX2``): a 2-core AMD EPYC (Zen 4) KVM VM shared with
  other jobs, one and two threads.
- AVX2 (``-march=native``; the CPU has no AVX-512): a 2-core AMD EPYC (Zen 3, no VNNI) KVM VM,
  one and two threads.

:func:`rows_for` picks the tables of the running ISA measured on this machine class; where none
is, those of this CPU model name; where none is either, all of that ISA's; among the picked, the
most conservative rule (the narrowest range). Where the ISA has no table, :data:`FALLBACK` (the
constants measured before the tables: 2-16 rows with AVX-512 and 2-8 with AVX2 on one thread,
from 1 row on several). A thread count without an entry uses the largest measured count below
it.
"""

from __future__ import annotations

import functools
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from metagen.engine.native.cpu import cpu_class, cpu_model
from metagen.errors import InvalidParameterError

TABLES = Path(__file__).with_name("dispatch_tables.json")
_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RowRule:
    """The kernel takes ``lowest <= M <= highest`` rows; ``highest = 0``: it takes none."""

    lowest: int
    highest: int

    def __contains__(self, rows: object) -> bool:
        return isinstance(rows, int) and self.lowest <= rows <= self.highest


# Per ISA, one thread and several: the rule before measured tables (one Xeon, AVX-512).
FALLBACK: dict[int, dict[int, RowRule]] = {512: {1: RowRule(2, 16), 2: RowRule(1, 16)},
                                           256: {1: RowRule(2, 8), 2: RowRule(1, 8)}}


# The most rows a table may give the kernel: the range it and the native decode step are tested
# over (beams, best-of-16, step-search widths); larger counts are measured for information.
ROW_CAP = 16

# MKL's time over the kernel's below which a row count counts as the kernel's loss. Not 1.0:
# the benchmark times each product alone, and in the engine MKL costs more than that on several
# threads: its OpenMP workers spin into the next native call, and where the machine has fewer
# free cores than threads nothing brings MKL back to one thread (the native pool's guard does).
# On a 2-core Zen 3 beside one busy process, best-of-16's decode step (16 rows) took a median
# 47.9 ms at two threads with MKL's head (measured 0.967x the kernel alone) and 33.6 ms with the
# kernel's; a 5 % margin is also about the spread of that benchmark's medians on a shared VM.
LOSS = 0.95


def rule_from(speedup: dict[int, float]) -> RowRule:
    """The rule a measurement supports. ``speedup`` maps row counts (1 and 2 among them) to MKL's
    time over the kernel's; a count below :data:`LOSS` is a loss. The kernel takes one row
    unless it loses there, and from 2 rows up to the last count before its first loss, at most
    :data:`ROW_CAP` (measured counts only: a count between two measured wins is taken, none past
    the last).
    Raises :class:`~metagen.errors.InvalidParameterError` naming ``speedup`` without rows 1
    and 2."""
    if not {1, 2} <= speedup.keys():
        raise InvalidParameterError("speedup", sorted(speedup), "must include rows 1 and 2")
    highest = 0
    for rows in sorted(r for r in speedup if 2 <= r <= ROW_CAP):
        if speedup[rows] < LOSS:
            break
        highest = rows
    lowest = 1 if speedup[1] >= LOSS else 2
    return RowRule(lowest if highest else 0, highest)


def _rules(table: dict[str, Any]) -> dict[int, RowRule]:
    return {int(t): RowRule(int(r["lowest"]), int(r["highest"]))
            for t, r in table["by_threads"].items()}


def _at(rules: dict[int, RowRule], threads: int) -> RowRule:
    below = [t for t in rules if t <= threads]
    return rules[max(below)] if below else rules[min(rules)]


@functools.cache
def load_tables(path: Path = TABLES) -> tuple[dict[str, Any], ...]:
    """The tables in ``path`` (each: ``isa``, ``cpu``, ``by_threads``), or none where the file is
    missing or malformed (logged once; dispatch then uses :data:`FALLBACK`)."""
    try:
        tables = tuple(json.loads(path.read_text())["tables"])
        for t in tables:
            int(t["isa"]), str(t["cpu"]), _rules(t)
        return tables
    except (OSError, ValueError, KeyError, TypeError) as e:
        _log.warning("small-row kernel tables unreadable (%s: %s); using the fallback rule",
                     path, e)
        return ()


def rows_for(isa: int, threads: int, tables: tuple[dict[str, Any], ...] | None = None,
             cpu: str | None = None, machine_class: str | None = None) -> RowRule:
    """The rows the kernel built for ``isa`` (512 or 256) takes on ``threads`` threads, on the
    CPU whose model name is ``cpu`` and class ``machine_class`` (defaults: this machine's), by
    the tables (default: the shipped ones): those of the class, else of the model name, else
    all of the ISA, the narrowest rule among them. Raises
    :class:`~metagen.errors.InvalidParameterError` naming ``threads`` below 1."""
    if threads < 1:
        raise InvalidParameterError("threads", threads, "must be >= 1")
    tables = load_tables() if tables is None else tables
    cpu = cpu_model() if cpu is None else cpu
    machine_class = cpu_class() if machine_class is None else machine_class
    mine = [t for t in tables if int(t["isa"]) == isa]
    picked = ([t for t in mine if t.get("class") == machine_class]
              or [t for t in mine if t["cpu"] == cpu] or mine)
    if picked:
        rules = [_at(_rules(t), threads) for t in picked]
        return RowRule(max(r.lowest for r in rules), min(r.highest for r in rules))
    fallback = FALLBACK.get(isa, {1: RowRule(0, 0)})
    return _at(fallback, threads)


@functools.cache
def rule(isa: int, threads: int) -> RowRule:
    """:func:`rows_for` this machine by the shipped tables, cached (dispatch asks per product)."""
    return rows_for(isa, threads)
