"""A scorer call inside an ``interruptible`` block stops before its next batch once the flag is
set (scripted: the flag is set by a wrapper around the first batch, as a departing client's
server would), and the same scorer scores exactly as before afterwards."""

from __future__ import annotations

import threading

import pytest

from metagen.errors import CallCancelled
from metagen.scorers import HFProcessRewardModel, HFRewardModel, LikelihoodVerifier
from metagen.scorers.interrupt import interrupted, interruptible

PROMPTS = ["Q: 2+3?\n", "Q: what is 12 * 4?\n", "Q: 7-1?\n", "Q: 9+9?\n"]
COMPLETIONS = ["2 + 3 = 5\n#### 5", "12 * 4 = 48\n#### 48", "#### 6", "9 + 9 = 18\n#### 18"]


def _count_batches_and_set(scorer, flag: threading.Event) -> list[int]:
    """Wrap the scorer's batch methods: count each batch and set ``flag`` after the first."""
    ran: list[int] = []
    for name in ("_plain_batch", "_shared_batch"):
        real = getattr(scorer, name)

        def batch(*args, _real=real, **kwargs):
            ran.append(1)
            _real(*args, **kwargs)
            flag.set()  # the caller leaves while the first batch runs

        setattr(scorer, name, batch)
    return ran


@pytest.fixture(params=["orm", "prm", "likelihood"])
def scorer_and_call(request, orm_path, prm_path, stories_path):
    if request.param == "orm":
        rm = HFRewardModel.from_pretrained(orm_path, batch_size=1)
        return rm, lambda: rm.score(PROMPTS, COMPLETIONS)
    if request.param == "prm":
        prm = HFProcessRewardModel.from_pretrained(prm_path, batch_size=1)
        steps = [c.splitlines(keepends=True) for c in COMPLETIONS]
        return prm, lambda: prm.score_steps(PROMPTS, steps)
    verifier = LikelihoodVerifier.from_pretrained(stories_path, batch_size=1)
    return verifier, lambda: verifier.score(PROMPTS, COMPLETIONS)


def test_scripted_interrupt_stops_the_call_after_the_batch_in_progress(scorer_and_call):
    scorer, call = scorer_and_call
    want = call()  # no block: runs every batch
    calls_before = scorer.usage.scorer_calls
    flag = threading.Event()
    ran = _count_batches_and_set(scorer, flag)
    with interruptible(flag), pytest.raises(CallCancelled, match="cancelled by its caller"):
        call()
    assert len(ran) == 1  # of 4: the batch in progress finished, no other started
    assert scorer.usage.scorer_calls == calls_before  # an interrupted call is not counted
    assert not interrupted()  # the block is over
    assert call() == want  # the flag is still set, but no block holds it: unaffected


def test_an_unset_flag_changes_nothing(orm_path):
    rm = HFRewardModel.from_pretrained(orm_path, batch_size=1)
    want = rm.score(PROMPTS, COMPLETIONS)
    with interruptible(threading.Event()):
        assert rm.score(PROMPTS, COMPLETIONS) == want
