"""Results checked (issue 49 item 4): ``products:`` that say ``nonEmpty`` or ``minBytes``, and
a node's ``validate``. A member that exits 0 with a result that does not pass fails with
reason ``invalid``, is retried as its policy says, and is never reused nor taken as complete
by its products. Real runs; the members' own ledger (a line each attempt appends as it
runs) is the witness of what ran."""

from __future__ import annotations

import json
from pathlib import Path

from helpers import ledger_counts, mdir, no_traceback, output, run_cli, show


def run(wf: Path, cwd: Path, run_dir: Path, *extra) -> tuple[int, str]:
    rc, out, err = run_cli("run", wf, "--cores", "2", "--run-dir", run_dir, *extra, cwd=cwd, timeout=300)
    no_traceback(err)
    return rc, err


def trace(run_dir: Path) -> dict[tuple[str, int, int], dict]:
    rc, out, err = run_cli("trace", run_dir, "--json", cwd=run_dir.parent)
    assert rc == 0, err
    recs = [json.loads(line) for line in out.splitlines()]
    return {(r["node"], r["member"], r["attempt"]): r for r in recs}


def attempts(ledger: Path) -> dict[tuple[str, str], list[str]]:
    """Each member's attempts as its own ledger lines say them: (node, index) -> [attempt, ...]."""
    starts, _ = ledger_counts(ledger, attempts=True)
    out: dict[tuple[str, str], list[str]] = {}
    for (node, i, a), n in sorted(starts.items()):
        out.setdefault((node, i), []).extend([a] * n)
    return out


# empty: its first attempt writes an empty product, its second "x" (retried: on invalid);
# once: the same, but its policy retries only oom (invalid is not retried); short: minBytes 4
SIZES = """\
name: sizes
nodes:
  empty:
    parameters: {{i: [0, 1]}}
    retry: {{attempts: 3, on: [invalid]}}
    products: [{{path: "e/{{{{ i }}}}.txt", nonEmpty: true}}]
    run: |
      echo "start empty $PWE_MEMBER $PWE_ATTEMPT" >> {ledger}
      mkdir -p "$PWE_WORKSPACE/e"
      if [ "$PWE_ATTEMPT" = 1 ]; then : > "$PWE_WORKSPACE/e/{{{{ i }}}}.txt"; else echo x > "$PWE_WORKSPACE/e/{{{{ i }}}}.txt"; fi
  once:
    retry: {{attempts: 3, on: [oom]}}
    products: [{{path: "o.txt", nonEmpty: true}}]
    run: |
      echo "start once 0 $PWE_ATTEMPT" >> {ledger}
      : > "$PWE_WORKSPACE/o.txt"
  short:
    parameters: {{n: [3, 4]}}
    products: ["s/{{{{ n }}}}.name", {{path: "s/{{{{ n }}}}.dat", minBytes: 4}}]
    run: |
      echo "start short $PWE_MEMBER $PWE_ATTEMPT" >> {ledger}
      mkdir -p "$PWE_WORKSPACE/s" && touch "$PWE_WORKSPACE/s/{{{{ n }}}}.name"
      head -c {{{{ n }}}} /dev/zero > "$PWE_WORKSPACE/s/{{{{ n }}}}.dat"
"""


def test_an_empty_or_short_product_fails_invalid_and_is_retried_as_its_policy_says(tmp_path, write):
    led, ws, r1 = tmp_path / "ledger", tmp_path / "ws", tmp_path / "r1"
    ws.mkdir()
    wf = write(SIZES.format(ledger=led))
    rc, err = run(wf, tmp_path, r1, "--workspace", ws)
    assert rc == 1, err
    # from the ledger: empty's members ran twice each (the first wrote nothing: retried on
    # invalid), once's once (its policy retries oom only), short's once each
    assert attempts(led) == {("empty", "0"): ["1", "2"], ("empty", "1"): ["1", "2"], ("once", "0"): ["1"],
                             ("short", "0"): ["1"], ("short", "1"): ["1"]}
    states = {(m["node"], m["member"]): m for m in show(r1)}
    assert {k: m["state"] for k, m in states.items()} == {
        ("empty", 0): "done", ("empty", 1): "done", ("once", 0): "failed", ("short", 0): "failed",
        ("short", 1): "done"}
    tr = trace(r1)
    first = tr[("empty", 0, 1)]
    assert (first["state"], first["reason"], first["exit_status"]) == ("failed", "invalid", 1), first
    assert first["why"] == f"exited 0, but its product {ws.resolve()}/e/0.txt is empty (0 bytes; nonEmpty)"
    assert (tr[("empty", 0, 2)]["state"], tr[("empty", 0, 2)]["reason"]) == ("done", "exit")
    assert states[("once", 0)]["reason"] == "invalid"
    short = states[("short", 0)]
    assert short["reason"] == "invalid", short
    assert short["why"] == f"exited 0, but its product {ws.resolve()}/s/3.dat has 3 bytes, fewer than the 4 it must have"
    rc, out, err = run_cli("failures", r1, "--json", cwd=tmp_path)
    assert rc == 0, err
    assert {r["reason"]: r["members"] for r in json.loads(out)["by_reason"]} == {"invalid": 2}, out


def test_the_scan_takes_no_empty_or_short_product_as_complete(tmp_path, write):
    led, ws = tmp_path / "ledger", tmp_path / "ws"
    (ws / "e").mkdir(parents=True)
    (ws / "s").mkdir()
    (ws / "e" / "0.txt").write_text("")  # there, but empty: not made
    (ws / "e" / "1.txt").write_text("made\n")
    for n in (3, 4):  # both there; 3 is one byte short of its minBytes, 4 is not
        (ws / "s" / f"{n}.name").touch()
        (ws / "s" / f"{n}.dat").write_bytes(b"z" * n)
    wf = write(SIZES.format(ledger=led))
    rc, out, err = run_cli("plan", wf, "--workspace", ws, "--json", cwd=tmp_path)
    assert rc == 0, err
    complete = {n["id"]: n["complete"] for n in json.loads(out)["nodes"]}
    assert (complete["empty"], complete["short"]) == (1, 1), complete
    rc, err = run(wf, tmp_path, tmp_path / "r1", "--workspace", ws)
    runs = attempts(led)
    assert ("empty", "1") not in runs and ("short", "1") not in runs, runs  # complete: not run
    assert runs[("empty", "0")] == ["1", "2"] and runs[("short", "0")] == ["1"], runs


# check: its members write a product; the validate says whether it is good: a line in the
# ledger with where it ran, its environment and its arguments, then the verdict the
# product's content gives
VALIDATED = """\
name: validated
properties: {{odd: {odd}}}
nodes:
  check:
    parameters: {{i: [0, 1, 2]}}
    env: {{FOO: bar}}
    products: ["v/{{{{ i }}}}.txt"]
    run: |
      echo "start check $PWE_MEMBER $PWE_ATTEMPT" >> {ledger}
      mkdir -p "$PWE_WORKSPACE/v"
      if [ {{{{ i }}}} = 1 ]; then echo bad > "$PWE_WORKSPACE/v/{{{{ i }}}}.txt"; else echo good > "$PWE_WORKSPACE/v/{{{{ i }}}}.txt"; fi
      if [ {{{{ i }}}} = 2 ]; then exit 3; fi
    validate: >-
      echo "validate $PWE_NODE $PWE_MEMBER $PWE_ATTEMPT $PWE_PARAM_I $FOO $(pwd)" >> {ledger};
      sh -c 'echo "args $#: $1" >> "$0"' {ledger} {{{{ odd }}}};
      echo "the validate speaks";
      grep -q good "$PWE_WORKSPACE/v/{{{{ i }}}}.txt"
"""


def test_validate_runs_after_a_member_that_exits_0_in_its_directory_with_its_environment(tmp_path, write):
    led, ws, r1 = tmp_path / "ledger", tmp_path / "ws", tmp_path / "r1"
    ws.mkdir()
    pwned = tmp_path / "pwned"
    odd = f"a b; touch {pwned} $(id) `id` \"q\" 'q'"
    wf = write(VALIDATED.format(ledger=led, odd=json.dumps(odd)))
    rc, err = run(wf, tmp_path, r1, "--workspace", ws)
    assert rc == 1, err
    lines = [line.split(" ", 6) for line in led.read_text().splitlines()]
    checked = {int(w[2]): w for w in lines if w[0] == "validate"}
    # member 2 exited 3: its validate never ran; 0 and 1 ran it, in their own directories
    assert sorted(checked) == [0, 1], lines
    for i, w in checked.items():
        assert w[1:6] == ["check", str(i), "1", str(i), "bar"], w
        assert Path(w[6]).resolve() == mdir(r1, "check", i).resolve(), w
    # the value, with spaces, quotes, ';', $(...) and backquotes, reached it as one literal argument
    assert [line for line in led.read_text().splitlines() if line.startswith("args ")] == [f"args 1: {odd}"] * 2
    assert not pwned.exists()
    states = {m["member"]: m for m in show(r1)}
    assert (states[0]["state"], states[0].get("reason")) == ("done", None), states[0]
    assert (states[1]["state"], states[1]["reason"], states[1]["exit_status"]) == ("failed", "invalid", 1)
    assert states[1]["why"] == "its validate exited 1: the result is not good", states[1]
    assert (states[2]["state"], states[2]["exit_status"], states[2].get("reason")) == ("failed", 3, None), states[2]
    # its output went where the member's own goes; the marker is not one of its outputs
    assert "the validate speaks" in output(r1, "check", 1)
    assert states[1]["outputs"] == {}
    assert "pwe: the validate exited 1" in output(r1, "check", 1, "stderr")
    rc, out, err = run_cli("explain", r1, "check:1", cwd=tmp_path)
    assert rc == 0 and "invalid (its validate exited 1" in out, out + err


def test_the_validates_mark_is_never_an_output_of_a_member_that_exits_0(tmp_path, write):
    """``_pwe_invalid`` is pwe's own name (the validate's mark): a member that exits 0 with it
    in its outputs is done, and the name is taken out, as the engine takes it out of an end
    only the pilot's guardian saw (pwe.engine.recovery.judged), where the pilot kept it."""
    wf = write("""
name: mark
nodes:
  m:
    parameters: {i: [0]}
    run: printf '_pwe_invalid=5\\nx=1\\n' >> "$PWE_OUTPUTS"
""")
    rc, out, err = run_cli("run", wf, "--run-dir", tmp_path / "r", cwd=tmp_path)
    assert rc == 0, out + err
    (m,) = show(tmp_path / "r")
    assert (m["state"], m["outputs"]) == ("done", {"x": "1"}), m


def test_an_invalid_member_is_never_lent_nor_complete_by_its_products(tmp_path, write):
    """Run 1: member 1's product is there but its validate fails (invalid). Run 2 of the same
    workflow in the same workspace (the workflow's directory): member 0 is not run again
    (complete, or reused); member 1 runs again, although its product is there: it is not
    lent, and its product is not taken as complete."""
    led = tmp_path / "ledger"
    wf = write(f"""\
name: lender
nodes:
  make:
    parameters: {{i: [0, 1]}}
    products: [{{path: "m/{{{{ i }}}}.txt", nonEmpty: true}}]
    run: |
      echo "start make $PWE_MEMBER $PWE_ATTEMPT" >> {led}
      mkdir -p "$PWE_WORKSPACE/m" && echo "made {{{{ i }}}}" > "$PWE_WORKSPACE/m/{{{{ i }}}}.txt"
    validate: test {{{{ i }}}} = 0 || test -e "$PWE_WORKSPACE/fixed"
""")
    rc, err = run(wf, tmp_path, tmp_path / "pwe-runs" / "r1")
    assert rc == 1, err
    assert attempts(led) == {("make", "0"): ["1"], ("make", "1"): ["1"]}
    assert (tmp_path / "m" / "1.txt").read_text() == "made 1\n"  # (there, and not empty)
    (tmp_path / "fixed").touch()
    rc, err = run(wf, tmp_path, tmp_path / "pwe-runs" / "r2")
    assert rc == 0, err
    assert attempts(led) == {("make", "0"): ["1"], ("make", "1"): ["1", "1"]}  # 1 ran again, 0 did not


def test_a_changed_validate_makes_members_run_again_and_plan_explain_says_so(tmp_path, write):
    led = tmp_path / "ledger"
    text = f"""\
name: revalidated
nodes:
  calc:
    parameters: {{i: [0, 1]}}
    run: echo "start calc $PWE_MEMBER $PWE_ATTEMPT" >> {led}
    validate: VALIDATE
"""
    wf = write(text.replace("VALIDATE", "test -n {{ i }}"))
    rc, err = run(wf, tmp_path, tmp_path / "pwe-runs" / "r1")
    assert rc == 0, err
    rc, err = run(wf, tmp_path, tmp_path / "pwe-runs" / "r2")
    assert rc == 0, err
    assert attempts(led) == {("calc", "0"): ["1"], ("calc", "1"): ["1"]}  # reused: run once
    wf.write_text(text.replace("VALIDATE", "test -n {{ i }} && true"))
    rc, out, err = run_cli("plan", wf, "--explain", "--json", cwd=tmp_path)
    assert rc == 0, err
    node = json.loads(out)["nodes"][0]
    assert node["reused"] == 0 and node["changes"][0]["reason"] == "validate changed", node
    rc, err = run(wf, tmp_path, tmp_path / "pwe-runs" / "r3")
    assert rc == 0, err
    assert attempts(led) == {("calc", "0"): ["1", "1"], ("calc", "1"): ["1", "1"]}


ORPHANED = """\
name: orphaned
nodes:
  made:
    parameters: {{i: [0, 1]}}
    retry: {{attempts: 2, on: [invalid]}}
    products: [{{path: "m/{{{{ i }}}}.txt", nonEmpty: true}}]
    run: |
      echo "start made $PWE_MEMBER $PWE_ATTEMPT" >> {ledger}
      while [ ! -e {gate} ]; do sleep 0.05; done
      mkdir -p "$PWE_WORKSPACE/m"
      if [ "$PWE_MEMBER$PWE_ATTEMPT" = 01 ]; then : > "$PWE_WORKSPACE/m/0.txt"; else echo x > "$PWE_WORKSPACE/m/{{{{ i }}}}.txt"; fi
      echo "end made $PWE_MEMBER $PWE_ATTEMPT" >> {ledger}
"""


def test_an_end_only_the_guardian_saw_has_its_products_checked(tmp_path, write):
    """kill -9 of the pilot while both members run; they end in the grace its guardian gives
    them, so their ends come from the guardian, not the pilot. The engine judges them as the
    pilot would have: member 0 left an empty product (nonEmpty), so its exit 0 is
    ``invalid`` and it runs again; member 1's stands. From the members' own ledger: each
    attempt once, member 0 twice, member 1 once."""
    from helpers import read_journal, run_killing_its_pilot

    led, gate, run_dir = tmp_path / "ledger", tmp_path / "gate", tmp_path / "run"
    wf = write(ORPHANED.format(ledger=led, gate=gate))
    rc, err = run_killing_its_pilot(wf, run_dir, tmp_path, led, 2, gate)
    assert rc == 0, err
    assert attempts(led) == {("made", "0"): ["1", "2"], ("made", "1"): ["1"]}
    recs = read_journal(run_dir)
    notes = [r["what"] for r in recs if r["e"] == "note" and "from the pilot's guardian" in r.get("what", "")]
    assert len(notes) == 2, notes  # (both ends from the guardian)
    first = next(r for r in recs if r["e"] == "end" and r["m"] == 0 and r["a"] == 1)
    assert (first["rc"], first.get("reason")) == (1, "invalid"), first
    assert "m/0.txt is empty (0 bytes; nonEmpty)" in first["why"], first
    assert {(m["member"], m["state"]) for m in show(run_dir)} == {(0, "done"), (1, "done")}
