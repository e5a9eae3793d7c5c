"""Server metrics in the Prometheus text exposition format (written by hand, no dependency).

Counters: requests by route and status, prompt and generated tokens. Gauges read from the engine
at scrape time: running and waiting sequences, KV blocks used and free, the prefix cache's hit
rate (cached / all prompt tokens since start), requests in flight. A histogram of request
latency (seconds, until the last byte of the response) by route.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections import defaultdict

from metagen.server.backend import EngineSnapshot

LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
PREFIX = "metagen"


class Metrics:
    """Thread-safe counters of one server."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: defaultdict[tuple[str, int], int] = defaultdict(int)
        self.prompt_tokens = 0
        self.generated_tokens = 0
        self._buckets: defaultdict[str, list[int]] = defaultdict(
            lambda: [0] * (len(LATENCY_BUCKETS) + 1))
        self._sums: defaultdict[str, float] = defaultdict(float)

    def observe(self, route: str, status: int, seconds: float) -> None:
        with self._lock:
            self.requests[(route, status)] += 1
            self._buckets[route][bisect_left(LATENCY_BUCKETS, seconds)] += 1
            self._sums[route] += seconds

    def add_tokens(self, prompt: int, generated: int) -> None:
        with self._lock:
            self.prompt_tokens += prompt
            self.generated_tokens += generated

    def render(self, engine: EngineSnapshot | None, in_flight: int) -> str:
        """The exposition text; engine gauges are left out when ``engine`` is None (dead)."""
        lines: list[str] = []

        def metric(name: str, kind: str, help_text: str) -> str:
            full = f"{PREFIX}_{name}"
            lines.extend([f"# HELP {full} {help_text}", f"# TYPE {full} {kind}"])
            return full

        with self._lock:
            name = metric("requests_total", "counter", "HTTP requests by route and status.")
            for (route, status), count in sorted(self.requests.items()):
                lines.append(f'{name}{{route="{route}",status="{status}"}} {count}')
            name = metric("prompt_tokens_total", "counter", "Prompt tokens of served requests.")
            lines.append(f"{name} {self.prompt_tokens}")
            name = metric("generation_tokens_total", "counter", "Generated tokens.")
            lines.append(f"{name} {self.generated_tokens}")
            name = metric("request_latency_seconds", "histogram",
                          "Request latency until the response's last byte.")
            for route, counts in sorted(self._buckets.items()):
                total = 0
                for bound, count in zip((*LATENCY_BUCKETS, float("inf")), counts):
                    total += count
                    le = "+Inf" if bound == float("inf") else repr(bound)
                    lines.append(f'{name}_bucket{{route="{route}",le="{le}"}} {total}')
                lines.append(f'{name}_sum{{route="{route}"}} {self._sums[route]}')
                lines.append(f'{name}_count{{route="{route}"}} {total}')
        name = metric("requests_in_flight", "gauge", "Generation requests being served.")
        lines.append(f"{name} {in_flight}")
        if engine is not None:
            for key, value, text in (
                    ("num_requests_running", engine.running, "Sequences in the running batch."),
                    ("num_requests_waiting", engine.waiting, "Sequences waiting to be scheduled."),
                    ("kv_blocks_used", engine.blocks_total - engine.blocks_free,
                     "KV cache blocks in use (sequences and prefix cache)."),
                    ("kv_blocks_free", engine.blocks_free, "KV cache blocks on the free list."),
                    ("kv_blocks_cached", engine.blocks_cached,
                     "KV cache blocks stored in the prefix cache (reusable once no sequence "
                     "holds them)."),
                    ("kv_blocks_in_requests", engine.blocks_in_requests,
                     "KV cache blocks held by live sequences (0 when idle)."),
                    ("prefix_cache_hit_rate", hit_rate(engine),
                     "Prompt tokens served from the prefix cache / all prompt tokens.")):
                name = metric(key, "gauge", text)
                lines.append(f"{name} {value}")
        return "\n".join(lines) + "\n"


def hit_rate(engine: EngineSnapshot) -> float:
    """Cached / all prompt tokens (0 before any prompt)."""
    return engine.cached_prompt_tokens / engine.prompt_tokens if engine.prompt_tokens else 0.0
