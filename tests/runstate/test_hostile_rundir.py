"""A run directory whose contents are hostile: every reader is bounded (pwe/base/regular.py,
pilot/bounded.py). A real run is made with the real CLI, then damaged for real: records
forged with the journal's own checksum that claim members the plan does not have, a
gzip bomb, a truncated gzip and a not-gzip file as sealed spools, a line with no end, a
FIFO, a link to /dev/zero and a link out of the run directory in place of a spool, run.json
of the wrong shape. Each command is the real ``pwe`` in a subprocess under a memory limit
and a hang guard: it answers (0 with a warning where replay can go on, else 2 with one
line), never a traceback, a MemoryError, a hang or a bare "Aborted!"; and a resume leaves
the members' own ledger as it was (nothing lost, nothing run twice)."""

import json
import os
import resource
import shutil
import subprocess
import sys
import zlib
from collections import Counter
from pathlib import Path

import pytest

from helpers import ROOT
from pwe.runstate.journal import encode

MEMORY = 512 << 20  # (the commands' address space: a reader that holds a bomb (256 MiB) whole, and one copy, fails)
N = 6


def _limit():
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))


def pwe(*args, cwd):
    env = dict(os.environ, PYTHONPATH=str(ROOT), NO_COLOR="1")
    proc = subprocess.run([sys.executable, "-m", "pwe", *map(str, args)], capture_output=True, text=True, cwd=cwd,
                          timeout=180, env=env, stdin=subprocess.DEVNULL, preexec_fn=_limit)
    said = proc.stdout + proc.stderr
    assert "Traceback" not in said and "MemoryError" not in said and "Aborted!" not in said, said[-3000:]
    # (what a damaged file holds is quoted as text: no control character reaches the terminal)
    assert not [c for c in said if ord(c) < 32 and c not in "\n\t" or 0x7f <= ord(c) <= 0x9f], repr(said[-3000:])
    return proc.returncode, proc.stdout, proc.stderr


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """A finished run of N members, its pilot's spool files sealed; each member appends its
    end to a ledger of its own."""
    base = tmp_path_factory.mktemp("made")
    (base / "wf.yaml").write_text(f"""
name: hostile
nodes:
  a:
    parameters: {{i: {{range: [0, {N}]}}}}
    run: echo "$PWE_NODE $PWE_MEMBER $PWE_ATTEMPT" >> ../../../ledger
""")
    env = dict(os.environ, PYTHONPATH=str(ROOT), PWE_SEAL_ABOVE="0")
    proc = subprocess.run([sys.executable, "-m", "pwe", "run", "wf.yaml", "--run-dir", "run"], cwd=base, env=env,
                          capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    assert (base / "run" / "pilots" / "p1" / "events.jsonl.gz").exists()
    return base


@pytest.fixture
def run(made, tmp_path):
    """A copy of the made run (and its ledger) to damage."""
    shutil.copytree(made / "run", tmp_path / "run", symlinks=True)
    shutil.copy(made / "wf.yaml", tmp_path / "wf.yaml")
    shutil.copy(made / "ledger", tmp_path / "ledger")
    return tmp_path / "run"


def ledger(run_dir: Path) -> Counter:
    return Counter(tuple(line.split()[:2]) for line in (run_dir.parent / "ledger").read_text().splitlines())


def forge(run_dir: Path, *records):
    """Append records that pass the journal's checksum (its own encode)."""
    with open(run_dir / "journal.jsonl", "ab") as fh:
        for r in records:
            fh.write(encode(r))


FORGED = {
    "assign of 10^12 members": {"e": "assign", "n": "a", "m": 0, "a": 2, "p": "p1", "t": 1.0, "len": 10 ** 12},
    "member 10^12": {"e": "end", "n": "a", "m": 10 ** 12, "a": 1, "p": "p1", "t": 1.0, "rc": 0, "dt": 1.0},
    "negative member": {"e": "start", "n": "a", "m": -1, "a": 1, "p": "p1", "t": 1.0},
    "text for a member": {"e": "end", "n": "a", "m": "x", "a": 1, "p": "p1", "t": 1.0, "rc": 0},
    "text for a time": {"e": "assign", "n": "a", "m": 2, "a": 9, "p": "p1", "t": "soon"},
    "attempt 10^12": {"e": "assign", "n": "a", "m": 1, "a": 10 ** 12, "p": "p1", "t": 1.0},
    "unknown node": {"e": "assign", "n": "zz", "m": 1, "a": 1, "p": "p1", "t": 1.0},
    "ends of 10^12 rows' member": {"e": "ends", "n": "a", "a": 1, "p": "p1", "m": [10 ** 12], "t": [1.0],
                                   "dt": [1.0], "cpu": [0.1], "rss": [1], "ran": [1]},
    "retry of members -5..10^12": {"e": "retry", "only": {"a": [[-5, 10 ** 12]]}},
}


@pytest.mark.parametrize("what", sorted(FORGED))
def test_a_checksummed_record_the_plan_does_not_allow_is_skipped_with_a_warning(run, what):
    forge(run, FORGED[what])
    before = ledger(run)
    for cmd in (["status", run], ["show", run], ["trace", run], ["logs", run, "a:0"], ["report", run, "-o",
                                                                                         run.parent / "r.html"]):
        rc, out, err = pwe(*cmd, cwd=run.parent)
        assert rc == 0, (cmd, err)
        if cmd[0] in ("show", "trace", "report"):
            assert "damaged" in err and "journal.jsonl line" in err, (cmd, err)
    rc, out, err = pwe("resume", run, cwd=run.parent)
    assert rc == 0 and "damaged" in err, err
    assert ledger(run) == before and set(before.values()) == {1} and len(before) == N


def _bomb(path: Path, size: int = 256 << 20, byte: bytes = b"\0"):
    """A gzip file of ``size`` bytes ``byte`` (no line end), ~260 KB of it on disk (streamed:
    never in memory). 256 MiB is four times what a reader lets such a file expand to (the
    64 MiB floor of pilot.bounded.cap: 200 times 260 KB is less); 2 GiB cost the suite ~30 s."""
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = byte * (16 << 20)
    with open(path, "wb") as fh:
        for _ in range(size // len(block)):
            fh.write(z.compress(block))
        fh.write(z.flush())


def _damages(pdir: Path, how: str):
    events = pdir / "events.jsonl.gz"
    if how == "gzip bomb":
        _bomb(events)
    elif how == "truncated gzip":
        events.write_bytes(events.read_bytes()[:-20])
    elif how == "not gzip":
        events.write_bytes(b"this is not gzip at all\n" * 10)
    elif how == "50 MB line with no end in tasks":
        (pdir / "tasks.jsonl.gz").unlink()
        (pdir / "tasks.jsonl").write_bytes(b"x" * (50 << 20))
    elif how == "no line end in sealed tasks":
        _bomb(pdir / "tasks.jsonl.gz", byte=b"x")
    elif how.startswith("FIFO as "):
        name = how[len("FIFO as "):]
        for p in (pdir / name, pdir / (name + ".gz")):
            p.unlink(missing_ok=True)
        os.mkfifo(pdir / name)
    elif how == "link to /dev/zero":
        events.unlink()
        (pdir / "events.jsonl").symlink_to("/dev/zero")
    elif how == "link out of the run":
        outside = pdir.parents[2] / "elsewhere.jsonl"
        outside.write_bytes(b'{"k":"up"}\n')
        events.unlink()
        (pdir / "events.jsonl").symlink_to(outside)


SPOOLS = ["gzip bomb", "truncated gzip", "not gzip", "no line end in sealed tasks", "50 MB line with no end in tasks",
          "FIFO as events.jsonl", "FIFO as tasks.jsonl", "FIFO as orphans.jsonl", "link to /dev/zero", "link out of the run"]
#: what makes the engine read a pilot's events on resume; the others are read in recovery only
EVENTS_DAMAGED = {"gzip bomb", "truncated gzip", "not gzip", "FIFO as events.jsonl", "link to /dev/zero",
                  "link out of the run"}


def _as_if_the_engine_was_killed(run_dir: Path):
    """The run as a kill -9 of its engine leaves it while its pilot runs on: the journal
    without its last word (finish, the pilot gone) and a line of it damaged, so a resume
    reads every pilot's files again (pwe/engine/recovery.py); the snapshot says the pilot is up."""
    path = run_dir / "journal.jsonl"
    kept = [line for line in path.read_bytes().splitlines(keepends=True)
            if b'"e":"finish"' not in line and b'"e":"pilot_gone"' not in line]
    path.write_bytes(b"".join(kept) + b'{"e":"end","n":"a" this line is damaged}\n')
    snap = json.loads((run_dir / "state.json").read_text())
    snap["pilots"]["p1"]["alive"] = True
    snap["finished_ok"] = None
    (run_dir / "state.json").write_text(json.dumps(snap))


@pytest.mark.parametrize("how", SPOOLS)
def test_a_hostile_spool_file_is_refused_not_read_whole_nor_waited_on(run, how):
    _as_if_the_engine_was_killed(run)
    _damages(run / "pilots" / "p1", how)
    before = ledger(run)
    for cmd in (["status", run], ["status", run, "--json"], ["show", run], ["trace", run], ["pilot", "list", run]):
        rc, out, err = pwe(*cmd, cwd=run.parent)
        assert rc == 0, (cmd, err)
    rc, out, err = pwe("events", run, cwd=run.parent)
    if how in EVENTS_DAMAGED:
        assert rc == 2 and len(err.strip().splitlines()) == 1 and "events.jsonl" in err, err
    else:
        assert rc == 0, err
    rc, out, err = pwe("resume", run, cwd=run.parent)
    if how in EVENTS_DAMAGED:  # (what it sent refused as forged, or, when it cannot be heard: one line, which file)
        assert rc == 0 and "refused" in err or rc == 2 and "events.jsonl" in err.strip().splitlines()[-1], err
    else:
        assert rc == 0 and "damaged" in err, err
    assert ledger(run) == before and set(before.values()) == {1} and len(before) == N


@pytest.mark.parametrize("text", ["[]", '"x"', "{}", '{"run_id": 5}', "not json"])
def test_run_json_of_the_wrong_shape_is_one_line_and_exit_2(run, text):
    (run / "run.json").write_text(text)
    rc, out, err = pwe("status", run, cwd=run.parent)  # (the counts of state.json: still shown)
    assert rc == 0 and "done" in out, err
    for cmd in (["show", run], ["trace", run], ["resume", run], ["report", run, "-o",
                                                                                    run.parent / "r.html"]):
        rc, out, err = pwe(*cmd, cwd=run.parent)
        assert rc == 2 and len(err.strip().splitlines()) == 1 and "run.json" in err, (cmd, rc, err)
    rc, out, err = pwe("runs", "--json", cwd=run.parent)
    assert rc == 0


def test_the_dashboards_model_reads_the_damaged_run_bounded(run):
    pytest.importorskip("starlette")
    _damages(run / "pilots" / "p1", "gzip bomb")
    forge(run, FORGED["assign of 10^12 members"], FORGED["negative member"], FORGED["text for a member"])
    code = f"""
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, ({MEMORY}, {MEMORY}))
from pathlib import Path
from pwe.ui.model import Runs
from pwe.ui.live import tail
run = Runs().get(Path({str(run)!r}))
from pwe.base.states import DONE
ns = run.state.nodes["a"]
assert ns.size == {N} and ns.counts[DONE] == {N}, ns.counts
tr = run.traced()
assert sorted(r["member"] for r in tr.records(run.plan)) == list(range({N}))
recs, _ = tail(run.journal, 0, lambda n: run.state.nodes[n].size)
assert all(0 <= r["m"] < {N} for r in recs if "m" in r), recs
print("ok")
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert proc.returncode == 0 and "ok" in proc.stdout, proc.stderr[-3000:]
