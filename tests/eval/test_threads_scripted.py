"""Which runs do items in threads (scripted generator declared thread-safe): the subsampled
strategies do, with the same results as one at a time; a run with a step search does not (its
usage is measured on the shared generator)."""

from __future__ import annotations

import threading

import metagen.eval.threads as threads
from metagen.eval import run_eval
from metagen.generators.mock import MockGenerator
from tests.eval.test_direct_scripted import TASK, prm, step
from tests.eval.test_runner_scripted import comparable, config


class ThreadNoting(MockGenerator):
    """A MockGenerator that notes the thread of each call."""

    def __init__(self, script) -> None:
        super().__init__(script)
        self.threads: set[str] = set()

    def generate(self, prompts, params, **kw):
        self.threads.add(threading.current_thread().name)
        return super().generate(prompts, params, **kw)


def _run(tmp_path, name, monkeypatch, concurrency, **kw):
    monkeypatch.setattr(threads, "thread_safe", lambda generator: True)
    gen = ThreadNoting(step)
    report, code = run_eval(config(limit=4, **kw), TASK, tmp_path / name,
                            load_generator=lambda: gen, load_prm=lambda: prm,
                            concurrency=concurrency)
    assert code == 0
    return comparable(report), gen.threads


def test_scripted_subsampled_items_run_in_threads_with_the_same_results(tmp_path, monkeypatch):
    one, one_threads = _run(tmp_path, "one", monkeypatch, 1, strategy="greedy,mbr")
    many, many_threads = _run(tmp_path, "many", monkeypatch, 3, strategy="greedy,mbr")
    assert one_threads == {"MainThread"} and "MainThread" not in many_threads
    assert many == one


def test_scripted_a_run_with_a_step_search_does_one_item_at_a_time(tmp_path, monkeypatch):
    _, names = _run(tmp_path, "s", monkeypatch, 3, strategy="mbr,step_beam_search", ns=(1, 2),
                    prm="scripted")
    assert names == {"MainThread"}
