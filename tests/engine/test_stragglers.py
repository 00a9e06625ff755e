"""Stragglers (``straggler: {factor, after}``, issue 48 item 4): once N members of a node
are done, a member running past F x their median is stopped with reason ``straggler`` and
retried as its policy says. A real run; the members' own ledger is the witness."""

from __future__ import annotations

import json

import pytest

from helpers import ledger_counts, no_traceback, one_line_error, run_cli

from pwe.engine.stragglers import Stragglers

WF = """\
name: straggling
nodes:
  sim:
    parameters: {{i: {{range: [0, 10]}}}}
    straggler: {{factor: 10, after: 5}}
    retry: {{attempts: 2, on: [straggler]}}
    run: >-
      echo "start sim $PWE_MEMBER $PWE_ATTEMPT $(hostname)" >> {ledger};
      if [ $PWE_MEMBER = 9 ] && [ $PWE_ATTEMPT = 1 ]; then sleep 30; else sleep 0.3; fi;
      echo "end sim $PWE_MEMBER $PWE_ATTEMPT $(hostname)" >> {ledger}
"""


def test_a_member_far_past_the_median_is_stopped_and_retried(tmp_path, write):
    ledger = tmp_path / "ledger"
    wf = write(WF.format(ledger=ledger))
    run = tmp_path / "run"
    rc, out, err = run_cli("run", wf, "--cores", "2", "--run-dir", run, cwd=tmp_path, timeout=300)
    assert rc == 0, err
    starts, ends = ledger_counts(ledger, attempts=True)
    # member 9's first attempt started and never ended on its own; its second did; every
    # other member ran once, in its first attempt
    assert {k[:3]: n for k, n in starts.items()} == {**{("sim", str(i), "1"): 1 for i in range(10)},
                                                     ("sim", "9", "2"): 1}
    assert {k[:3] for k in ends} == {("sim", str(i), "1") for i in range(9)} | {("sim", "9", "2")}
    rc, out, err = run_cli("trace", run, "--json", cwd=tmp_path)
    first = next(json.loads(line) for line in out.splitlines()
                 if json.loads(line)["member"] == 9 and json.loads(line)["attempt"] == 1)
    assert first["reason"] == "straggler" and first["state"] == "failed", first
    assert first["why"].startswith("a straggler: ran ") and "10 x the median" in first["why"], first
    # stopped long before its 30 s: at its limit (10 x about 0.3 s: a member of 0.3 s slowed
    # threefold by a busy machine is still under it), plus the pilot's round
    assert first["duration"] < 20, first


@pytest.mark.parametrize("value, said", [
    ("{factor: 1}", "over 1"), ("{factor: 0.5, after: 3}", "over 1"), ("{factor: 3, after: 0}", "at least 1"),
    ("{factor: 3, after: -2}", "at least 1"), ("{factor: 3, after: 1000000000000}", "after"),
    ("{factor: x}", "a number"), ("{factor: .nan}", "over 1"), ("{factor: 3, every: 2}", "every"),
    ("{after: 3}", "factor"),
])
def test_a_bad_straggler_is_one_line_at_validate(tmp_path, write, value, said):
    wf = write(f"name: bad\nnodes:\n  a:\n    straggler: {value}\n    run: 'true'\n")
    err = one_line_error(*run_cli("validate", wf, cwd=tmp_path))
    assert err.startswith(f"{wf}:4:") and said in err, err
    no_traceback(err)


class _Pilot:
    def __init__(self, pid):
        self.id, self.alive, self.sent = pid, True, []
        self.state = type("S", (), {"takes_work": True})()

    def send(self, msg):
        self.sent.append(msg)


def test_the_limit_waits_for_n_done_follows_the_median_and_is_sent_once_a_change():
    from types import SimpleNamespace

    rule = SimpleNamespace(factor=3, after=4)
    plan = SimpleNamespace(nodes={"a": SimpleNamespace(straggler=rule), "b": SimpleNamespace(straggler=None)})
    p1 = _Pilot("p1")
    s = Stragglers(plan, {"p1": p1})
    for dt in (2.0, 2.0, 2.0):
        s.done("a", dt)
        s.done("b", 100.0)  # (a node without straggler: counted nowhere)
    s.done("a", float("nan"))  # (a damaged figure: not counted)
    s.bring()
    assert s.limits == {} and p1.sent == []
    s.done("a", 4.0)  # the 4th: median 2.0 of (2, 2, 2, 4)
    s.bring()
    s.bring()  # (sent once)
    assert p1.sent == [{"k": "straggle", "n": "a", "s": 6.0, "why": "3 x the median 2 s of 4 members done"}]
    for _ in range(4):
        s.done("a", 10.0)  # the median moves to 7: told again
    s.bring()
    assert [m["s"] for m in p1.sent] == [6.0, 21.0]
    p2 = _Pilot("p2")  # a pilot that comes later is sent the limit in force
    s.pilots["p2"] = p2
    s.bring()
    assert [m["s"] for m in p2.sent] == [21.0] and len(p1.sent) == 2
    s2 = Stragglers(SimpleNamespace(nodes={"q": SimpleNamespace(straggler=SimpleNamespace(factor=2, after=1))}), {})
    s2.done("q", 0.01)
    assert s2.limits["q"][0] == 1.0  # (at least a second)
