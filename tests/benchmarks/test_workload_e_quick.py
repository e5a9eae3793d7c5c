"""Workload E restated (step search vs best-of-n sampling, same prompts, width and generated
tokens) on the quick settings: the JSON rows carry the per-token ratio and the prefill counts,
and the prefill the search recomputes stays within 1.1x the unique tokens of its contexts (a
deterministic count, unlike the times, which are never asserted)."""

from __future__ import annotations

from benchmarks import engine_bench


def test_workload_e_rows_and_prefill_invariant(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("METAGEN_BENCH_PEERS", "metagen")
    data = engine_bench.run(quick=True, cache_dir=tmp_path / "models", workload_names="E", threads=[1],
                            log=lambda _m: None)
    search, bon = [r for r in data["rows"] if r["workload"] == "E"]
    assert search["variant"].startswith("step search") and bon["variant"].startswith("best-of-")
    s = data["meta"]["settings"]
    width = 2 * s["e_beams"]
    expected = s["e_prompts"] * width * s["e_steps"] * s["e_step_tokens"]
    assert search["tokens"] == bon["tokens"] == expected
    assert search["ratio_name"] == "x best-of-n per token" and search["target"] == "<= 1.2x"
    assert len(search["ratio_runs"]) == len(search["times"]) == len(bon["times"])
    for r, ts, tb in zip(search["ratio_runs"], search["times"], bon["times"]):
        assert abs(r - ts / tb) <= 1e-9 * r  # equal token counts: the time ratio is per token
    # prefill work: the search's contexts are 1 + e_steps levels of a tree; without the prefix
    # cache it would recompute every context in full at every step
    assert 0 < search["prefilled"] <= 1.1 * search["unique_tokens"]
    assert search["prefill_over_unique"] == search["prefilled"] / search["unique_tokens"]
    # best-of-n prefills each prompt once (n samples fork from it)
    assert bon["prefilled"] == s["e_prompts"] * s["e_prompt_len"]
