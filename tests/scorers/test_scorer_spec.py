"""The scorer spec grammar (``metagen.scorers.scorer_spec``): golden parses, the canonical form a
run key holds, and errors that name the flag (and the query key)."""

from __future__ import annotations

from pathlib import Path

import pytest

from metagen.errors import InvalidParameterError
from metagen.scorers.scorer_spec import (
    ScorerSpec, canonical_spec, parse_scorer_spec, spec_folder)

GOLDEN = [
    ("reward", "/models/orm", ScorerSpec("folder", "/models/orm")),
    ("reward", "rel/orm", ScorerSpec("folder", "rel/orm")),
    ("reward", "/odd/a+b", ScorerSpec("folder", "/odd/a+b")),
    ("prm", "/models/prm", ScorerSpec("folder", "/models/prm")),
    ("prm", "math-shepherd+/m/ms", ScorerSpec("folder", "/m/ms", format="math-shepherd")),
    ("reward", "likelihood", ScorerSpec("likelihood")),
    ("prm", "likelihood+/m/orm", ScorerSpec("likelihood", "/m/orm")),
    ("reward", "judge+/m/judge", ScorerSpec("judge", "/m/judge")),
    ("reward", "unit-tests", ScorerSpec("unit-tests")),
    ("reward", "pooling+http://127.0.0.1:8001/v1?model=orm&positive_label=0",
     ScorerSpec("remote", "http://127.0.0.1:8001/v1", api="pooling",
                options=(("model", "orm"), ("positive_label", 0)))),
    ("reward", "classify+https://rm.example/root?model=rm&labels=bad,good&positive_label=good"
     "&batch_size=8&timeout=2.5&num_params=1000",
     ScorerSpec("remote", "https://rm.example/root", api="classify",
                options=(("model", "rm"), ("labels", ("bad", "good")),
                         ("positive_label", "good"), ("batch_size", 8), ("timeout", 2.5),
                         ("num_params", 1000)))),
    ("reward", "json+http://h:9?model=orm", ScorerSpec("remote", "http://h:9", api="json",
                                                       options=(("model", "orm"),))),
    ("prm", "pooling+http://h:9?model=prm&tokenizer=/m/prm&format=qwen2.5-math-prm"
     "&aggregation=min&positive_label=1",
     ScorerSpec("remote", "http://h:9", api="pooling",
                options=(("model", "prm"), ("tokenizer", "/m/prm"),
                         ("format", "qwen2.5-math-prm"), ("aggregation", "min"),
                         ("positive_label", 1)))),
]


@pytest.mark.parametrize(("role", "text", "want"), GOLDEN)
def test_golden_parses(role, text, want):
    assert parse_scorer_spec(text, role, role) == want


@pytest.mark.parametrize(("role", "text", "want"), GOLDEN)
def test_the_canonical_form_parses_to_the_same_scorer(role, text, want):
    """Folders absolute, keys sorted: parsing the canonical form gives the same spec, its
    folders made absolute (what a run key holds)."""
    canonical = canonical_spec(want)
    again = parse_scorer_spec(canonical, role, role)
    assert canonical_spec(again) == canonical
    assert again.kind == want.kind and again.api == want.api and again.format == want.format
    assert dict(again.options) == {k: str(Path(v).resolve()) if k == "tokenizer" else v
                                   for k, v in want.options}
    if want.target is not None and want.kind != "remote":
        assert again.target == str(Path(want.target).resolve())


def test_canonical_golden_strings(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert canonical_spec(parse_scorer_spec("orm", "reward", "reward")) == str(tmp_path / "orm")
    assert canonical_spec(parse_scorer_spec("likelihood", "prm", "prm"),
                          default="pol") == f"likelihood+{tmp_path / 'pol'}"
    assert canonical_spec(parse_scorer_spec("likelihood", "prm", "prm")) == "likelihood"
    assert canonical_spec(parse_scorer_spec(
        "pooling+http://h:1?positive_label=1&tokenizer=tok&model=m&labels=a,b", "reward",
        "reward")) == (f"pooling+http://h:1?labels=a,b&model=m&positive_label=1"
                       f"&tokenizer={tmp_path / 'tok'}")
    assert canonical_spec(parse_scorer_spec("unit-tests", "reward", "reward")) == "unit-tests"


def test_the_folder_a_run_key_fingerprints():
    def folder(text, role="reward", default=None):
        return spec_folder(parse_scorer_spec(text, role, role), default)
    assert folder("/m/orm") == "/m/orm"
    assert folder("likelihood+/m/orm") == "/m/orm"
    assert folder("likelihood", default="/m/policy") == "/m/policy"
    assert folder("math-shepherd+/m/ms", "prm") == "/m/ms"
    assert folder("pooling+http://127.0.0.1:1?model=orm") is None  # never a folder
    assert folder("unit-tests") is None


@pytest.mark.parametrize(("role", "flag", "text", "says"), [
    ("reward", "reward", "", "FOLDER"),
    ("reward", "reward", "http://127.0.0.1:8001?model=orm", "api in front"),
    ("reward", "reward", "grpc+http://h?model=m", "api in front"),
    ("reward", "reward", "pooling+127.0.0.1:8001?model=m", "http(s)://"),
    ("reward", "reward", "pooling+http://h:1", "'model' is required"),
    ("reward", "orm", "pooling+http://h:1?model=m&colour=red", "unknown key 'colour'"),
    ("reward", "reward", "pooling+http://h:1?model=m&format=math-shepherd",
     "unknown key 'format'"),
    ("reward", "reward", "pooling+http://h:1?model=m&model=n", "key 'model' is given twice"),
    ("reward", "reward", "pooling+http://h:1?model=m&batch_size=0", "key 'batch_size'"),
    ("reward", "reward", "pooling+http://h:1?model=m&timeout=soon", "key 'timeout'"),
    ("reward", "reward", "pooling+http://h:1?model=m&labels=a,a", "key 'labels'"),
    ("reward", "reward", "pooling+http://h:1?model=", "key 'model'"),
    ("prm", "prm", "pooling+http://h:1?model=m&format=nope", "key 'format'"),
    ("prm", "prm", "pooling+http://h:1?model=m&aggregation=max", "key 'aggregation'"),
    ("prm", "prm", "classify+http://h:1?model=m", "one value per sequence"),
    ("prm", "prm", "unit-tests", "outcome reward only"),
    ("prm", "prm", "judge+/m/j", "outcome reward only"),
    ("reward", "reward", "math-shepherd+/m/ms", "--prm"),
    ("prm", "prm", "likelihood+http://h?model=m", "outcome reward only"),
    ("reward", "reward", "likelihood+http://h", "'model' is required"),
    ("reward", "reward", "likelihood+", "local model folder"),
])
def test_errors_name_the_flag(role, flag, text, says):
    with pytest.raises(InvalidParameterError) as err:
        parse_scorer_spec(text, role, flag)
    assert err.value.param == flag
    assert says in str(err.value)
