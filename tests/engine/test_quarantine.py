"""Quarantine (maxLosses): a member that was running when its pilot was lost maxLosses times
is not run again; the rest of the sweep finishes; status, show and the trace say it;
`pwe retry -q state=quarantined` releases it. The pilot is killed for real (kill -9 by the
member itself); the members' own ledger is the witness."""

from __future__ import annotations

import json

import pytest

from helpers import by_key, ledger_counts, no_traceback, pwe, read_journal, show, status

KILLER = """\
name: killer
defaults: {{maxLosses: {losses}}}
properties: {{ledger: {ledger}, tame: {tame}}}
nodes:
  sweep:
    parameters: {{i: {{range: [0, 8]}}}}
    run: |
      echo "start sweep $PWE_MEMBER $PWE_ATTEMPT" >> {{{{ ledger }}}}
      if [ $PWE_MEMBER -eq 3 ] && [ ! -e {{{{ tame }}}} ]; then kill -9 $PPID; sleep 30; fi
      echo "end sweep $PWE_MEMBER $PWE_ATTEMPT" >> {{{{ ledger }}}}
"""


@pytest.mark.parametrize("losses", [2, 1])
def test_a_member_that_kills_its_pilot_is_started_max_losses_times_then_quarantined(tmp_path, write, losses):
    ledger, tame = tmp_path / "ledger", tmp_path / "tame"
    wf = write(KILLER.format(losses=losses, ledger=ledger, tame=tame))
    run = tmp_path / "run"
    # one core: the killer is the only member running when its pilot dies (every member
    # running then is counted as present at the loss)
    rc, out, err = pwe("run", wf, "--cores", "1", "--run-dir", run, cwd=tmp_path, timeout=300)
    assert rc == 1, err
    no_traceback(err)
    starts, ends = ledger_counts(ledger)
    assert starts[("sweep", "3")] == losses, starts
    assert ("sweep", "3") not in ends
    assert all(ends[("sweep", str(i))] == 1 for i in range(8) if i != 3), ends
    recs = by_key(show(run))
    assert recs[("sweep", 3)]["state"] == "quarantined" and recs[("sweep", 3)]["reason"] == "quarantined"
    assert "quarantined" in recs[("sweep", 3)]["why"]
    assert all(recs[("sweep", i)]["state"] == "done" for i in range(8) if i != 3)
    st = status(run)
    assert st["totals"]["quarantined"] == 1 and st["totals"]["done"] == 7
    assert "1 quarantined" in err
    journal = read_journal(run)
    lost = [r for r in journal if r["e"] == "unassign" and r.get("lost")]
    assert [(r["n"], r["m"]) for r in lost] == [("sweep", 3)] * losses
    assert len([r for r in journal if r["e"] == "pilot"]) == losses + 1  # (the last finishes the rest)

    rc, out, err = pwe("trace", run, "--format", "json", cwd=tmp_path)
    assert rc == 0, err
    attempts = [r for r in map(json.loads, out.splitlines()) if r["member"] == 3]  # (JSON lines)
    assert [r["reason"] for r in attempts] == ["lost"] * (losses - 1) + ["quarantined"]

    rc, out, err = pwe("status", run, cwd=tmp_path)
    assert rc == 0 and "quarantined" in out.splitlines()[1], out
    # pwe failures: the member lost with its pilot, by reason and on its host (the light
    # pass over the journal and the trace agree: each loss an attempt that failed there)
    rc, out, err = pwe("failures", run, "--json", cwd=tmp_path)
    doc = json.loads(out)
    assert {r["reason"]: r["members"] for r in doc["by_reason"]} == {"lost": 1}
    assert [(r["failed"], r["done"]) for r in doc["by_host"]] == [(losses, 7)], doc["by_host"]
    from pwe.observe.failures import _by_host
    from pwe.observe.trace import load

    assert _by_host(load(run)[3]) == doc["by_host"]

    tame.write_text("")  # what killed the pilot is fixed: released, it runs once more and is done
    rc, out, err = pwe("retry", run, "-q", "state=quarantined", cwd=tmp_path, timeout=300)
    assert rc == 0, err
    starts, ends = ledger_counts(ledger)
    assert starts[("sweep", "3")] == losses + 1 and ends[("sweep", "3")] == 1
    assert all(r["state"] == "done" for r in show(run))


def test_max_losses_bad_input_is_one_line(tmp_path, write):
    for bad, phrase in (("0", "at least 1"), ("-1", "at least 1"), ("two", "whole number"), ("1.5", "whole number")):
        wf = write(f"name: q\ndefaults:\n  maxLosses: {bad}\nnodes:\n  a: {{run: 'true'}}\n")
        rc, out, err = pwe("validate", wf, cwd=tmp_path)
        assert rc == 2, err
        no_traceback(err)
        assert f"{wf}:3:" in err and "maxLosses" in err and phrase in err, err
        assert len(err.strip().splitlines()) == 1, err
