"""A member that fails, end to end through `pwe run`: its dependents are skipped and the rest
run on; retries keep each earlier attempt's output; `pwe retry` reruns only what failed."""

from __future__ import annotations

import json


from helpers import by_key, no_traceback, output, pwe, show, status


ISOLATION_WF = """\
name: isolation
nodes:
  A:
    parameters: {k: {range: [0, 4]}}
    run: if [ {{ k }} = 2 ]; then echo failing >&2; exit 3; fi; echo a {{ k }}
  B:
    after: [A]
    parameters: {k: {range: [0, 4]}}
    run: echo b {{ k }}
  C:
    after: [B]
    run: echo c
  D:
    run: sleep 0.5; echo d
  E:
    after: [D]
    run: echo e
"""



def test_failure_isolation(tmp_path, write):
    wf = write(ISOLATION_WF)
    run = tmp_path / "run"
    rc, out, err = pwe("run", wf, "--cores", "2", "--run-dir", run, cwd=tmp_path)
    assert rc == 1, f"a failed member must make `pwe run` exit 1, got {rc}\n{err}"
    no_traceback(err)
    recs = by_key(show(run))
    assert recs[("A", 2)]["state"] == "failed" and recs[("A", 2)]["exit_status"] == 3
    for k in (0, 1, 3):
        assert recs[("A", k)]["state"] == "done"
        assert recs[("B", k)]["state"] == "done", recs[("B", k)]
    assert recs[("B", 2)]["state"] == "skipped"
    assert recs[("C", 0)]["state"] == "skipped"
    assert recs[("D", 0)]["state"] == "done" and recs[("E", 0)]["state"] == "done"
    assert recs[("B", 2)]["attempts"] == 0 and recs[("C", 0)]["attempts"] == 0, "a skipped member must not run"

    rc, out, err = pwe("show", run, "--state", "failed", "--json", cwd=tmp_path)
    assert rc == 0, err
    failed = json.loads(out)
    assert [(r["node"], r["member"], r["exit_status"]) for r in failed] == [("A", 2, 3)]
    st = status(run)
    assert st["totals"]["failed"] == 1 and st["totals"]["skipped"] == 2 and st["totals"]["done"] == 8
    assert st["phase"] == "finished with failures"



RETRY_WF = """\
name: retries
nodes:
  flaky:
    retries: 2
    run: echo "attempt $PWE_ATTEMPT"; echo "err $PWE_ATTEMPT" >&2; test "$PWE_ATTEMPT" = 3
  hopeless:
    retries: 1
    run: echo "try $PWE_ATTEMPT"; exit 5
"""



def test_retries_keep_earlier_attempts(tmp_path, write):
    wf = write(RETRY_WF)
    run = tmp_path / "run"
    rc, out, err = pwe("run", wf, "--run-dir", run, cwd=tmp_path)
    assert rc == 1, err  # 'hopeless' never succeeds
    recs = by_key(show(run))
    flaky = recs[("flaky", 0)]
    assert flaky["state"] == "done" and flaky["attempts"] == 3 and flaky["exit_status"] == 0, flaky
    # (each attempt's output kept apart in the pilot's stream: attempt 2 does not hide 1)
    assert output(run, "flaky", 0, attempt=1) == "attempt 1\n"
    assert output(run, "flaky", 0, attempt=2) == "attempt 2\n"
    assert output(run, "flaky", 0) == "attempt 3\n" == output(run, "flaky", 0, attempt=3)
    assert output(run, "flaky", 0, "stderr", attempt=1) == "err 1\n"
    assert output(run, "flaky", 0, "stderr") == "err 3\n"
    hopeless = recs[("hopeless", 0)]
    assert hopeless["state"] == "failed" and hopeless["attempts"] == 2 and hopeless["exit_status"] == 5, hopeless
    assert output(run, "hopeless", 0, attempt=1) == "try 1\n" and output(run, "hopeless", 0) == "try 2\n"



RERUN_WF = """\
name: rerun
properties: {counts: /nonexistent, marker: /nonexistent}
nodes:
  A:
    parameters: {k: {range: [0, 3]}}
    run: echo x >> {{ counts }}/A.{{ k }}; if [ {{ k }} = 1 ]; then test -e {{ marker }}; fi
  B:
    after: [A]
    parameters: {k: {range: [0, 3]}}
    run: echo x >> {{ counts }}/B.{{ k }}
  C:
    after: [B]
    run: echo x >> {{ counts }}/C
  D:
    run: echo x >> {{ counts }}/D
"""



def test_pwe_retry_reruns_only_failed(tmp_path, write):
    wf = write(RERUN_WF)
    counts = tmp_path / "counts"
    counts.mkdir()
    marker = tmp_path / "marker"
    run = tmp_path / "run"

    def tally():
        return {p.name: len(p.read_text().splitlines()) for p in counts.iterdir()}

    rc, out, err = pwe("run", wf, "--set", f"counts={counts}", "--set", f"marker={marker}", "--run-dir", run,
                       cwd=tmp_path)
    assert rc == 1, err
    assert tally() == {"A.0": 1, "A.1": 1, "A.2": 1, "B.0": 1, "B.2": 1, "D": 1}
    marker.touch()
    rc, out, err = pwe("retry", run, cwd=tmp_path)
    assert rc == 0, f"pwe retry after fixing the cause must succeed:\n{out}\n{err}"
    no_traceback(err)
    assert tally() == {"A.0": 1, "A.1": 2, "A.2": 1, "B.0": 1, "B.1": 1, "B.2": 1, "C": 1, "D": 1}
    recs = show(run)
    assert all(r["state"] == "done" for r in recs), [r for r in recs if r["state"] != "done"]
    assert status(run)["phase"] == "succeeded"
