"""``python -m benchmarks.small_matmul --table``: a measurement becomes the dispatch table the
library reads (rule per thread count), replacing only the table of the same ISA and machine class."""

from __future__ import annotations

import json

from benchmarks import small_matmul as bench
from metagen.engine.native.dispatch import RowRule, load_tables, rows_for


def _result(isa: int, cpu: str, speedups: dict[str, dict[int, float]]) -> dict:
    return {"kernel_isa": isa, "cpu": cpu, "class": f"{cpu} class", "machine": f"{cpu}, 2 cores", "build_flags": ["-O3"],
            "mkl_instructions": "default", "date": "2026-11-25", "repeats": 7,
            "argv": ["--threads", "1,2"],
            "by_threads": {t: [{"rows": r, "speedup": s} for r, s in sp.items()]
                           for t, sp in speedups.items()}}


def test_a_measurement_is_recorded_as_the_rule_dispatch_reads(tmp_path):
    path = tmp_path / "tables.json"
    first = bench.table_entry(_result(256, "Zen", {"1": {1: 0.9, 2: 1.8, 8: 1.4, 16: 0.8},
                                                   "2": {1: 1.2, 2: 1.9, 8: 1.5, 16: 1.1}}))
    bench.merge_table(path, first)
    bench.merge_table(path, bench.table_entry(_result(512, "Zen", {"1": {1: 1.1, 2: 2.0}})))
    tables = load_tables(path)
    assert rows_for(256, 1, tables, "Zen", "Zen class") == RowRule(2, 8)
    assert rows_for(256, 2, tables, "Zen", "Zen class") == RowRule(1, 16)
    assert rows_for(512, 1, tables, "Zen", "Zen class") == RowRule(1, 2)
    again = bench.table_entry(_result(256, "Zen", {"1": {1: 0.9, 2: 1.8, 8: 1.4, 16: 1.2}}))
    bench.merge_table(path, again)  # the same ISA and class: replaced, the other table kept
    tables = json.loads(path.read_text())["tables"]
    assert [(t["isa"], t["cpu"]) for t in tables] == [(512, "Zen"), (256, "Zen")]
    assert rows_for(256, 1, load_tables.__wrapped__(path), "Zen", "Zen class") == RowRule(2, 16)
    other = bench.table_entry(_result(256, "Zen", {"1": {1: 1.2, 2: 1.1}}) | {"class": "Zen 2"})
    bench.merge_table(path, other)  # another class of the same model name: a table of its own
    assert len(json.loads(path.read_text())["tables"]) == 3
    assert tables[1]["command"] == "python -m benchmarks.small_matmul --threads 1,2"
