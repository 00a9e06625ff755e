"""Results checked, as an invariant over a random run (issue 49 item 4; the examples are in
test_results_checked.py): 24 members, each attempt's outcome drawn at random (a good
product, an empty one, one its validate refuses, none at all), the pilot killed -9 at a
random moment, so that some ends come from its guardian and the rest from its pilots. From
the members' own ledger and the journal, whatever was drawn:

- every attempt that started ended once, and none started twice (exactly once);
- a member's attempts are 1..k, k the first whose result was good (else its last, 3): one
  that was not good is ``invalid`` and retried, never taken as done;
- a member is done exactly when its last attempt's result was good; its product then holds
  what that attempt wrote.
"""

from __future__ import annotations

import random
from collections import Counter

from helpers import read_journal, run_killing_its_pilot, show

OUTCOMES = ("good", "empty", "bad", "none")
N, ATTEMPTS = 24, 3

WF = """\
name: invariant
nodes:
  m:
    parameters: {{i: {{range: [0, {n}]}}}}
    retry: {{attempts: {attempts}, on: [invalid]}}
    products: [{{path: "out/{{{{ i }}}}.txt", nonEmpty: true}}]
    validate: test "$(cat "$PWE_WORKSPACE/out/{{{{ i }}}}.txt")" != bad
    run: |
      echo "start $PWE_MEMBER $PWE_ATTEMPT" >> {ledger}
      [ "$PWE_MEMBER" -lt 2 ] && while [ ! -e {gate} ]; do sleep 0.05; done
      what=$(sed -n "$(( PWE_MEMBER * {attempts} + PWE_ATTEMPT ))p" {plan})
      mkdir -p "$PWE_WORKSPACE/out"
      case $what in
        good) echo "good $PWE_ATTEMPT" > "$PWE_WORKSPACE/out/{{{{ i }}}}.txt";;
        empty) : > "$PWE_WORKSPACE/out/{{{{ i }}}}.txt";;
        bad) echo bad > "$PWE_WORKSPACE/out/{{{{ i }}}}.txt";;
        none) rm -f "$PWE_WORKSPACE/out/{{{{ i }}}}.txt";;
      esac
      echo "end $PWE_MEMBER $PWE_ATTEMPT $what" >> {ledger}
"""


def test_only_a_good_result_is_done_and_each_attempt_runs_once_whatever_was_drawn(tmp_path, write):
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    plan = [[rng.choice(OUTCOMES) for _ in range(ATTEMPTS)] for _ in range(N)]
    plan_file, ledger, gate = tmp_path / "plan", tmp_path / "ledger", tmp_path / "gate"
    plan_file.write_text("".join(f"{what}\n" for row in plan for what in row))
    wf = write(WF.format(n=N, attempts=ATTEMPTS, ledger=ledger, gate=gate, plan=plan_file))
    # members 0 and 1 wait for the gate: both run when the pilot is killed, their ends the guardian's
    rc, err = run_killing_its_pilot(wf, tmp_path / "run", tmp_path, ledger, 2, gate)
    said = f"seed {seed}, plan {plan}"
    assert rc in (0, 1), (said, err)
    lines = [line.split() for line in ledger.read_text().splitlines()]
    starts = Counter((int(w[1]), int(w[2])) for w in lines if w[0] == "start")
    ends = {(int(w[1]), int(w[2])): w[3] for w in lines if w[0] == "end"}
    assert set(starts.values()) == {1}, said  # (no attempt started twice)
    assert set(ends) == set(starts), said  # (every attempt that started ended: none lost in this run)
    states = {r["member"]: r for r in show(tmp_path / "run")}
    journal = {(r["m"], r["a"]): r for r in read_journal(tmp_path / "run") if r["e"] == "end"}
    for i, row in enumerate(plan):
        k = next((a for a, what in enumerate(row, start=1) if what == "good"), ATTEMPTS)
        ran = sorted(a for m, a in starts if m == i)
        assert ran == list(range(1, k + 1)), (i, ran, said)
        for a in ran:
            end = journal[(i, a)]
            if row[a - 1] == "good":
                assert end["rc"] == 0 and end.get("reason") in (None, "exit"), (i, a, end, said)
            else:
                assert end["rc"] != 0 and end.get("reason") == "invalid", (i, a, end, said)
        good = row[k - 1] == "good"
        assert (states[i]["state"] == "done") == good, (i, states[i], said)
        if good:
            assert (tmp_path / "out" / f"{i}.txt").read_text() == f"good {k}\n", (i, said)
    assert rc == (0 if all("good" in row for row in plan) else 1), said
    notes = [r for r in read_journal(tmp_path / "run") if r["e"] == "note" and "guardian" in r.get("what", "")]
    assert len(notes) >= 2, notes  # (the gated members' ends came from the guardian)
