"""Workloads A-E of the engine benchmark, timed in rounds across the peers (:func:`rounds`);
each returns result rows.

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
    d_int8_k: int = 4  # drafts per round with the int8 draft (a cheaper draft step pays for more)
    d_tree: tuple[int, ...] = (1,)  # the int8 draft's tree row: candidates beside each depth
    e_prompts: int = 8
    e_prompt_len: int = 64
    e_beams: int = 4
    e_steps: int = 6
    e_step_tokens: int = 30


FULL_SETTINGS = Settings()
QUICK_SETTINGS = Settings(repeats=1, a_prompt=32, a_new=8, b_prompt=32, b_n=4, b_new=8,
                          c_prompt=16, c_width=2, c_new=8, d_prompt=32, d_new=12, d_k=3, d_int8_k=3,
                          e_prompts=2, e_prompt_len=16, e_beams=2, e_steps=2, e_step_tokens=6)


def summary(values: list[float]) -> dict[str, float]:
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def timed_pair(fn_a: Callable[[], Any], fn_b: Callable[[], Any], repeats: int,
               warmup: bool = True) -> tuple[list[float], Any, list[float], Any]:
    """Two functions whose time ratio is wanted, each run once untimed first if ``warmup``, then
    ``repeats`` times interleaved (a, b, a, b, ...) so that a drift in machine load hits both
    alike; returns a's times, a's last output, b's times, b's last output."""
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


Phases = Callable[[Peer], tuple[Callable[[], Any], ...]]


def rounds(peers: list[Peer], phases: Phases, repeats: int, warmup: bool,
           not_run: list[dict[str, Any]], workload: str) -> dict[str, tuple[list[list[float]],
                                                                          list[Any]]]:
    """Time every peer's ``phases(peer)`` (functions run one after another, each timed on its
    own) in ``repeats`` rounds: a round runs every peer once, starting one peer further along
    than the round before, so that a drift in machine load over the minutes of a run hits every
    peer alike and the ratios between peers stay fair (a peer-by-peer order lets a slow minute
    land on one peer). ``warmup`` runs each peer's phases once untimed first. A peer that raises
    :class:`Unsupported` or :class:`PeerError` is recorded in ``not_run`` and leaves the rounds.
    Returns, per peer name that finished, its times per phase (``[phase][run]``) and each
    phase's last output."""
    live = {peer.name: (peer, phases(peer)) for peer in peers}
    times: dict[str, list[list[float]]] = {n: [[] for _ in fns] for n, (_, fns) in live.items()}
    last: dict[str, list[Any]] = {n: [None] * len(fns) for n, (_, fns) in live.items()}

    def run_once(name: str, timed: bool) -> None:
        peer, fns = live[name]
        for i, fn in enumerate(fns):
            t0 = time.perf_counter()
            got = attempt(peer, not_run, workload, lambda: (fn(),))  # None: failed
            if got is None:
                del live[name]
                return
            if timed:
                times[name][i].append(time.perf_counter() - t0)
            last[name][i] = got[0]

    if warmup:
        for name in list(live):
            run_once(name, timed=False)
    for r in range(repeats):
        order = list(live)
        for name in order[r % max(1, len(order)):] + order[:r % max(1, len(order))]:
            if name in live:
                run_once(name, timed=True)
    return {n: (times[n], last[n]) for n in live}


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
GOALS_INT8_VS_BEST_PEER = {"A": 1.1}  # metagen-int8 against the best 8-bit peer
GOALS_INT4_VS_BEST_PEER = {"A": 1.1}  # metagen-int4(-all) against the best 4-bit peer


def speed(row: dict[str, Any]) -> float:
    """The figure peers are compared on: A's decode tokens/s (median; its rows also carry the
    prefill), every other workload's generated tokens/s. Rows need ``tokens_per_s``."""
    return row["decode_tok_s"]["median"] if "decode_tok_s" in row else row["tokens_per_s"]


def compare_peers(rows: list[dict[str, Any]], bits: dict[str, int]) -> None:
    """Add ``vs_transformers`` (tokens/s over transformers') to every row of B and C; to
    metagen's row of A, B and C ``vs_best_peer`` (:func:`speed` over the fastest other peer with
    float32 weights, transformers included) with its goal; to metagen-int8's row
    ``vs_metagen_fp32`` and ``vs_best_peer`` over the fastest other peer with 8-bit weights, and
    to metagen-int4's and metagen-int4-all's ``vs_best_peer`` over the fastest other 4-bit peer
    (``bits``: each peer's :func:`benchmarks.peers.weight_bits`; a peer is compared within its
    width only). ``best_peer`` names the reference."""
    for wl in ("A", "B", "C"):
        mine = [r for r in rows if r["workload"] == wl]
        by_peer = {r["peer"]: r for r in mine}
        ref = by_peer.get("transformers")
        for r in mine:
            if ref is not None and wl != "A":
                r["vs_transformers"] = r["tokens_per_s"] / ref["tokens_per_s"]
        me, q8 = by_peer.get("metagen"), by_peer.get("metagen-int8")
        if me is not None and q8 is not None:
            q8["vs_metagen_fp32"] = speed(q8) / speed(me)
        for name, width, goal in (("metagen", 32, GOALS_VS_BEST_PEER.get(wl)),
                                  ("metagen-int8", 8, GOALS_INT8_VS_BEST_PEER.get(wl)),
                                  ("metagen-int4", 4, GOALS_INT4_VS_BEST_PEER.get(wl)),
                                  ("metagen-int4-all", 4, GOALS_INT4_VS_BEST_PEER.get(wl))):
            row = by_peer.get(name)
            others = [r for r in mine
                      if not r["peer"].startswith("metagen") and bits[r["peer"]] == width]
            if row is None or not others:
                continue
            best = max(others, key=speed)
            row["vs_best_peer"] = speed(row) / speed(best)
            row["best_peer"] = best["peer"]
            if goal is not None:
                row["target"] = f">= {goal}x best {'' if width == 32 else f'{width}-bit '}peer"


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


def workload_a(peers: list[Peer], s: Settings, vocab: int, roof_tok_s: dict[str | None, float],
               not_run: list[dict[str, Any]]) -> tuple[list[dict], dict]:
    """Batch-1 greedy; decode rate = (new - 1) / (t(new) - t(1)) against the roofline of the
    peer's own weights (``roof_tok_s[peer.name]`` for a quantized peer, which streams fewer bytes
    per token, so its bound is higher; ``roof_tok_s[None]``, float32's, for the others)."""
    prompt = random_prompt(s.a_prompt, vocab, 1)
    rows, outputs = [], {}
    got = rounds(peers, lambda peer: (lambda: peer.greedy("target", prompt, s.a_new),
                                      lambda: peer.greedy("target", prompt, 1)),
                 s.repeats, s.warmup, not_run, "A")
    for peer in (p for p in peers if p.name in got):
        (t_all, t_one), (toks, _) = got[peer.name]
        # A round whose one-token call took as long as the whole call (a loaded machine) has no
        # decode time to divide by: it is dropped, never a rate of tokens / 1e-9 s.
        decode = [(s.a_new - 1) / (a - b) for a, b in zip(t_all, t_one) if a > b] or [float("nan")]
        frac = [d / roof_tok_s[peer.name if peer.quantization else None] for d in decode]
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
    got = rounds(peers, lambda peer: (lambda: peer.best_of_n("target", prompt, s.b_n, s.b_new,
                                                             7),),
                 s.repeats, s.warmup, not_run, "B")
    for peer in (p for p in peers if p.name in got):
        (times,), (outs,) = got[peer.name]
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
    got = rounds(peers, lambda peer: (lambda: peer.beam("target", prompt, s.c_width, s.c_new),),
                 s.repeats, s.warmup, not_run, "C")
    for peer in (p for p in peers if p.name in got):
        (times,), (toks,) = got[peer.name]
        outputs[peer.name] = toks
        rows.append(_row("C", peer, f"beam {s.c_width}", times, s.c_new, **dict(peer.last)))
    return rows, outputs


def workload_d(peers: list[Peer], s: Settings, vocab: int,
               not_run: list[dict[str, Any]]) -> tuple[list[dict], dict]:
    """Speculative greedy vs the same engine's own greedy: good draft and prompt lookup, and
    (metagen only: ``EngineConfig.speculative_quantization``) the good draft quantized to int8
    with its own ``k``, as a chain and as a tree (``d_tree``: ``EngineConfig.
    speculative_tree``); the target stays in each peer's own precision."""
    rows, outputs = [], {}
    good = random_prompt(s.d_prompt, vocab, 4)
    cases: list[tuple[str, str, list[int], float, int, tuple[int, ...]]] = [
        ("draft", "good_target", good, 1.7, s.d_k, ()),
        ("draft-int8", "good_target", good, 1.7, s.d_int8_k, ()),
        ("draft-int8-tree", "good_target", good, 1.7, s.d_int8_k, s.d_tree),
        ("ngram", "target", repetitive_prompt(s.d_prompt, vocab, 5), 1.9, s.d_k, ())]
    for mode, model, prompt, goal, k, tree in cases:
        mine = [p for p in peers if not mode.startswith("draft-int8") or isinstance(p, MetagenPeer)]
        draft = mode.removesuffix("-tree")
        got = rounds(mine, lambda peer: (
            lambda: peer.greedy(model, prompt, s.d_new),
            lambda: _speculative(peer, model, prompt, s.d_new, k, draft, tree)),
            s.repeats, s.warmup, not_run, f"D {mode}")
        for peer in (p for p in mine if p.name in got):
            (t_base, t_spec), (base, spec) = got[peer.name]
            speed = [b / t for b, t in zip(t_base, t_spec)]
            outputs[f"{peer.name}/{mode}/greedy"] = base
            outputs[f"{peer.name}/{mode}/spec"] = spec
            shape = f" tree {','.join(map(str, tree))}" if tree else ""
            rows.append(_row("D", peer, f"spec {draft} k={k}{shape} ({model})", t_spec, s.d_new,
                             ratio_runs=speed, ratio=summary(speed), ratio_name="x own greedy",
                             target=f">= {goal}x" if peer.name == "metagen" else None,
                             greedy_times=t_base,
                             **dict(peer.last)))
    return rows, outputs


def _speculative(peer: Peer, model: str, prompt: list[int], max_new: int, k: int, mode: str,
                 tree: tuple[int, ...]) -> list[int]:
    """``peer.speculative``; with a ``tree``, metagen's (the only peer that drafts trees)."""
    if not tree:
        return peer.speculative(model, prompt, max_new, k, mode)
    assert isinstance(peer, MetagenPeer)
    return peer.speculative(model, prompt, max_new, k, mode, tree)


def e_prompts(s: Settings, vocab: int) -> list[list[int]]:
    """E's prompts: a shared first half, then each its own tokens."""
    shared = random_prompt(s.e_prompt_len // 2, vocab, 6)
    return [shared + random_prompt(s.e_prompt_len - len(shared), vocab, 100 + i)
            for i in range(s.e_prompts)]


def e_blocks(peer: MetagenPeer, s: Settings) -> int:
    return peer.blocks_for(2 * s.e_prompts * 2 * s.e_beams
                           * (s.e_prompt_len + s.e_steps * s.e_step_tokens + 16))


def e_search(peer: MetagenPeer, s: Settings, prompts: list[list[int]]) -> dict[str, Any]:
    """One step search of width n = 2 x ``e_beams`` per prompt (see :func:`workload_e`); returns
    its generated tokens, the prompt tokens it prefilled and the unique tokens of its contexts."""
    from metagen.types import SamplingParams

    width = 2 * s.e_beams
    eng = peer.engine("target", num_blocks=e_blocks(peer, s))
    beams = [[(0.0, list(p))] for p in prompts]
    seen: set[tuple[int, ...]] = set()
    prefilled = generated = 0
    for step in range(s.e_steps):
        flat = [(i, lp, toks) for i, bs in enumerate(beams) for lp, toks in bs]
        for _, _, toks in flat:
            seen.update(tuple(toks[:j + 1]) for j in range(len(toks)))
        before = eng.counters.snapshot()
        outs = eng.generate([t for _, _, t in flat], [SamplingParams(
            n=width // len(beams[i]), temperature=1.0, max_tokens=s.e_step_tokens,
            ignore_eos=True, seed=step) for i, _, _ in flat])
        after = eng.counters
        prefilled += (after.prompt_tokens - before.prompt_tokens
                      - (after.cached_prompt_tokens - before.cached_prompt_tokens))
        cand: list[list[tuple[float, list[int]]]] = [[] for _ in prompts]
        for (i, lp, toks), out in zip(flat, outs):
            for c in out.outputs:
                generated += len(c.token_ids)
                cand[i].append((lp + sum(c.logprobs or ()), toks + list(c.token_ids)))
        beams = [sorted(c, key=lambda x: -x[0])[:s.e_beams] for c in cand]
    return {"prefilled": prefilled, "unique": len(seen), "generated": generated,
            "beams": beams}


def e_best_of_n(peer: MetagenPeer, s: Settings, prompts: list[list[int]]) -> dict[str, Any]:
    """Best-of-n sampling, n = 2 x ``e_beams`` samples of ``e_steps x e_step_tokens`` tokens per
    prompt, in one call; returns its generated and prefilled token counts."""
    from metagen.types import SamplingParams

    eng = peer.engine("target", num_blocks=e_blocks(peer, s))
    outs = eng.generate(prompts, SamplingParams(n=2 * s.e_beams, temperature=1.0,
                                                max_tokens=s.e_steps * s.e_step_tokens,
                                                ignore_eos=True, seed=0))
    return {"generated": sum(len(c.token_ids) for o in outs for c in o.outputs),
            "prefilled": eng.counters.prompt_tokens - eng.counters.cached_prompt_tokens}


def workload_e(peer: MetagenPeer, s: Settings, vocab: int) -> list[dict]:
    """Step search against best-of-n sampling on the same prompts, width n, the same generated
    tokens (issue 21 item 4): n = ``e_beams`` x 2 rows per prompt. The search runs ``e_steps``
    steps of ``e_step_tokens``; each step is one generate call in which every kept beam draws
    ``n / beams`` samples (n from the prompt at the first step), and the best ``e_beams`` per
    prompt by log-prob continue. Best-of-n draws n samples of ``e_steps x e_step_tokens`` tokens
    per prompt in one call. Both are timed interleaved on prefix-caching engines; the ratio is
    the search's time per generated token over best-of-n's (goal <= 1.2x), and the search's
    prefilled tokens are counted against the unique tokens of its contexts (goal <= 1.1x)."""
    prompts = e_prompts(s, vocab)
    width = 2 * s.e_beams
    t_s, srch, t_b, bon = timed_pair(lambda: e_search(peer, s, prompts),
                                     lambda: e_best_of_n(peer, s, prompts), s.repeats, s.warmup)
    if srch["generated"] != bon["generated"]:
        raise AssertionError(f"E: the search generated {srch['generated']} tokens, best-of-n "
                             f"{bon['generated']}: not the same work")
    per_token = [ts / tb for ts, tb in zip(t_s, t_b)]  # same token counts: time ratio
    return [
        _row("E", peer, f"step search, width {width}", t_s, srch["generated"],
             ratio_runs=per_token, ratio=summary(per_token), ratio_name="x best-of-n per token",
             target="<= 1.2x", prefilled=srch["prefilled"], unique_tokens=srch["unique"],
             prefill_over_unique=srch["prefilled"] / srch["unique"],
             prefill_target="<= 1.1x unique", width=width, steps=s.e_steps,
             step_tokens=s.e_step_tokens),
        _row("E", peer, f"best-of-{width} sampling", t_b, bon["generated"],
             prefilled=bon["prefilled"], width=width),
    ]
