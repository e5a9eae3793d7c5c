"""The pipe protocol between the benchmark and a peer in its own environment, with a scripted
worker (a stand-in for a real peer: it echoes the prompt, refuses beam search, fails on
speculative decoding, and prints to stdout to prove that cannot corrupt a reply)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from benchmarks.peers import PeerError, RemotePeer, Unsupported
from benchmarks.peers.remote import WORKERS

SCRIPTED_WORKER = f'''
import sys
sys.path.insert(0, {str(WORKERS)!r})
from _serve import Worker, serve

class Scripted(Worker):
    def load(self, paths, threads, quantization=None):
        print("a library that prints on stdout")
        self.threads = threads

    def greedy(self, model, prompt, max_new):
        print("noise")
        self.last = {{"threads": self.threads, "model": model}}
        return prompt[:max_new]

    def speculative(self, model, prompt, max_new, k, mode):
        raise RuntimeError("boom")

serve(Scripted())
'''


class ScriptedRemotePeer(RemotePeer):
    name, env, worker = "scripted", "scripted", "scripted"

    def __init__(self, worker_file: Path) -> None:
        self._file = worker_file

    def worker_file(self) -> Path:
        return self._file


@pytest.fixture
def scripted_peer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ScriptedRemotePeer:
    bin_dir = tmp_path / "peers" / "scripted" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").symlink_to(sys.executable)
    script = tmp_path / "scripted.py"
    script.write_text(SCRIPTED_WORKER)
    monkeypatch.setenv("METAGEN_PEERS_DIR", str(tmp_path / "peers"))
    monkeypatch.delenv("METAGEN_BENCH_PEERS", raising=False)
    return ScriptedRemotePeer(script)


def test_scripted_worker_answers_calls_and_reports_counters(scripted_peer):
    assert scripted_peer.available()
    scripted_peer.load({"target": Path("/nowhere")})
    try:
        assert scripted_peer.greedy("target", [5, 6, 7, 8], 3) == [5, 6, 7]
        assert scripted_peer.last["model"] == "target"
        assert scripted_peer.last["threads"] >= 1
        with pytest.raises(Unsupported):
            scripted_peer.beam("target", [1, 2], 2, 4)
        with pytest.raises(PeerError, match="boom"):
            scripted_peer.speculative("target", [1, 2], 4, 2, "draft")
        assert scripted_peer.greedy("target", [9], 5) == [9]  # still serving after a failure
    finally:
        scripted_peer.close()
    assert scripted_peer.proc.poll() is not None


def test_peer_not_named_in_env_is_unavailable(scripted_peer, monkeypatch):
    monkeypatch.setenv("METAGEN_BENCH_PEERS", "ctranslate2")
    assert not scripted_peer.available()


def test_missing_environment_is_unavailable(tmp_path, monkeypatch):
    monkeypatch.setenv("METAGEN_PEERS_DIR", str(tmp_path))
    monkeypatch.delenv("METAGEN_BENCH_PEERS", raising=False)
    assert not ScriptedRemotePeer(tmp_path / "x.py").available()


def test_dead_worker_is_a_peer_error(scripted_peer, tmp_path):
    dead = tmp_path / "dead.py"
    dead.write_text("import sys; sys.exit(3)\n")
    scripted_peer._file = dead
    with pytest.raises(PeerError, match="exited"):
        scripted_peer.load({})
    assert os.path.exists(dead)
