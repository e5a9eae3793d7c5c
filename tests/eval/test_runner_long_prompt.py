"""An item whose prompt the real model refuses (longer than its 512-token context) fails with
its reason while every other item is done; the run is ``partial``, never aborted (L7, L14)."""

from __future__ import annotations

from dataclasses import replace

from metagen.eval import EvalConfig, get_task, run_eval
from metagen.generators.local import LocalGenerator
from metagen.types import SamplingParams
from tests.conftest import STORIES

TESTBED = get_task("testbed")
LONG = "once upon a time " * 200  # ~800 tokens for stories260K's tokenizer


def test_a_prompt_longer_than_the_context_fails_its_item_and_the_run_goes_on(tmp_path):
    items = TESTBED.items(None, 3)
    long_uid = items[1].problem.uid
    task = replace(TESTBED, name="long_prompt", format_prompt=lambda p: (
        LONG if p.uid == long_uid else TESTBED.format_prompt(p)))
    config = EvalConfig(task="long_prompt", model={"path": str(STORIES)},
                        strategy="self_consistency", ns=(1, 2),
                        sampling=SamplingParams(temperature=0.8, max_tokens=8), limit=3,
                        attempts=1)
    generator = LocalGenerator.from_pretrained(STORIES)
    report, code = run_eval(config, task, tmp_path, load_generator=lambda: generator)
    assert code == 1 and report["status"] == "partial"
    assert report["failed_items"] == [items[1].id]
    assert report["failures_by_reason"] == {"InvalidPromptError": 2}
    assert report["accounting"] == {"n_items_total": 3, "done": 2, "failed": 1, "skipped": 0}
