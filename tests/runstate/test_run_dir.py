"""The run directory `pwe run --run-dir` names: one that cannot be made is refused in one line and
leaves nothing behind; one already used is refused without touching the run in it."""

from __future__ import annotations



from helpers import no_traceback, pwe


def test_run_dir_cannot_be_created(tmp_path, write):
    wf = write("name: x\nnodes:\n  a:\n    run: echo hi\n")
    blocker = tmp_path / "afile"
    blocker.write_text("not a directory\n")
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    target = blocker / "run"
    rc, out, err = pwe("run", wf, "--run-dir", target, cwd=tmp_path)
    assert rc == 2, f"exit {rc}\n{err}"
    no_traceback(err)
    lines = err.strip().splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got:\n{err}"
    assert str(target) in lines[0]
    after = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    assert after == before, "a failed run left files behind"
    assert blocker.read_text() == "not a directory\n"



def test_run_dir_already_used(tmp_path, write):
    wf = write("name: twice\nnodes:\n  a:\n    run: echo once >> ../../../count\n")
    run = tmp_path / "run"
    rc, out, err = pwe("run", wf, "--run-dir", run, cwd=tmp_path)
    assert rc == 0, err
    journal = (run / "journal.jsonl").read_bytes()
    rc, out, err = pwe("run", wf, "--run-dir", run, cwd=tmp_path)
    assert rc == 2, err
    no_traceback(err)
    assert len(err.strip().splitlines()) == 1 and str(run) in err
    assert (run / "journal.jsonl").read_bytes() == journal, "a refused run touched the existing run"
    assert (tmp_path / "count").read_text() == "once\n"
