"""How the engine benchmark names a workload's reference peer: metagen's float32 engine against
the fastest float32 peer, metagen-int8 against the fastest 8-bit peer (int8 or Q8_0), never a
4-bit one, metagen-int4 and metagen-int4-all against the fastest 4-bit peer, on A's decode rate
and on B's and C's tokens/s."""

from __future__ import annotations

from benchmarks.peers import PEERS, weight_bits
from benchmarks.workloads import compare_peers

BITS = {cls.name: weight_bits(cls.quantization) for cls in PEERS}


def _row(wl: str, peer: str, tok_s: float, decode: float | None = None) -> dict:
    row = {"workload": wl, "peer": peer, "tokens_per_s": tok_s}
    if decode is not None:
        row["decode_tok_s"] = {"median": decode}
    return row


def test_each_engine_is_compared_within_its_weight_width() -> None:
    rows = [_row("B", "metagen", 100.0), _row("B", "metagen-int8", 150.0),
            _row("B", "openvino-genai", 80.0), _row("B", "llama.cpp", 90.0),
            _row("B", "openvino-genai-int8", 120.0), _row("B", "llama.cpp-q8_0", 100.0),
            _row("B", "llama.cpp-q4_0", 300.0), _row("B", "transformers", 50.0)]
    compare_peers(rows, BITS)
    me, q8 = rows[0], rows[1]
    assert (me["best_peer"], me["vs_best_peer"]) == ("llama.cpp", 100.0 / 90.0)
    assert me["target"] == ">= 1.2x best peer" and me["vs_transformers"] == 2.0
    assert (q8["best_peer"], q8["vs_best_peer"]) == ("openvino-genai-int8", 150.0 / 120.0)
    assert q8["vs_metagen_fp32"] == 1.5 and "target" not in q8  # B's goal is float32's


def test_a_compares_decode_rates_and_int8_gets_its_goal() -> None:
    rows = [_row("A", "metagen", 1.0, decode=40.0), _row("A", "metagen-int8", 1.0, decode=66.0),
            _row("A", "llama.cpp-q8_0", 9.0, decode=60.0), _row("A", "llama.cpp", 9.0, decode=50.0)]
    compare_peers(rows, BITS)
    assert rows[0]["vs_best_peer"] == 40.0 / 50.0 and "target" not in rows[0]
    assert rows[1]["best_peer"] == "llama.cpp-q8_0" and rows[1]["vs_best_peer"] == 66.0 / 60.0
    assert rows[1]["target"] == ">= 1.1x best 8-bit peer"
    assert rows[1]["vs_metagen_fp32"] == 66.0 / 40.0
    assert all("vs_transformers" not in r for r in rows)


def test_both_int4_engines_are_compared_with_the_fastest_4_bit_peer() -> None:
    rows = [_row("A", "metagen-int4", 1.0, decode=220.0),
            _row("A", "metagen-int4-all", 1.0, decode=250.0),
            _row("A", "onnxruntime-genai-int4", 1.0, decode=200.0),
            _row("A", "llama.cpp-q4_0", 1.0, decode=180.0),
            _row("A", "onnxruntime-genai-int8", 1.0, decode=400.0)]
    compare_peers(rows, BITS)
    for row, mine in ((rows[0], 220.0), (rows[1], 250.0)):
        assert (row["best_peer"], row["vs_best_peer"]) == ("onnxruntime-genai-int4", mine / 200.0)
        assert row["target"] == ">= 1.1x best 4-bit peer"


def test_no_reference_of_the_same_width_leaves_the_row_alone() -> None:
    rows = [_row("C", "metagen-int8", 10.0), _row("C", "llama.cpp-q4_0", 30.0)]
    compare_peers(rows, BITS)
    assert "vs_best_peer" not in rows[0] and "best_peer" not in rows[0]
