"""The token-healing benchmark's cut rule, and a 3-problem run: with two tokens of healing every
cut prompt continues to the policy's own greedy answer."""

from __future__ import annotations

from benchmarks.token_healing import cuts, run


def test_cuts_by_kind():
    assert cuts("10 - 7", {0, 1, 2, 4, 6}) == {"after_space": [3, 5], "mid_token": [3, 5]}
    assert cuts("Tony has", {0, 4, 8}) == {"after_space": [5], "mid_token": [1, 2, 3, 5, 6, 7]}


def test_small_run_reproduces_with_healing():
    out = run(3, max_tokens=16)
    for kind in ("after_space", "mid_token"):
        row = out[kind]
        assert row["cuts"] > 0
        assert row["healed2_reproduced"] == 1.0
        assert row["healed_reproduced"] >= row["plain_reproduced"]
