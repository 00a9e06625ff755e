"""A function member's worker inside its node's container (``python:`` with ``container:``;
pilot/pyworkers.py, pilot/containers.py :func:`~pilot.containers.worker`), for real: Debian's
charliecloud over a directory image with this machine's Python (tests/images.py). The
function appends to the members' ledger the image's own marker file (/etc/pwe-marker, which
the host does not have), so a line proves its call ran inside; its module appends to
another at its import, so the warm workers are counted."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

from helpers import no_traceback, on_ssh_nodes, read_journal, run_cli, show
from images import INSIDE, MARK, busybox_image, python_image

def _setup(tmp_path: Path, image: str, extra: str = "", n: int = 6) -> Path:
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (tmp_path / "mypkg" / "fits.py").write_text(INSIDE)
    wf = tmp_path / "wf.yaml"
    wf.write_text(f"name: ctrfn\nnodes:\n  fit:\n    parameters: {{x: {{range: [0, {n}]}}}}\n"
                  f"    env: {{LEDGER: {tmp_path / 'ledger'}, IMPORTS: {tmp_path / 'imports'}, "
                  f"FOO: \"a b;$(touch PWNED)\"}}\n"
                  f"    container: {{image: {json.dumps(image)}, runtime: charliecloud}}\n"
                  f"    python: mypkg.fits:inside\n{extra}")
    return wf


def _run(tmp_path: Path, wf: Path):
    return run_cli("run", wf, "--cores", "2", "--run-dir", tmp_path / "run", cwd=tmp_path, timeout=240)


def test_calls_run_in_warm_workers_inside_the_image_with_their_environment_and_validate(charliecloud, tmp_path):
    python_image(tmp_path / "images" / "py")
    wf = _setup(tmp_path, "./images/py", extra='    validate: test "$(cat /etc/pwe-marker)" = inside-the-image '
                                               '&& echo "validated $PWE_MEMBER" >> validated\n')
    rc, out, err = _run(tmp_path, wf)
    assert rc == 0, (out, err)
    assert not os.path.exists("/etc/pwe-marker")  # (only the image has it: each line was written inside)
    lines = [line.split() for line in (tmp_path / "ledger").read_text().splitlines()]
    assert Counter((w[0], w[1], w[2]) for w in lines) == Counter((MARK, str(i), "1") for i in range(6))
    recs = {r["member"]: r["outputs"] for r in show(tmp_path / "run")}
    for i, o in recs.items():
        assert (o["mark"], o["x"], o["foo"]) == (MARK, str(i), "a b;$(touch PWNED)")
        assert "/pwe-" in o["tmp"] and o["cwd"] == str(tmp_path.resolve())  # (its $TMPDIR, the workspace: same paths)
    # warm: at most one worker a slot, each importing the module once, inside the image
    imported = (tmp_path / "imports").read_text().split()
    assert len(imported) == len(set(imported)) <= 2 and {o["pid"] for o in recs.values()} <= set(imported)
    # its validate ran inside too, after each call
    assert sorted((tmp_path / "validated").read_text().split("\n")[:-1]) == [f"validated {i}" for i in range(6)]
    assert not list(tmp_path.rglob("PWNED"))


def test_an_image_without_python_is_one_line_at_validate_and_one_that_cannot_start_it_fails_each_member(
        charliecloud, tmp_path):
    """A directory image with no python3 is refused by ``pwe validate`` in one line; one whose
    python3 is there but cannot start (a link to nothing) fails each member with the
    runtime's own words, read from its worker's log."""
    bare = busybox_image(tmp_path / "images" / "bare")
    wf = _setup(tmp_path, "./images/bare", n=2)
    rc, out, err = run_cli("validate", wf, cwd=tmp_path)
    assert rc == 2, (out, err)
    no_traceback(err)
    assert len(err.strip().splitlines()) == 1 and "wf.yaml:" in err, err
    assert f"its container image {bare.resolve()} has no python3 (looked in /usr/local/bin/python3, /usr/bin/python3" in err, err
    (bare / "usr" / "bin").mkdir(parents=True)
    (bare / "usr" / "bin" / "python3").symlink_to("/nowhere/python3")
    rc, out, err = _run(tmp_path, wf)
    assert rc == 1, (out, err)
    no_traceback(err)
    assert not (tmp_path / "ledger").exists()
    ends = [r for r in read_journal(tmp_path / "run") if r["e"] == "end"]
    assert len(ends) == 2 and all(e["rc"] != 0 for e in ends), ends
    for e in ends:
        assert e["why"].startswith("its Python worker ended while the function ran, before it answered its first "
                                   "call: ch-run"), e
        assert "python3" in e["why"], e


def test_calls_on_other_nodes_run_inside_the_image_in_their_node_agents_workers(ssh_nodes, charliecloud, tmp_path):
    """Four nodes over ssh: the node agents start their workers inside the image too (the
    task's container goes with the call: ``box``); every call once, all inside, on several
    nodes."""
    python_image(tmp_path / "images" / "py")
    wf = _setup(tmp_path, "./images/py", n=24)
    on_ssh_nodes(tmp_path, wf)
    rc, out, err = run_cli("run", wf, "--run-dir", tmp_path / "run", cwd=tmp_path, timeout=300)
    assert rc == 0, (out, err)
    lines = [line.split() for line in (tmp_path / "ledger").read_text().splitlines()]
    assert Counter((w[0], w[1]) for w in lines) == Counter((MARK, str(i)) for i in range(24))
    recs = show(tmp_path / "run")
    assert all(r["outputs"]["mark"] == MARK for r in recs) and len(recs) == 24
    events = [json.loads(line) for p in (tmp_path / "run" / "pilots").glob("*/events.jsonl")
              for line in p.read_text().splitlines()]
    nodes = {n for e in events if e.get("k") == "start" for n in e.get("nodes", [])}
    assert len(nodes) >= 2, nodes  # (placed on more than the pilot's own node)
