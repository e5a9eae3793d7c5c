"""``python -m benchmarks.serve_soak --quick`` end to end (no timing asserted): every request is
counted once under its kind, no 5xx and nothing unexpected, every bad body got its 4xx, no KV
block is held by a request at the start or the end, checkpoints come every ``every`` requests,
and the table shows the JSON's numbers."""

from __future__ import annotations

import json
import sys

from benchmarks import serve_soak as bench


def test_quick_soak_writes_consistent_json_and_table(tmp_path, monkeypatch, capsys) -> None:
    out = tmp_path / "soak.json"
    monkeypatch.setattr(sys, "argv", ["serve_soak", "--quick", "--json", str(out)])
    bench.main()
    printed = capsys.readouterr().out
    data = json.loads(out.read_text())
    assert data["requests"] == 100 == sum(data["outcomes"].values())
    assert data["five_xx"] == 0 and data["unexpected"] == 0
    kinds = {key.split()[0].split(":")[0] for key in data["outcomes"]}
    assert kinds == set(bench.MIX)  # 100 draws hit every kind of the mix
    wants = {name: status for name, _, status in bench.BAD}
    for key, count in data["outcomes"].items():
        kind, status = key.split()
        if kind.startswith("bad:"):
            assert status == str(wants[kind[4:]])
    assert [c["requests"] for c in data["checkpoints"]] == [50, 100]
    assert data["verdict"]["no_block_leaked"] is True
    assert data["end"]["kv_blocks_in_requests"] == 0
    assert data["end"]["open_fds"] <= data["start"]["open_fds"]
    assert f"100 requests in {data['wall_s']:.0f} s" in printed
    assert f"5xx {data['five_xx']}, unexpected {data['unexpected']}" in printed
