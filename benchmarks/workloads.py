"""Workloads A-E of the engine benchmark, timed with repeats; each returns result rows.

A row is a dict: ``workload``, ``peer``, ``variant``, ``times`` (seconds per run), ``tokens``
(generated per run), and optional ``ratio`` (``ratio_runs`` per run), ``target`` (the goal, text)
and extra counters. Ratios are computed run by run, then summarised as min/median/max.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from benchmarks.peers import MetagenPeer, Peer, PeerError, Unsupported


@dataclass(slots=True, frozen=True)
class Settings:
    """Sizes of the workloads (full run vs --quick). ``warmup`` runs each measurement once
    untimed first (its output is still checked)."""

    repeats: int = 3
    warmup: bool = True
    a_prompt: int = 256
    a_new: int = 128
    b_prompt: int = 512
    b_n: int = 16
    b_new: int = 64
    c_prompt: int = 32
    c_width: int = 4
    c_new: int = 128
    d_prompt: int = 256
    d_new: int = 128
    d_k: int = 2
    e_prompts: int = 8
    e_prompt_len: int = 64
    e_beams: int = 4
    e_steps: int = 6
    e_step_tokens: int = 30


FULL_SETTINGS = Settings()
QUICK_SETTINGS = Settings(repeats=1, a_prompt=32, a_new=8, b_prompt=32, b_n=4, b_new=8,
                          c_prompt=16, c_width=2, c_new=8, d_prompt=32, d_new=12, d_k=3,
                          e_prompts=2, e_prompt_len=16, e_beams=2, e_steps=2, e_step_tokens=6)


def summary(values: list[float]) -> dict[str, float]:
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def timed(fn: Callable[[], Any], repeats: int, warmup: bool = True) -> tuple[list[float], Any]:
    """Optionally run ``fn`` once to warm up, then ``repeats`` timed runs; returns the times and
    the last output."""
    out = fn() if warmup else None
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return times, out


def timed_pair(fn_a: Callable[[], Any], fn_b: Callable[[], Any], repeats: int,
               warmup: bool = True) -> tuple[list[float], Any, list[float], Any]:
    """Like :func:`timed` for two functions whose time ratio is wanted: runs are interleaved
    (a, b, a, b, ...) so that a drift in machine load hits both alike."""
    out_a, out_b = (fn_a(), fn_b()) if warmup else (None, None)
    t_a, t_b = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out_a = fn_a()
        t1 = time.perf_counter()
        out_b = fn_b()
        t_a.append(t1 - t0)
        t_b.append(time.perf_counter() - t1)
    return t_a, out_a, t_b, out_b


def attempt(peer: Peer, not_run: list[dict[str, Any]], workload: str,
            fn: Callable[[], Any]) -> Any | None:
    """``fn()``, or None when the peer does not run this workload (:class:`Unsupported`) or its
    worker failed (:class:`PeerError`); either is recorded in ``not_run`` and the run goes on."""
    try:
        return fn()
    except Unsupported:
        not_run.append({"workload": workload, "peer": peer.name, "why": "unsupported"})
    except PeerError as e:
        not_run.append({"workload": workload, "peer": peer.name, "why": str(e)[:300]})
    return None


GOALS_VS_BEST_PEER = {"B": 1.2, "C": 1.1}


def compare_peers(rows: list[dict[str, Any]]) -> None:
    """Add ``vs_transformers`` (tokens/s over transformers') to every row of B and C, and to
    metagen's row ``vs_best_peer`` (over the fastest other peer, transformers included) with its
    goal. Rows need ``tokens_per_s``."""
    for wl, goal in GOALS_VS_BEST_PEER.items():
        mine = [r for r in rows if r["workload"] == wl]
        ref = next((r for r in mine if r["peer"] == "transformers"), None)
        for r in mine:
            if ref is not None:
                r["vs_transformers"] = r["tokens_per_s"] / ref["tokens_per_s"]
        me = next((r for r in mine if r["peer"] == "metagen"), None)
        others = [r for r in mine if r["peer"] != "metagen"]
        if me is not None and others:
            best = max(others, key=lambda r: r["tokens_per_s"])
            me["vs_best_peer"] = me["tokens_per_s"] / best["tokens_per_s"]
            me["best_peer"] = best["peer"]
            me["target"] = f">= {goal}x best peer"


def random_prompt(n: int, vocab: int, seed: int) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(3, vocab, (n,), generator=g).tolist()


def repetitive_prompt(n: int, vocab: int, seed: int, period: int = 48) -> list[int]:
    """A prompt that repeats a random segment: what prompt lookup is made for."""
    seg = random_prompt(period, vocab, seed)
    return (seg * (n // period + 1))[:n]


def _row(workload: str, peer: Peer, variant: str, times: list[float], tokens: int,
         **extra: Any) -> dict[str, Any]:
    return {"workload": workload, "peer": peer.name, "variant": variant, "times": times,
            "tokens": tokens, **extra}


def workload_a(peers: list[Peer], s: Settings, vocab: int, roof_tok_s: float,
               not_run: list[dict[str, Any]]) -> tuple[list[dict], dict]:
    """Batch-1 greedy; decode rate = (new - 1) / (t(new) - t(1)) against the roofline."""
    prompt = random_prompt(s.a_prompt, vocab, 1)
    rows, outputs = [], {}
    for peer in peers:
        got = attempt(peer, not_run, "A", lambda: timed_pair(
            lambda: peer.greedy("target", prompt, s.a_new),
            lambda: peer.greedy("target", prompt, 1), s.repeats, s.warmup))
        if got is None:
            continue
        t_all, toks, t_one, _ = got
        decode = [(s.a_new - 1) / max(a - b, 1e-9) for a, b in zip(t_all, t_one)]
        frac = [d / roof_tok_s for d in decode]
        outputs[peer.name] = toks
        rows.append(_row("A", peer, "greedy b=1", t_all, s.a_new, decode_tok_s=summary(decode),
                         ratio_runs=frac, ratio=summary(frac), ratio_name="of roofline",
                         target=">= 0.85 of roofline" if peer.name == "metagen" else None,
                         **dict(peer.last)))
    return rows, outputs


def workload_b(peers: list[Peer], s: Settings, vocab: int,
               not_run: list[dict[str, Any]]) -> list[dict]:
    prompt = random_prompt(s.b_prompt, vocab, 2)
    rows = []
    for peer in peers:
        got = attempt(peer, not_run, "B", lambda: timed(
            lambda: peer.best_of_n("target", prompt, s.b_n, s.b_new, 7), s.repeats, s.warmup))
        if got is None:
            continue
        times, outs = got
        if [len(o) for o in outs] != [s.b_new] * s.b_n:  # every peer must do the same work
            not_run.append({"workload": "B", "peer": peer.name,
                            "why": f"returned lengths {[len(o) for o in outs]}"})
            continue
        rows.append(_row("B", peer, f"best-of-{s.b_n}", times, s.b_n * s.b_new,
                         **dict(peer.last)))
    return rows


def workload_c(peers: list[Peer], s: Settings, vocab: int,
               not_run: list[dict[str, Any]]) -> tuple[list[dict], dict]:
    prompt = random_prompt(s.c_prompt, vocab, 3)
    rows, outputs = [], {}
    for peer in peers:
        got = attempt(peer, not_run, "C", lambda: timed(
            lambda: peer.beam("target", prompt, s.c_width, s.c_new), s.repeats, s.warmup))
        if got is None:
            continue
        times, toks = got
        outputs[peer.name] = toks
        rows.append(_row("C", peer, f"beam {s.c_width}", times, s.c_new, **dict(peer.last)))
    return rows, outputs


def workload_d(peers: list[Peer], s: Settings, vocab: int,
               not_run: list[dict[str, Any]]) -> tuple[list[dict], dict]:
    """Speculative greedy vs the same engine's own greedy: good draft and prompt lookup."""
    rows, outputs = [], {}
    cases = [("draft", "good_target", random_prompt(s.d_prompt, vocab, 4), 1.7),
             ("ngram", "target", repetitive_prompt(s.d_prompt, vocab, 5), 1.9)]
    for mode, model, prompt, goal in cases:
        for peer in peers:
            got = attempt(peer, not_run, f"D {mode}", lambda: timed_pair(
                lambda: peer.greedy(model, prompt, s.d_new),
                lambda: peer.speculative(model, prompt, s.d_new, s.d_k, mode),
                s.repeats, s.warmup))
            if got is None:
                continue
            t_base, base, t_spec, spec = got
            speed = [b / t for b, t in zip(t_base, t_spec)]
            outputs[f"{peer.name}/{mode}/greedy"] = base
            outputs[f"{peer.name}/{mode}/spec"] = spec
            rows.append(_row("D", peer, f"spec {mode} ({model})", t_spec, s.d_new,
                             ratio_runs=speed, ratio=summary(speed), ratio_name="x own greedy",
                             target=f">= {goal}x" if peer.name == "metagen" else None,
                             greedy_times=t_base,
                             **dict(peer.last)))
    return rows, outputs


def workload_e(peer: MetagenPeer, s: Settings, vocab: int) -> list[dict]:
    """Step search: prompts x beams x steps; each step is one generate call (n=2 per beam),
    the best ``beams`` per prompt by log-prob continue. Prefix cache on vs off."""
    from metagen.types import SamplingParams

    shared = random_prompt(s.e_prompt_len // 2, vocab, 6)
    prompts = [shared + random_prompt(s.e_prompt_len - len(shared), vocab, 100 + i)
               for i in range(s.e_prompts)]

    def run(cache: bool) -> dict[str, Any]:
        per_seq = s.e_prompt_len + s.e_steps * s.e_step_tokens + 16
        eng = peer.engine("target", prefix_cache=cache,
                          num_blocks=peer.blocks_for(2 * s.e_prompts * s.e_beams * per_seq))
        beams = [[(0.0, list(p))] for p in prompts]
        seen: set[tuple[int, ...]] = set()
        prompt_tokens = cached = generated = 0
        for step in range(s.e_steps):
            flat = [(i, lp, toks) for i, bs in enumerate(beams) for lp, toks in bs]
            for _, _, toks in flat:
                seen.update(tuple(toks[:j + 1]) for j in range(len(toks)))
            before = eng.stats.snapshot()
            outs = eng.generate([t for _, _, t in flat], SamplingParams(
                n=2, temperature=1.0, max_tokens=s.e_step_tokens, ignore_eos=True, seed=step))
            after = eng.stats
            prompt_tokens += after.prompt_tokens - before.prompt_tokens
            cached += after.cached_prompt_tokens - before.cached_prompt_tokens
            cand: list[list[tuple[float, list[int]]]] = [[] for _ in prompts]
            for (i, lp, toks), out in zip(flat, outs):
                for c in out.outputs:
                    generated += len(c.token_ids)
                    cand[i].append((lp + sum(c.logprobs or ()), toks + list(c.token_ids)))
            beams = [sorted(c, key=lambda x: -x[0])[:s.e_beams] for c in cand]
        return {"prefilled": prompt_tokens - cached, "unique": len(seen),
                "prompt_tokens": prompt_tokens, "generated": generated}

    rows = []
    t_on, on, t_off, off = timed_pair(lambda: run(True), lambda: run(False), s.repeats,
                                      s.warmup)
    speed = [b / a for a, b in zip(t_on, t_off)]
    gen_tokens = on["generated"]
    rows.append(_row("E", peer, "step search, cache on", t_on, gen_tokens,
                     ratio_runs=speed, ratio=summary(speed), ratio_name="x cache off",
                     target=">= 3x", prefilled=on["prefilled"], unique_tokens=on["unique"],
                     prefill_over_unique=on["prefilled"] / on["unique"],
                     prefill_target="<= 1.1x unique"))
    rows.append(_row("E", peer, "step search, cache off", t_off, gen_tokens,
                     prefilled=off["prefilled"], unique_tokens=off["unique"],
                     prefill_over_unique=off["prefilled"] / off["unique"]))
    return rows
