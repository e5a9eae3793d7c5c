"""``metagen eval`` end to end on the testbed policy: SIGKILL at random points and rerun gives
the uninterrupted results (L1); SIGTERM writes a partial status and exits non-zero, a rerun
completes (L2); a changed setting or new weights at the model's path are refused (L5); an
unusable folder is one line, before any model load, and a disk that fills mid-run is one line
and loses nothing (L9); a second process on a folder in use is refused."""

from __future__ import annotations

import json
import os
import contextlib
import errno
import fcntl
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from metagen.cli import main

ROOT = Path(__file__).resolve().parents[2]
POLICY = ROOT / "metagen" / "testbed" / "models" / "policy"
ARGS = ["eval", "testbed", "--model", str(POLICY), "--strategy", "self_consistency",
        "--n", "1,4", "--limit", "8", "--seed", "3", "--max-tokens", "96"]


def _cmd(out: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "metagen", *ARGS, "--out", str(out), *extra]


def _run(out: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(_cmd(out, *extra), capture_output=True, text=True, timeout=300,
                          cwd=ROOT)


def _comparable(out: Path) -> dict:
    report = json.loads((out / "results.json").read_text())
    report.pop("times")
    return report


@pytest.fixture(scope="module")
def baseline_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("eval") / "baseline"
    done = _run(out)
    assert done.returncode == 0, done.stderr
    return out


@pytest.fixture(scope="module")
def baseline(baseline_dir) -> dict:
    report = _comparable(baseline_dir)
    assert report["status"] == "complete" and report["accounting"]["done"] == 8
    assert report["provenance"]["backends"] == ["LocalGenerator"]
    assert report["failures_by_reason"] == {} and report["config"]["sampling"]["top_p"] == 1.0
    return report


def test_a_stored_sample_is_reproduced_by_its_seed_and_index(baseline_dir):
    """Sample j of an item is sample j of one generate call with the stored (item) seed, on
    the embedded engine, whatever else is in the batch (L8, L11)."""
    from metagen.eval import get_task
    from metagen.eval.store import RunStore
    from metagen.generators.local import LocalGenerator
    from metagen.types import SamplingParams

    items = get_task("testbed").items(None, 8)
    with RunStore(baseline_dir / "run.sqlite") as store:
        stored = [store.samples(it.id) for it in items[:2]]
    gen = LocalGenerator.from_pretrained(POLICY)
    for it, samples in zip(items, stored):
        seed = samples[0].seed
        assert {s.seed for s in samples.values()} == {seed}
        again = gen.generate([it.prompt, items[7].prompt], SamplingParams(
            n=4, temperature=0.8, max_tokens=96, seed=seed))[0]
        assert [c.text for c in again] == [samples[j].completion.text for j in range(4)]


def _items_done(out: Path) -> int:
    if not (out / "run.sqlite").exists():
        return -1
    db = sqlite3.connect(f"file:{out / 'run.sqlite'}?mode=ro", uri=True)
    try:
        return int(db.execute("SELECT COUNT(*) FROM items").fetchone()[0])
    except sqlite3.OperationalError:  # the schema is being created
        return -1
    finally:
        db.close()


def _kill_after(out: Path, items: int, delay: float) -> int:
    """Start the command, SIGKILL it ``delay`` s after ``items`` items are stored (or after
    it exits); returns the items stored when it was killed."""
    proc = subprocess.Popen(_cmd(out), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            cwd=ROOT)
    while proc.poll() is None and _items_done(out) < items:
        time.sleep(0.02)
    time.sleep(delay)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    return _items_done(out)


def test_sigkill_at_random_points_then_rerun_equals_an_uninterrupted_run(tmp_path, baseline):
    """Three kills at random points of progress (after a random number of stored items plus
    a random delay), each followed by a rerun of the same command."""
    out, rng = tmp_path / "killed", random.Random(1234)
    targets = sorted(rng.sample(range(0, 8), 3))
    for target in targets:
        _kill_after(out, target, rng.uniform(0.0, 0.3))
        if (out / "results.json").exists():  # whatever is there is whole JSON (L10)
            json.loads((out / "results.json").read_text())
    done = _run(out)
    assert done.returncode == 0, done.stderr
    assert _comparable(out) == baseline
    db = sqlite3.connect(out / "run.sqlite")
    assert db.execute("SELECT COUNT(*) FROM samples").fetchone()[0] == 8 * 4  # no duplicates
    assert db.execute("SELECT COUNT(*) FROM items").fetchone()[0] == 8


def test_sigterm_writes_partial_and_exits_non_zero_and_a_rerun_completes(tmp_path, baseline):
    out = tmp_path / "term"
    proc = subprocess.Popen(_cmd(out), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=ROOT)
    deadline = time.monotonic() + 120  # wait until the first item is stored: the run is under
    while (proc.poll() is None and _items_done(out) < 1  # way, with 7 of 8 items to go (a fixed
           and time.monotonic() < deadline):             # delay let a fast machine finish)
        time.sleep(0.02)
    assert proc.poll() is None, "the run ended before it could be interrupted"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, err
    report = json.loads((out / "results.json").read_text())
    assert report["status"] == "partial"
    acc = report["accounting"]
    assert acc["n_items_total"] == acc["done"] + acc["failed"] + acc["skipped"] == 8
    assert acc["skipped"] > 0
    done = _run(out)
    assert done.returncode == 0, done.stderr
    assert _comparable(out) == baseline


def test_a_changed_temperature_or_seed_is_refused_without_force_resume(tmp_path, baseline,
                                                                       capsys):
    out = tmp_path / "run"
    assert main([*ARGS, "--limit", "1", "--out", str(out)]) == 0
    for change in (["--temperature", "0.7"], ["--seed", "4"]):
        args = [*ARGS, "--limit", "1", "--out", str(out), *change]
        capsys.readouterr()
        assert main(args) == 2
        err = capsys.readouterr().err.strip()
        assert "run_key" in err and "--force-resume" in err and len(err.splitlines()) == 1
    assert main([*ARGS, "--limit", "1", "--out", str(out), "--seed", "4",
                 "--force-resume"]) == 0


def test_new_weights_at_the_same_path_are_refused_without_force_resume(tmp_path, capsys):
    """The ORM's checkpoint has the policy's config, size and safetensors header: only the
    content tells them apart, and a resume over swapped weights is refused naming it."""
    import shutil

    model, out = tmp_path / "model", tmp_path / "run"
    shutil.copytree(POLICY, model)
    args = [str(model) if a == str(POLICY) else a for a in ARGS]
    args += ["--limit", "1", "--out", str(out)]
    assert main(args) == 0
    shutil.copy(POLICY.parent / "orm" / "model.safetensors", model / "model.safetensors")
    capsys.readouterr()
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert "run_key" in err and "model_files" in err and len(err.splitlines()) == 1
    assert main([*args, "--force-resume"]) == 0


def test_an_unwritable_output_folder_is_one_line_before_any_model_load(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    for out in (tmp_path / "file" / "run", Path("/sys/metagen-eval-test")):
        args = ["eval", "testbed", "--model", str(tmp_path / "no-such-model"), "--strategy",
                "self_consistency", "--out", str(out)]
        assert main(args) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("error:") and "out" in err and "not a writable folder" in err
        assert len(err.splitlines()) == 1 and "no-such-model" not in err


def _lock_held(out: Path) -> bool:
    """Whether some process holds the run folder's lock (probed with a lock of our own)."""
    try:
        fd = os.open(out / "run.lock", os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def _stop_when(proc: subprocess.Popen, ready: Callable[[], bool]) -> None:
    """SIGSTOP ``proc`` as soon as ``ready()`` (it must still be running then)."""
    deadline = time.monotonic() + 120
    while proc.poll() is None and not ready() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert proc.poll() is None and ready(), "the run ended (or never got ready) unstopped"
    os.kill(proc.pid, signal.SIGSTOP)  # an exit in between leaves a zombie, seen by poll:
    assert proc.poll() is None, "the run ended before it could be stopped"


def _resume(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGCONT)


def test_a_second_eval_into_a_folder_in_use_is_refused_in_one_line(tmp_path, baseline):
    """The first process is paused while it holds the folder (so the two surely overlap);
    the second exits 2 at once with one line naming ``out`` and the holder's pid, having
    computed nothing; the first then completes as if alone."""
    out = tmp_path / "shared"
    first = subprocess.Popen(_cmd(out), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             text=True, cwd=ROOT)
    try:
        _stop_when(first, lambda: _lock_held(out))
        second = _run(out)
        assert second.returncode == 2, second.stderr
        err = second.stderr.strip()
        assert len(err.splitlines()) == 1 and err.startswith("error: invalid out=")
        assert "in use" in err and f"pid {first.pid}" in err
    finally:
        _resume(first)
    _, err = first.communicate(timeout=300)
    assert first.returncode == 0, err
    assert _comparable(out) == baseline


@pytest.fixture
def small_tmpfs(tmp_path) -> Iterator[Path]:
    """A private 72 MiB tmpfs (the folder check asks for 64 MiB free), unmounted afterwards."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=72m", "tmpfs", str(mnt)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip() or done.returncode}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


def _fill(path: Path) -> None:
    """Write ``path`` until the file system has no byte left (1 MiB, then 4 KiB writes)."""
    with path.open("wb", buffering=0) as fh:
        for chunk in (b"x" * (1 << 20), b"x" * 4096):
            try:
                while True:
                    fh.write(chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC


def test_a_disk_that_fills_mid_run_is_one_line_exit_2_and_a_rerun_resumes(small_tmpfs,
                                                                          baseline):
    """A run on a real tmpfs is paused after its first stored item, the tmpfs filled, the run
    resumed: its next write fails. Expected: exit 2, one error line naming the store and the
    cause, no traceback, the stored items kept; after freeing space the same command
    completes with the results of an uninterrupted run."""
    out = small_tmpfs / "run"
    proc = subprocess.Popen(_cmd(out, "--concurrency", "1"), stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        _stop_when(proc, lambda: 1 <= _items_done(out) < 8)
        stored = _items_done(out)
        _fill(small_tmpfs / "filler")
    finally:
        _resume(proc)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 2, err
    assert "Traceback" not in err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and str(out / "run.sqlite") in errors[0]
    assert "no space left on device" in errors[0]
    assert err.strip().splitlines()[-1] == errors[0]
    if (out / "results.json").exists():  # only ever whole
        json.loads((out / "results.json").read_text())
    (small_tmpfs / "filler").unlink()
    assert _items_done(out) >= stored
    done = _run(out)
    assert done.returncode == 0, done.stderr
    assert _comparable(out) == baseline
