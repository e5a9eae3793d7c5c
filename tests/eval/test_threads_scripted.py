"""Which runs do items in threads (scripted generator declared thread-safe): the subsampled
strategies do, with the same results as one at a time; a run with a step search does not (its
usage is measured on the shared generator)."""

from __future__ import annotations

import threading

from metagen.eval import run_eval
from metagen.eval.threads import thread_safe
from metagen.generators.base import Capabilities
from metagen.generators.mock import MockGenerator
from tests.eval.test_direct_scripted import TASK, prm, step
from tests.eval.test_runner_scripted import comparable, config


class ThreadNoting(MockGenerator):
    """A MockGenerator that notes the thread of each call and declares itself thread-safe."""

    def __init__(self, script) -> None:
        super().__init__(script, capabilities=Capabilities(thread_safe=True))
        self.threads: set[str] = set()

    def generate(self, prompts, params, **kw):
        self.threads.add(threading.current_thread().name)
        return super().generate(prompts, params, **kw)


def _run(tmp_path, name, concurrency, **kw):
    gen = ThreadNoting(step)
    report, code = run_eval(config(limit=4, **kw), TASK, tmp_path / name,
                            load_generator=lambda: gen, load_prm=lambda: prm,
                            concurrency=concurrency)
    assert code == 0
    return comparable(report), gen.threads


def test_scripted_subsampled_items_run_in_threads_with_the_same_results(tmp_path):
    one, one_threads = _run(tmp_path, "one", 1, strategy="greedy,mbr")
    many, many_threads = _run(tmp_path, "many", 3, strategy="greedy,mbr")
    assert one_threads == {"MainThread"} and "MainThread" not in many_threads
    assert many == one


def test_scripted_a_run_with_a_step_search_does_one_item_at_a_time(tmp_path):
    _, names = _run(tmp_path, "s", 3, strategy="mbr,step_beam_search", ns=(1, 2),
                    prm="scripted")
    assert names == {"MainThread"}


def test_a_generator_that_does_not_declare_itself_thread_safe_does_one_item_at_a_time(
        tmp_path):
    gen = MockGenerator(step)  # the mock keeps a cursor and usage unlocked: not thread-safe
    assert not thread_safe(gen) and not thread_safe(object())
    report, code = run_eval(config(limit=4, strategy="greedy,mbr"), TASK, tmp_path / "m",
                            load_generator=lambda: gen, concurrency=3)
    assert code == 0 and report["accounting"]["done"] == 4




def test_nothing_the_runner_uses_imports_the_runner():
    """The runner uses the pools and the item, never the other way round (no import cycle)."""
    import ast
    from pathlib import Path

    import metagen.eval as package

    folder = Path(package.__file__).parent
    for name in ("threads", "ray_runner", "item", "backends", "config", "cost"):
        tree = ast.parse((folder / f"{name}.py").read_text())
        imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        imported |= {a.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                     for a in node.names}
        assert "metagen.eval.runner" not in imported, name


def test_a_server_that_cannot_say_its_capabilities_is_not_taken_as_thread_safe():
    """Reading an unprobed server's capabilities asks the server; one that cannot be reached
    gives no thread-safety, and its items fail one at a time as they would in threads."""
    from metagen.errors import BackendError

    class Unreachable:
        @property
        def capabilities(self):
            raise BackendError("connection refused")

    assert thread_safe(Unreachable()) is False
