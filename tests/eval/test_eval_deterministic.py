"""``metagen eval --deterministic``: every stored sample the same bits whatever --concurrency
(batch-invariant engine steps), and the flag is part of the run key."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from metagen.eval import get_task
from metagen.eval.store import RunStore
from metagen.engine.native.library import library

import pytest

ROOT = Path(__file__).resolve().parents[2]
POLICY = ROOT / "metagen" / "testbed" / "models" / "policy"
ARGS = ["eval", "testbed", "--model", str(POLICY), "--strategy", "self_consistency",
        "--n", "1,4", "--limit", "6", "--seed", "5", "--max-tokens", "64"]


def _run(out: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "metagen", *ARGS, "--out", str(out), *extra],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)


def _samples(out: Path) -> list[tuple]:
    items = get_task("testbed").items(None, 6)
    with RunStore(out / "run.sqlite") as store:
        return [(it.id, j, s.completion.text, s.completion.num_tokens,
                 s.completion.cumulative_logprob)
                for it in items for j, s in sorted(store.samples(it.id).items())]


@pytest.mark.skipif(library() is None, reason="no native build (C compiler) here")
def test_samples_are_the_same_bits_at_any_concurrency_and_the_flag_is_in_the_key(tmp_path):
    one = _run(tmp_path / "c1", "--deterministic", "--concurrency", "1")
    six = _run(tmp_path / "c6", "--deterministic", "--concurrency", "6")
    assert one.returncode == 0 and six.returncode == 0, one.stderr + six.stderr
    got = _samples(tmp_path / "c1")
    # texts, and cumulative logprobs bit for bit (by default they differ in their last bits
    # with the batch each sample ran in)
    assert len(got) == 24 and all(s[4] is not None for s in got)
    assert got == _samples(tmp_path / "c6")
    # the same folder without the flag is another run: refused without --force-resume
    again = _run(tmp_path / "c1", "--concurrency", "6")
    assert again.returncode == 2 and "run_key" in again.stderr


def test_deterministic_refuses_the_transformers_backend(tmp_path):
    done = _run(tmp_path / "hf", "--deterministic", "--backend", "hf")
    assert done.returncode == 2
    assert "deterministic" in done.stderr and "built-in engine" in done.stderr
