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


def _run_with_prompt(tmp_path, index: int, prompt: str, max_tokens: int):
    """A 3-item testbed run on stories260K whose item ``index`` reads ``prompt``; returns
    (the failing item's id, the generator, the report, the exit code)."""
    items = TESTBED.items(None, 3)
    uid = items[index].problem.uid
    task = replace(TESTBED, name="odd_prompt", format_prompt=lambda p: (
        prompt if p.uid == uid else TESTBED.format_prompt(p)))
    config = EvalConfig(task="odd_prompt", model={"path": str(STORIES)},
                        strategy="self_consistency", ns=(1, 2),
                        sampling=SamplingParams(temperature=0.8, max_tokens=max_tokens),
                        limit=3, attempts=1)
    generator = LocalGenerator.from_pretrained(STORIES)
    report, code = run_eval(config, task, tmp_path, load_generator=lambda: generator)
    return items[index].id, generator, report, code


def test_a_prompt_longer_than_the_context_fails_its_item_and_the_run_goes_on(tmp_path):
    failing, _, report, code = _run_with_prompt(tmp_path, 1, LONG, max_tokens=8)
    assert code == 1 and report["status"] == "partial"
    assert report["failed_items"] == [failing]
    assert report["failures_by_reason"] == {"InvalidPromptError": 2}
    assert report["accounting"] == {"n_items_total": 3, "done": 2, "failed": 1, "skipped": 0}


def test_a_prompt_that_fits_alone_but_not_with_max_tokens_fails_its_item_only(tmp_path):
    """The real-task case (a 292-token GSM8K prompt, max_tokens=256, a 512-token model): the
    prompt fits the context alone but not with max_tokens; that item fails with its reason and
    the run goes on (it used to abort the whole run with an error naming max_tokens)."""
    mid = "once upon a time " * 75  # 377 tokens: < 512, but > 512 - 256
    failing, generator, report, code = _run_with_prompt(tmp_path, 0, mid, max_tokens=256)
    n_mid = len(generator.tokenizer(mid)["input_ids"])
    assert 512 - 256 < n_mid < 512
    assert code == 1 and report["failed_items"] == [failing]
    assert report["failures_by_reason"] == {"InvalidPromptError": 2}
    assert report["accounting"] == {"n_items_total": 3, "done": 2, "failed": 1, "skipped": 0}
