"""The small-row kernel's dispatch: the rule a measurement supports, the choice among shipped
tables (this CPU's, else the most conservative of the ISA's, else the documented fallback), and
the shipped tables themselves."""

from __future__ import annotations

import json

import pytest

from metagen.engine.native import dispatch
from metagen.engine.native.dispatch import FALLBACK, RowRule, rows_for, rule_from
from metagen.errors import InvalidParameterError


def test_rule_takes_the_rows_up_to_the_first_loss():
    measured = {1: 0.9, 2: 1.9, 4: 2.0, 8: 1.5, 12: 1.1, 16: 0.9, 24: 1.2}
    assert rule_from(measured) == RowRule(2, 12)
    assert rule_from(measured | {1: 0.96, 16: 0.96}) == RowRule(1, 16)  # within the margin
    assert rule_from({1: 1.3, 2: 2.0, 16: 1.1}) == RowRule(1, 16)  # one row too, where it wins
    assert rule_from({1: 0.9, 2: 2.0, 16: 1.1, 24: 1.2}) == RowRule(2, dispatch.ROW_CAP)
    assert rule_from({1: 1.3, 2: 0.9, 3: 1.5}) == RowRule(0, 0)  # loses at 2: takes nothing
    with pytest.raises(InvalidParameterError, match="speedup"):
        rule_from({2: 1.5, 4: 1.5})


def _table(isa: int, cpu: str, **by_threads: tuple[int, int]) -> dict:
    return {"isa": isa, "cpu": cpu, "by_threads": {
        t.lstrip("t"): {"lowest": lo, "highest": hi, "speedup": {}}
        for t, (lo, hi) in by_threads.items()}}


TABLES = (_table(256, "Zen", t1=(2, 16), t2=(1, 16)), _table(256, "Skylake", t1=(2, 12)),
          _table(512, "Zen", t1=(1, 16), t8=(1, 24)))


def test_this_cpus_table_wins_and_threads_take_the_largest_measured_count_below():
    assert rows_for(256, 1, TABLES, "Zen") == RowRule(2, 16)
    assert rows_for(256, 2, TABLES, "Zen") == rows_for(256, 16, TABLES, "Zen") == RowRule(1, 16)
    assert rows_for(256, 4, TABLES, "Skylake") == RowRule(2, 12)
    assert rows_for(512, 7, TABLES, "Zen") == RowRule(1, 16)
    assert rows_for(512, 8, TABLES, "Zen") == RowRule(1, 24)


def test_another_cpu_gets_the_most_conservative_table_of_its_isa():
    assert rows_for(256, 2, TABLES, "Graviton") == RowRule(2, 12)  # max lowest, min highest
    assert rows_for(512, 2, TABLES, "Graviton") == RowRule(1, 16)


def test_a_machine_class_tells_apart_cpus_that_share_a_model_name():
    """Two VMs name a Zen 3 and a Zen 4 both ``AMD EPYC``: each gets its own class's table, and
    a third class of that name the narrower of the two (its model name matches both)."""
    zen3, zen4 = "AuthenticAMD family 25 model 1", "AuthenticAMD family 25 model 17"
    tables = (_table(256, "AMD EPYC", t1=(1, 16), t2=(1, 12)) | {"class": zen4},
              _table(256, "AMD EPYC", t1=(2, 8), t2=(1, 16)) | {"class": zen3},
              _table(256, "Skylake", t1=(2, 4)))
    assert rows_for(256, 1, tables, "AMD EPYC", zen4) == RowRule(1, 16)
    assert rows_for(256, 1, tables, "AMD EPYC", zen3) == RowRule(2, 8)
    assert rows_for(256, 2, tables, "AMD EPYC", zen3) == RowRule(1, 16)
    zen2 = "AuthenticAMD family 23 model 49"
    assert rows_for(256, 2, tables, "AMD EPYC", zen2) == RowRule(1, 12)  # both EPYC tables
    assert rows_for(256, 1, tables, "Graviton", "Graviton") == RowRule(2, 4)  # all three


def test_an_isa_without_a_table_gets_the_documented_fallback():
    assert rows_for(256, 1, (), "Zen") == FALLBACK[256][1] == RowRule(2, 8)
    assert rows_for(512, 4, (), "Zen") == FALLBACK[512][2] == RowRule(1, 16)
    with pytest.raises(InvalidParameterError, match="threads"):
        rows_for(256, 0, TABLES, "Zen")


def test_an_unreadable_tables_file_means_the_fallback_not_an_error(tmp_path):
    bad = tmp_path / "t.json"
    bad.write_text('{"tables": [{"isa": 256}]}')  # no cpu, no rules
    assert dispatch.load_tables(bad) == ()
    assert dispatch.load_tables(tmp_path / "missing.json") == ()


def test_the_shipped_tables_cover_both_isas_and_agree_with_their_own_measurements():
    tables = json.loads(dispatch.TABLES.read_text())["tables"]
    assert dispatch.load_tables() == tuple(tables)
    assert {t["isa"] for t in tables} >= {256, 512}
    assert len({(t["isa"], t["class"]) for t in tables}) == len(tables)  # one per ISA and class
    for t in tables:
        assert t["cpu"] and t["class"] and t["build_flags"] and t["date"]
        assert "1" in t["by_threads"]
        for entry in t["by_threads"].values():
            speedup = {int(r): s for r, s in entry["speedup"].items()}
            assert rule_from(speedup) == RowRule(entry["lowest"], entry["highest"])
