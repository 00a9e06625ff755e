"""A harness that hunts (issue 45, part 7): a generative, stateful test that drives real
``pwe`` processes through random sequences of operations and faults, and after each step
checks pwe's guarantees from the members' own ledger.

The workflow (:data:`WORKFLOW`): node ``a`` (a sweep of N members) reads an input file,
writes its product in two steps (the content it read, then `` whole``) and records each
start and each end in a ledger outside the run directory; node ``b`` (one member per
``a``) reads ``a``'s product and fails unless it is whole. A flag file makes ``a[0]`` fail
(the run halts ``now`` at one failure); its command has a version the harness bumps.

Operations (:class:`Hunt`'s rules): ``pwe run`` (in the foreground, at times stopped by a
fault point: ``PWE_FAULT``, pilot/faults.py), ``pwe submit``, kill -9 of the engine or of
the pilot at a random moment (also while members write products), wait for a run, resume,
retry, cancel, edit the input, edit the command, widen the range, make a[0] fail or not,
a second run while one is live.

Invariants (:meth:`Hunt.check`), over every run whose engine is gone:
- no member completes twice in a run's lineage (a run id: its resumes and retries);
- every member shown done was completed by an attempt that ended ok: in the run's own
  lineage, or in the run it names as the one it reused from, or (complete by its
  products) its product is there;
- the products of done members are whole;
- every attempt that started (the ledger) is in ``pwe trace``;
- a member reused by a run that began after the last edit was made with the input's
  content and the command's version of that run's start.

tests/engine/test_harness.py runs a bounded number of sequences in the suite; bench/soak.py runs
it for a chosen time and writes what it found.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

from helpers import let_time_pass, wait_for
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

ROOT = Path(__file__).resolve().parents[1]
ENV = dict(os.environ, PYTHONPATH=str(ROOT), PWE_CHECKPOINT_EVERY="0.2")

WORKFLOW = """\
name: hunt
halt: {{failed: 1, when: now}}
nodes:
  a:
    parameters: {{i: {{range: [0, {n}]}}}}
    inputs: ["in.txt"]
    products: ["out/a{{{{ i }}}}.txt"]
    run: |
      c=$(cat "$PWE_WORKSPACE/in.txt")
      echo "start $PWE_RUN_ID a $PWE_MEMBER $PWE_ATTEMPT v{version} $c" >> {ledger}
      if [ "$PWE_MEMBER" = 0 ] && [ -e "$PWE_WORKSPACE/fail" ]; then exit 1; fi
      mkdir -p "$PWE_WORKSPACE/out"
      printf '%s' "$c" > "$PWE_WORKSPACE/out/a{{{{ i }}}}.txt"
      sleep 0.{pause}
      printf ' whole' >> "$PWE_WORKSPACE/out/a{{{{ i }}}}.txt"
      echo "done $PWE_RUN_ID a $PWE_MEMBER $PWE_ATTEMPT v{version} $c" >> {ledger}
  b:
    after: [a]
    parameters: {{i: {{range: [0, {n}]}}}}
    run: |
      got=$(cat "$PWE_WORKSPACE/out/a{{{{ i }}}}.txt")
      echo "start $PWE_RUN_ID b $PWE_MEMBER $PWE_ATTEMPT v{version} $got" >> {ledger}
      case "$got" in *" whole") ;; *) echo "bad $PWE_RUN_ID b $PWE_MEMBER $PWE_ATTEMPT v{version} $got" >> {ledger}; exit 3;; esac
      echo "done $PWE_RUN_ID b $PWE_MEMBER $PWE_ATTEMPT v{version} $got" >> {ledger}
"""

#: the fault points a foreground run may be stopped at (pilot/faults.py)
FAULTS = [None, "engine:write:2", "engine:write:5", "engine:tear:3", "engine:rename:1", "engine:rename:3",
          "pilot:write:2", "pilot:write:4", "pilot:tear:3", "engine:fsync:1"]
#: how long one command may take (a run of a few members; room for a busy machine)
STEP = 120


class Hunt(RuleBasedStateMachine):
    """The workspace, the runs made in it, and what the harness did (see the module)."""

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="pwe-hunt-"))
        self.ws = self.dir / "ws"
        self.ws.mkdir()
        self.ledger = self.dir / "ledger"
        self.ledger.touch()
        self.n, self.version, self.content, self.edits = 4, 1, "c1", 0
        (self.ws / "in.txt").write_text(self.content)
        self.write_workflow()
        # the runs made, by their directory's name (r1, r2, ...): what the harness knows of
        # each (its directory; the edits, version and content at its start). The rules'
        # choices depend on this model alone (never on what the processes did), so that
        # Hypothesis can replay and shrink a sequence: a rule on a run that has ended
        # meanwhile does what it can (a kill of nothing, a wait that returns at once)
        self.runs: dict[str, dict] = {}
        self.bg: str | None = None  # the run started in the background and not yet waited for
        self.k = 0
        self.log: list[str] = []

    # -- the workflow and the commands ---------------------------------------------------
    def write_workflow(self) -> None:
        (self.ws / "wf.yaml").write_text(WORKFLOW.format(n=self.n, version=self.version, ledger=self.ledger,
                                                         pause=2))

    def pwe(self, *args: str, env: dict | None = None, timeout: float = STEP) -> subprocess.CompletedProcess:
        self.log.append("pwe " + " ".join(args) + (f"  ({env})" if env else ""))
        return subprocess.run([sys.executable, "-m", "pwe", *args], cwd=self.ws, env={**ENV, **(env or {})},
                              capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)

    def new_run(self) -> tuple[str, Path]:
        self.k += 1
        name = f"r{self.k}"
        d = self.dir / "runs" / name
        self.runs[name] = {"dir": d, "edits": self.edits, "version": self.version, "content": self.content}
        return name, d

    def run_id(self, name: str) -> str | None:
        info = _json(self.runs[name]["dir"] / "run.json")
        return info.get("run_id") if isinstance(info, dict) else None

    def ended(self, name: str) -> None:
        """Wait until the run's engine is gone (it may be already)."""
        d = self.runs[name]["dir"]
        _wait(lambda: engine_pid(d) is None, f"the engine of {name} to end", STEP * 2)

    # -- the operations -------------------------------------------------------------------
    @initialize(background=st.booleans())
    def first(self, background) -> None:
        """Every sequence begins with a run (in the background or not), so that what follows
        has something to act on."""
        if background:
            self.submit()
        else:
            self.run(None, False)

    @precondition(lambda self: self.bg is None)
    @rule(fault=st.sampled_from(FAULTS), fresh=st.booleans())
    def run(self, fault, fresh) -> None:
        name, d = self.new_run()
        args = ["run", "wf.yaml", "--cores", "2", "--workspace", str(self.ws), "--run-dir", str(d)]
        res = self.pwe(*args, *(["--fresh"] if fresh else []), env={"PWE_FAULT": fault} if fault else None)
        assert res.returncode in (0, 1, 2, -9, 137), (res.returncode, res.stderr)
        _no_traceback(res)
        if res.returncode == 2 and "live run" in res.stderr:
            assert not d.exists(), "a refused run made its directory"
        self.ended(name)  # (a run killed by its fault point: its pilot may be about to notice)

    @precondition(lambda self: self.bg is None)
    @rule()
    def submit(self) -> None:
        name, d = self.new_run()
        res = self.pwe("submit", "wf.yaml", "--cores", "2", "--workspace", str(self.ws), "--run-dir", str(d))
        assert res.returncode in (0, 2), (res.returncode, res.stderr)
        _no_traceback(res)
        self.bg = name

    @precondition(lambda self: self.bg is not None)
    @rule()
    def second_run_at_once(self) -> None:
        name, d = self.new_run()
        res = self.pwe("run", "wf.yaml", "--cores", "2", "--workspace", str(self.ws), "--run-dir", str(d))
        _no_traceback(res)
        if res.returncode == 2:
            assert "live run" in res.stderr and not d.exists(), res.stderr

    @precondition(lambda self: self.bg is not None)
    @rule(pause=st.sampled_from([0, 0.1, 0.3, 0.6, 1.0]), pilot_too=st.booleans())
    def kill_engine(self, pause, pilot_too) -> None:
        d = self.runs[self.bg]["dir"]
        _let_time_pass(pause)
        self.log.append(f"kill -9 the engine of {self.bg}" + (" and its pilot" if pilot_too else ""))
        pid = engine_pid(d)
        if pid:
            _kill(pid)
        if pilot_too:
            for p in pilot_pids(d):
                _kill(p)
        self.ended(self.bg)
        self.bg = None

    @precondition(lambda self: self.bg is not None)
    @rule(pause=st.sampled_from([0, 0.1, 0.3, 0.6, 1.0]))
    def kill_pilot(self, pause) -> None:
        _let_time_pass(pause)
        self.log.append(f"kill -9 the last pilot of {self.bg}")
        for p in pilot_pids(self.runs[self.bg]["dir"])[-1:]:
            _kill(p)

    @precondition(lambda self: self.bg is not None)
    @rule()
    def wait(self) -> None:
        self.log.append(f"wait for {self.bg}")
        self.ended(self.bg)
        self.bg = None

    @precondition(lambda self: self.bg is not None)
    @rule()
    def cancel(self) -> None:
        res = self.pwe("cancel", str(self.runs[self.bg]["dir"]))
        _no_traceback(res)
        self.ended(self.bg)
        self.bg = None

    @precondition(lambda self: self.bg is None and bool(self.runs))
    @rule(data=st.data(), budget=st.booleans())
    def resume(self, data, budget) -> None:
        name = data.draw(st.sampled_from(sorted(self.runs)))
        res = self.pwe("resume", str(self.runs[name]["dir"]), "--halt", "100%" if budget else "1")
        assert res.returncode in (0, 1, 2, 3), (res.returncode, res.stderr)
        _no_traceback(res)

    @precondition(lambda self: self.bg is None and bool(self.runs))
    @rule(data=st.data())
    def retry(self, data) -> None:
        name = data.draw(st.sampled_from(sorted(self.runs)))
        res = self.pwe("retry", str(self.runs[name]["dir"]))
        assert res.returncode in (0, 1, 2, 3), (res.returncode, res.stderr)
        _no_traceback(res)

    @rule(what=st.sampled_from(["input", "command", "widen", "fail", "pass"]))
    def edit(self, what) -> None:
        """Edit the input or the command, widen the range, make a[0] fail or not."""
        if what == "fail" or what == "pass":
            self.log.append(f"a[0] fails: {what == 'fail'}")
            flag = self.ws / "fail"
            flag.touch() if what == "fail" else flag.unlink(missing_ok=True)
            return
        self.edits += 1
        if what == "input":
            self.content = f"c{self.edits + 1}"
            (self.ws / "in.txt").write_text(self.content)
        elif what == "command":
            self.version += 1
            self.write_workflow()
        elif self.n < 8:
            self.n += 2
            self.write_workflow()
        self.log.append(f"edit {what}: n={self.n} v{self.version} {self.content}")

    # -- the invariants -------------------------------------------------------------------
    @invariant()
    def check(self) -> None:
        lines = [line.split(" ", 6) for line in self.ledger.read_text().splitlines()]
        done = Counter((w[1], w[2], w[3]) for w in lines if w[0] == "done")
        twice = [k for k, c in done.items() if c > 1]
        assert not twice, f"completed twice in a run's lineage: {twice}\n" + self.story()
        bad = [w for w in lines if w[0] == "bad"]
        assert not bad, f"a dependant read a product that was not whole: {bad}\n" + self.story()
        self.shown: dict[Path, list[dict] | None] = {}  # (each run's `pwe show` once a check)
        self.by_id = {self.run_id(n): r for n, r in self.runs.items()}
        for name, r in self.runs.items():
            if name == self.bg:
                continue  # (live, or about to be: looked at once waited for)
            r.setdefault("edits_at_end", self.edits)  # (the edits it could have seen)
            rid = self.run_id(name)
            if rid is not None:
                self.check_run(rid, r, lines, done)

    def members(self, run_dir: Path) -> list[dict] | None:
        """The run's members as `pwe show --json` says, asked once a check."""
        if run_dir not in self.shown:
            self.shown[run_dir] = _members(run_dir)
        return self.shown[run_dir]

    def check_run(self, rid: str, r: dict, lines: list[list[str]], done: Counter) -> None:
        shown = self.members(r["dir"])
        if shown is None:
            return  # (a run whose making was cut short: nothing to show)
        for m in shown:
            if m.get("state") != "done":
                continue
            node, i = m["node"], str(m["member"])
            if m.get("complete"):
                if node == "a":
                    product = self.ws / "out" / f"a{i}.txt"
                    assert product.exists() and product.read_text().endswith(" whole"), \
                        f"{rid} {node}[{i}] complete by a product not whole\n" + self.story()
                continue
            lender = (m.get("reused_from") or {}).get("run")
            maker = self.maker(lender, node, i) if lender else rid
            assert done[(maker, node, i)] >= 1, f"{rid} {node}[{i}] shown done, made by {maker}: no ok end in " \
                f"its ledger\n" + self.story()
            if lender and node == "a" and r["edits"] == r["edits_at_end"]:
                # (no edit while it ran: what it reused was made with its start's input and command)
                made = [w for w in lines if w[0] == "done" and (w[1], w[2], w[3]) == (maker, node, i)]
                want = [f"v{r['version']}", r["content"]]
                assert made and made[-1][5:] == want, f"{rid} {node}[{i}] reused from {lender}, made with " \
                    f"{made[-1][5:] if made else None}, its own start had {want}\n" + self.story()
        self.check_trace(rid, r["dir"], lines)

    def maker(self, lender: str, node: str, i: str, hops: int = 0) -> str:
        """The run that made what ``lender`` lent: itself, or whoever it reused it from in
        turn (a lent member may have been reused by the lender itself)."""
        if lender not in self.by_id or hops > len(self.runs):
            return lender
        for m in self.members(self.by_id[lender]["dir"]) or []:
            if m["node"] == node and str(m["member"]) == i:
                further = (m.get("reused_from") or {}).get("run")
                return self.maker(further, node, i, hops + 1) if further else lender
        return lender

    def check_trace(self, rid: str, run_dir: Path, lines: list[list[str]]) -> None:
        res = subprocess.run([sys.executable, "-m", "pwe", "trace", str(run_dir), "--json"], cwd=self.ws, env=ENV,
                             capture_output=True, text=True, timeout=STEP)
        if res.returncode != 0:
            return
        traced = {(t["node"], str(t["member"]), str(t["attempt"])) for t in map(json.loads, res.stdout.splitlines())}
        started = {(w[2], w[3], w[4]) for w in lines if w[0] == "start" and w[1] == rid}
        missing = sorted(started - traced)
        assert not missing, f"{rid}: attempts in the ledger missing from pwe trace: {missing}\n" + self.story()

    def story(self) -> str:
        return "steps:\n  " + "\n  ".join(self.log[-40:])

    def teardown(self) -> None:
        for r in self.runs.values():  # (what a failed step left running)
            pid = engine_pid(r["dir"])
            if pid:
                _kill(pid)
            for p in pilot_pids(r["dir"]):
                _kill(p)
        for r in self.runs.values():
            _wait(lambda r=r: engine_pid(r["dir"]) is None, "the engines to end", 60)
        shutil.rmtree(self.dir, ignore_errors=True)


# -- looking at runs ---------------------------------------------------------------------------

def _json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def engine_pid(run_dir: Path) -> int | None:
    """The pid of the engine that holds the run's lock, or None."""
    sys.path.insert(0, str(ROOT))
    from pwe.runstate.locks import EngineLock

    holder = EngineLock(run_dir).holder() if Path(run_dir).exists() else None
    try:
        return int(holder["pid"]) if holder else None
    except (TypeError, ValueError):
        return None


def pilot_pids(run_dir: Path) -> list[int]:
    """The pids the run's pilots said in their ``up`` (oldest first)."""
    out = []
    for events in sorted(Path(run_dir).glob("pilots/p*/events.jsonl"), key=lambda p: int(p.parent.name[1:])):
        try:
            first = events.read_text().split("\n", 1)[0]
            up = json.loads(first)
        except (OSError, ValueError):
            continue
        if up.get("k") == "up" and isinstance(up.get("pid"), int):
            out.append(up["pid"])
    return out


def _phase(run_dir: Path) -> str:
    res = subprocess.run([sys.executable, "-m", "pwe", "status", str(run_dir), "--json"], env=ENV,
                         capture_output=True, text=True, timeout=STEP)
    try:
        return json.loads(res.stdout).get("phase", "")
    except ValueError:
        return ""


def _members(run_dir: Path) -> list[dict] | None:
    res = subprocess.run([sys.executable, "-m", "pwe", "show", str(run_dir), "--json", "--limit", "0"], env=ENV,
                         capture_output=True, text=True, timeout=STEP)
    if res.returncode != 0:
        return None
    return json.loads(res.stdout)


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass


def _let_time_pass(seconds: float) -> None:
    """A random moment of a live run's work (chosen by the strategy): time passes on purpose."""
    let_time_pass(seconds, "a random moment of a live run's work")


def _wait(cond, what: str, timeout: float = STEP) -> None:
    wait_for(cond, timeout, what)


def _no_traceback(res: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in res.stderr, res.stderr
