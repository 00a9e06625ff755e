"""Numbers at their limits in records (issue 45, part 4): a finite but absurd value in a
journal end record (a time ``t``, a duration ``dt``, a ``cpu`` or an ``rss`` of 1e308, -1,
1e-300, NaN, infinity) is read through the one reader of numbers with its documented range
(pwe/runstate/journal.py: check) and taken as absent when outside it; the figures derived
from what is in range are bounded, so no computation overflows or divides by about zero.
Every reader gives output (or one warning line), never a traceback: pwe status, status
--usage, show, trace --json, report and the dashboard's run page, on a real run's journal
rewritten as the journal writer would write it. A pilot message carrying NaN or infinity
(json.loads takes them) is refused as malformed, never a number for the engine."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from helpers import no_traceback, run_cli
from pilot import wire
from pwe.runstate.journal import END, ENDS, decode, encode, unpack

WORKFLOW = """name: absurd
defaults: {host: local}
nodes:
  a:
    parameters: {i: {range: [0, 4]}}
    run: echo hi {{ i }}
  b:
    after: [a]
    run: echo after
"""

VALUES = {"1e308": 1e308, "-1": -1, "1e-300": 1e-300, "nan": math.nan, "inf": math.inf}
FIELDS = ("t", "dt", "cpu", "rss")


@pytest.fixture(scope="module")
def finished(home, tmp_path_factory):
    """One real finished run on the local host: its directory."""
    cwd = tmp_path_factory.mktemp("derived")
    (cwd / "wf.yaml").write_text(WORKFLOW)
    rc, out, err = run_cli("run", "wf.yaml", "--json", cwd=cwd, timeout=300)
    assert rc == 0, err
    return Path(json.loads(out)["run_dir"]).resolve()


def _forge(run: Path, fields: tuple[str, ...], value: float, every: int = 1) -> int:
    """Rewrite the run's journal as its writer would have written it had the pilot said
    ``value`` for ``fields`` of every end: each ``ends`` (or end) record as the plain end
    records it stands for, those fields set, encoded with their checksums
    (pwe.runstate.journal.encode, which writes NaN and Infinity as Python's json does).
    How many ends were changed (``every``: only each one of so many, in the journal's order)."""
    path = run / "journal.jsonl"
    out, changed, seen = [], 0, 0
    for line in path.read_bytes().splitlines(keepends=True):
        rec = decode(line)
        if rec is None or rec["e"] not in (END, ENDS):
            out.append(line)
            continue
        for one in unpack(rec):
            if one["e"] == END:
                seen += 1
                if (seen - 1) % every == 0:
                    one.update(dict.fromkeys(fields, value))
                    changed += 1
            out.append(encode(one))
    path.write_bytes(b"".join(out))
    (run / "checkpoint.bin").unlink(missing_ok=True)  # (of the journal as it was: a reader replays this one whole)
    return changed


def _copy(finished: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the finished run in a directory of its own: (cwd, run dir)."""
    cwd = tmp_path / "cwd"
    run = cwd / "pwe-runs" / finished.name
    shutil.copytree(finished, run)
    return cwd, run


def _one_line_at_most(err: str, args) -> None:
    no_traceback(err)
    lines = [x for x in err.strip().splitlines() if x.strip()]
    assert len(lines) <= 1, (args, err)


def _documents(out: str, what) -> list:
    """The JSON of a command's output (a document, or one a line: pwe trace --json); no NaN
    or Infinity in it (JSON has neither)."""
    def refuse(word):
        pytest.fail(f"{word} in {what}'s JSON")

    if out.lstrip().startswith("{") and "\n{" in out.strip():
        return [json.loads(line, parse_constant=refuse) for line in out.splitlines() if line.strip()]
    return [json.loads(out, parse_constant=refuse)]


def _readers_answer(cwd: Path, run: Path) -> None:
    for args in (("status", run), ("status", run, "--json"), ("status", run, "--usage"), ("show", run),
                 ("show", run, "--json"), ("trace", run, "--json"), ("report", run, "-o", cwd / "r.html")):
        rc, out, err = run_cli(*args, cwd=cwd, timeout=300)
        _one_line_at_most(err, args)
        assert rc == 0, (args, rc, err)
        if "--json" in args:
            assert _documents(out, args), args
    assert (cwd / "r.html").stat().st_size > 0
    _dashboard_answers(cwd, run)


def _dashboard_answers(cwd: Path, run: Path) -> None:
    pytest.importorskip("starlette")
    from starlette.testclient import TestClient

    from pwe.ui.api import Sources
    from pwe.ui.app import make_app
    from pwe.ui.security import Guard

    c = TestClient(make_app(Sources(cwd / "pwe-runs"), Guard("s" * 43, "127.0.0.1", 8765, None)),
                   base_url="http://127.0.0.1:8765", raise_server_exceptions=False)
    for route in ("", "/members", "/timeline"):
        got = c.get(f"/api/runs/{run.name}{route}")
        assert got.status_code == 200, (route, got.status_code, got.text[:500])
        _documents(got.text, f"the dashboard's {route or 'run'}")


@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize("value", VALUES.values(), ids=VALUES.keys())
def test_an_absurd_number_in_end_records_gives_output_never_a_traceback(finished, tmp_path, field, value):
    cwd, run = _copy(finished, tmp_path)
    assert _forge(run, (field,), value) == 5
    _readers_answer(cwd, run)


@pytest.mark.parametrize("value", VALUES.values(), ids=VALUES.keys())
def test_every_number_of_the_ends_absurd_at_once(finished, tmp_path, value):
    cwd, run = _copy(finished, tmp_path)
    assert _forge(run, FIELDS, value) == 5
    _readers_answer(cwd, run)


def test_figures_at_the_ends_of_their_ranges_derive_bounded_figures(finished, tmp_path):
    """In range, yet at its ends: a duration of 1e-300 s (no measure: divides nothing), the
    most CPU seconds and memory a record may carry, times at 0 and at the range's top. What
    is derived from them (cores used = cpu / dt, CPU efficiency, the report's histograms and
    utilisation, core-hours) is finite."""
    from pwe.base.numbers import CPU_MOST, RSS_MOST, TIME_MOST

    cwd, run = _copy(finished, tmp_path)
    _forge(run, ("dt",), 1e-300)
    _forge(run, ("cpu",), CPU_MOST)
    _forge(run, ("rss",), RSS_MOST)
    _readers_answer(cwd, run)
    rc, out, err = run_cli("status", run, "--usage", "--json", cwd=cwd)
    assert rc == 0, err
    doc = _documents(out, "status --usage")[0]
    assert doc["nodes"]["a"]["cores_used"] is None, doc["nodes"]["a"]  # (no rate from 1e-300 s)
    for t in (0, TIME_MOST, 5e-324):  # (and the least float above 0 for every other duration, beside real ones)
        cwd, run = _copy(finished, tmp_path / f"t{t}")
        _forge(run, ("t",), t, every=3)
        _forge(run, ("dt",), 5e-324, every=2)
        _readers_answer(cwd, run)


def test_out_of_range_numbers_are_absent_in_the_trace_and_in_range_ones_kept(finished, tmp_path):
    cwd, run = _copy(finished, tmp_path)
    _forge(run, ("dt", "cpu", "rss"), 1e308)
    rc, out, err = run_cli("trace", run, "--json", cwd=cwd)
    assert rc == 0, err
    records = _documents(out, "trace")
    assert records and all(r["cpu"] is None and r["rss_kb"] is None for r in records), records
    # (the duration is the end less the start, both in range, where the pilot's own is not)
    assert all(r["duration"] is None or 0 <= r["duration"] < 3600 for r in records), records
    rc, out, err = run_cli("status", run, "--json", cwd=cwd)
    assert rc == 0, err
    assert "1e+308" not in out and "e+30" not in out, out


@pytest.mark.parametrize("word", ["NaN", "Infinity", "-Infinity"])
def test_a_pilot_message_with_nan_or_infinity_is_refused_as_malformed(word):
    key = b"k" * 32
    good = {"k": wire.END, "n": "a", "m": 0, "a": 1, "rc": 0, "dt": 0.5, "cpu": 0.1, "rss": 1000, "t": 1.0, "q": 1}
    bad = dict(good, q=2, dt=float(word.replace("Infinity", "inf").replace("NaN", "nan")))
    data = wire.encode([good, bad], key)
    assert word.encode() in data  # (as Python's json writes it: what a pilot of another make might send)
    msgs, rest = wire.decode(data, key)
    assert rest == b"" and msgs[0] == good, msgs
    assert msgs[1]["k"] == wire.MALFORMED, msgs[1]
    # unsigned (a reader without the key): not a message either
    assert wire.decode(wire.encode([bad]))[0][0]["k"] == wire.DAMAGED


@pytest.mark.parametrize("value", [1e308, -1, 1e-300, 10 ** 400], ids=["1e308", "-1", "1e-300", "10^400"])
def test_absurd_figures_in_the_snapshot_give_bounded_core_hours(finished, tmp_path, value):
    """state.json (what pwe status reads while it is newer than the journal) with figures the
    engine never writes: its core-hours are finite, the absurd figures taken as absent."""
    import os

    cwd, run = _copy(finished, tmp_path)
    snap = json.loads((run / "state.json").read_text())
    for w in snap["work"].values():
        w.update(spent=value, done_spent=value, cores=value, wall=value)
    for counts in snap["nodes"].values():
        counts["waiting"] = value
    (run / "state.json").write_text(json.dumps(snap))
    later = os.stat(run / "journal.jsonl").st_mtime + 10
    os.utime(run / "state.json", (later, later))
    for args in (("status", run, "--json"), ("status", run), ("runs", "--json")):
        rc, out, err = run_cli(*args, cwd=cwd)
        _one_line_at_most(err, args)
        assert rc == 0, (args, err)
        if "--json" in args:
            _documents(out, args)


def test_the_back_off_after_refused_submissions_is_bounded():
    from pwe.engine import scaling

    assert scaling.backoff(10 ** 7) == scaling.BACKOFF_MOST_S
