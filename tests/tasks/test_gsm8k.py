"""The GSM8K loader on a small temporary file, and on the shared test file when present."""

import json

import pytest

from metagen.errors import InvalidParameterError
from metagen.tasks.gsm8k import format_gsm8k_prompt, grade_gsm8k, load_gsm8k


def test_load_and_grade(tmp_path):
    path = tmp_path / "mini.jsonl"
    rows = [{"question": "A has 2 and gets 3. How many?", "answer": "2 + 3 = <<2+3=5>>5\n#### 5"},
            {"question": "Cost of 1,000 pens?", "answer": "So $1,000.\n#### 1,000"}]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    probs = load_gsm8k(path)
    assert [p.answer for p in probs] == ["5", "1000"]
    assert probs[0].uid == "mini-0"
    assert format_gsm8k_prompt(probs[0]).endswith("\nAnswer:\n")
    assert grade_gsm8k("2 + 3 = 5\n#### 5", probs[0])
    assert grade_gsm8k("The total is $1,000.", probs[1])
    assert not grade_gsm8k("#### 6", probs[0])
    assert len(load_gsm8k(path, limit=1)) == 1


def test_malformed_record_names_the_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"question": "q"}\n')
    with pytest.raises(InvalidParameterError, match="bad.jsonl:1"):
        load_gsm8k(path)


def test_shared_gsm8k_test_file():
    from pathlib import Path
    path = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "gsm8k_test.jsonl"
    if not path.exists():
        pytest.skip("shared GSM8K file not present")
    probs = load_gsm8k(path, limit=50)
    assert len(probs) == 50 and probs[0].answer == "18"
    assert all(grade_gsm8k(p.solution, p) for p in probs)
