"""What a backend says it prefilled, from its own counters: the prompt tokens its requests
carried, those it served from its prefix cache and those it computed. Pure functions over two
readings of a backend's cumulative counters (or the log between them):

- metagen's engine: :class:`~metagen.engine.outputs.EngineStats` (``LLMEngine.counters``);
- vLLM: its Prometheus ``/metrics`` text (``vllm:prompt_tokens``, ``vllm:prompt_tokens_cached``,
  ``vllm:prompt_tokens_by_source{source="local_compute"}``, ``vllm:prefix_cache_queries`` /
  ``_hits``), which it keeps only when started without ``--disable-log-stats``;
- llama-cpp-python's server: no count in its responses (``usage`` has prompt and completion
  tokens only), but its log (``verbose``, the default) has, per request, ``Llama.generate: K
  prefix-match hit, remaining R prompt tokens to eval`` when it reused its KV cache, and
  llama.cpp's ``prompt eval time = ... / N tokens`` timing line at the end of each request.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]

_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')
_HIT = re.compile(r"Llama\.generate: (\d+) prefix-match hit, remaining (\d+) prompt tokens")
_PROMPT_EVAL = re.compile(r"prompt eval time =\s*[\d.]+ ms /\s*(\d+) tokens")


@dataclass(slots=True, frozen=True)
class Prefill:
    """Prompt tokens a backend's requests carried (``prompt``; a prompt sampled ``n`` times in
    one request counts once, in ``n`` requests ``n`` times), served from its prefix cache
    (``cached``) and computed (``computed``); None: not reported. ``extra``: further counters
    by name."""

    prompt: int | None
    cached: int | None
    computed: int | None
    extra: Mapping[str, int] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"prompt": self.prompt, "cached": self.cached, "computed": self.computed,
                **({"extra": dict(self.extra)} if self.extra else {})}


def engine_prefill(before: Any, after: Any) -> Prefill:
    """Between two :class:`~metagen.engine.outputs.EngineStats` readings (``n`` samples forked
    from one prefill count their prompt once)."""
    prompt = after.prompt_tokens - before.prompt_tokens
    cached = after.cached_prompt_tokens - before.cached_prompt_tokens
    return Prefill(prompt, cached, prompt - cached)


def parse_prometheus(text: str) -> Samples:
    """The samples of a Prometheus text exposition: (metric name, its labels) -> value;
    comments and blank lines skipped."""
    out: Samples = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if m is None:
            continue
        labels = frozenset((k, v) for k, v in _LABEL.findall(m.group(2) or ""))
        out[(m.group(1), labels)] = float(m.group(3))
    return out


def counter(samples: Samples, name: str, **labels: str) -> float:
    """The sum of ``name``'s samples whose labels include ``labels`` (every engine, model)."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and want <= ls)


VLLM_COUNTERS = {"prompt": ("vllm:prompt_tokens_total", {}),
                 "cached": ("vllm:prompt_tokens_cached_total", {}),
                 "computed": ("vllm:prompt_tokens_by_source_total", {"source": "local_compute"}),
                 "prefix_cache_queries": ("vllm:prefix_cache_queries_total", {}),
                 "prefix_cache_hits": ("vllm:prefix_cache_hits_total", {}),
                 "generated": ("vllm:generation_tokens_total", {})}


def vllm_prefill(before: Samples, after: Samples) -> Prefill:
    """Between two readings of vLLM's ``/metrics`` (:func:`parse_prometheus`): prompt tokens
    (every request counts its prompt), cached, computed locally; ``extra`` the prefix-cache
    queries and hits (tokens) and generated tokens. A counter absent from both readings (stats
    off) is not reported (None)."""
    got: dict[str, int | None] = {}
    for key, (name, labels) in VLLM_COUNTERS.items():
        present = any(n == name for n, _ in after)
        got[key] = int(counter(after, name, **labels) - counter(before, name, **labels)) \
            if present else None
    extra = {k: v for k in ("prefix_cache_queries", "prefix_cache_hits", "generated")
             if (v := got[k]) is not None}
    return Prefill(got["prompt"], got["cached"], got["computed"], extra or None)


def llama_cpp_prefill(log: str) -> Prefill:
    """From the server's log between two readings: per request (ended by its ``prompt eval
    time`` line) the cached and computed tokens of its ``prefix-match hit`` line, or, without
    one, the ``prompt eval`` count as computed and nothing cached. A prompt the server found
    wholly cached (``full prompt already cached``) adds 0 computed and is not counted as
    cached (the log does not say its length). ``extra``: the requests seen."""
    cached = computed = requests = 0
    hit: tuple[int, int] | None = None
    for line in log.splitlines():
        if (m := _HIT.search(line)) is not None:
            hit = (int(m.group(1)), int(m.group(2)))
        elif (m := _PROMPT_EVAL.search(line)) is not None:
            requests += 1
            if hit is not None:
                cached, computed = cached + hit[0], computed + hit[1]
            else:
                computed += int(m.group(1))
            hit = None
    return Prefill(cached + computed, cached, computed, {"requests": requests})
