"""``workloads.rounds`` with scripted peers (named objects whose calls are logged): peers take
turns within every round, each round starts one peer further along, a failing peer leaves the
rounds and is recorded, the others keep every run."""

from __future__ import annotations

from dataclasses import dataclass, field

from benchmarks.peers import PeerError, Unsupported
from benchmarks.workloads import rounds


@dataclass
class ScriptedPeer:
    name: str
    log: list[str]
    fail_on_call: int | None = None  # 1-based call number that raises
    error: type[Exception] = PeerError
    calls: int = field(default=0)

    def work(self, phase: str) -> str:
        self.calls += 1
        if self.calls == self.fail_on_call:
            raise self.error(f"{self.name} died")
        self.log.append(f"{self.name}.{phase}")
        return f"{self.name}.{phase}#{self.calls}"


def phases(peer):
    return (lambda: peer.work("a"), lambda: peer.work("b"))


def test_scripted_peers_take_turns_and_each_round_starts_one_further():
    log: list[str] = []
    peers = [ScriptedPeer(n, log) for n in "xyz"]
    got = rounds(peers, phases, repeats=4, warmup=True, not_run=[], workload="A")
    assert log[:6] == ["x.a", "x.b", "y.a", "y.b", "z.a", "z.b"]  # the warm-up, in order
    starts = [log[6 + 6 * r] for r in range(4)]
    assert starts == ["x.a", "y.a", "z.a", "x.a"]
    assert log[6:12] == ["x.a", "x.b", "y.a", "y.b", "z.a", "z.b"]
    assert log[12:18] == ["y.a", "y.b", "z.a", "z.b", "x.a", "x.b"]
    for name in "xyz":
        times, last = got[name]
        assert [len(t) for t in times] == [4, 4]
        assert all(t >= 0 for ts in times for t in ts)
        assert last == [f"{name}.a#9", f"{name}.b#10"]  # 5 runs of 2 phases each


def test_a_scripted_peer_failing_mid_rounds_is_recorded_and_leaves():
    log: list[str] = []
    peers = [ScriptedPeer("x", log), ScriptedPeer("y", log, fail_on_call=5),
             ScriptedPeer("z", log, fail_on_call=1, error=Unsupported)]
    not_run: list[dict] = []
    got = rounds(peers, phases, repeats=3, warmup=True, not_run=not_run, workload="D ngram")
    assert set(got) == {"x"}
    assert [len(t) for t in got["x"][0]] == [3, 3]
    assert not_run == [{"workload": "D ngram", "peer": "z", "why": "unsupported"},
                       {"workload": "D ngram", "peer": "y", "why": "y died"}]
    assert log.count("y.a") == 2 and "z.a" not in log  # y: warm-up and round 1, then it died


def test_no_warmup_times_every_run():
    log: list[str] = []
    got = rounds([ScriptedPeer("x", log)], phases, repeats=2, warmup=False, not_run=[],
                 workload="B")
    assert log == ["x.a", "x.b", "x.a", "x.b"]
    assert [len(t) for t in got["x"][0]] == [2, 2]
