"""Members inside a container (``container:``; pilot/containers.py, pwe/engine/environs.py,
pwe/planning/images.py), for real: Debian's charliecloud (ch-run 0.31) over a directory
image each test builds from busybox-static. Each member writes its ledger line from inside
the image into the bound workspace; the line carries the image's own marker file
(/etc/pwe-marker, which the host does not have), so a line proves its member ran inside.
Also: the environment passed, $TMPDIR and $PWE_OUTPUTS at the same paths (an output value
comes back), an image path with shell characters read by no shell, a changed image makes
its members run again ("container changed"), and an image missing where validate cannot
see it is a setup failure of the node (members never failed, the run stopped with the line)."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import pytest

from helpers import no_traceback, run_cli, show
from images import MARK, busybox_image


def workflow(where: Path, image: str = "./images/sim", n: int = 3, extra: str = "") -> Path:
    run = ('printf "%s %s %s %s %s\\n" "$(cat /etc/pwe-marker)" "$PWE_MEMBER" "$PWE_PARAM_X" "$TMPDIR" "$FOO" '
           '>> "$PWE_WORKSPACE/ledger"; echo t > "$TMPDIR/t" && echo "got=$PWE_PARAM_X" >> "$PWE_OUTPUTS"')
    wf = where / "wf.yaml"
    wf.write_text(f"name: ctr\nnodes:\n  sim:\n    parameters: {{x: {{range: [0, {n}]}}}}\n"
                  f"    env: {{FOO: \"a b;$(touch PWNED)\"}}\n"
                  f"    container: {{image: {json.dumps(image)}, runtime: charliecloud}}\n"
                  f"    run: {json.dumps(run)}\n{extra}")
    return wf


def ledger(where: Path) -> list[list[str]]:
    return [line.split(" ", 4) for line in (where / "ledger").read_text().splitlines()]


def test_members_run_inside_the_image_with_their_environment_and_paths(charliecloud, tmp_path):
    busybox_image(tmp_path / "images" / "sim")
    wf = workflow(tmp_path, n=4)
    rc, out, err = run_cli("run", wf, cwd=tmp_path)
    assert rc == 0, err
    lines = ledger(tmp_path)
    assert not os.path.exists("/etc/pwe-marker")  # (only the image has it: each line was written inside)
    assert sorted(int(w[1]) for w in lines) == [0, 1, 2, 3] and {w[0] for w in lines} == {MARK}
    # the environment passed in as it is (a value with shell characters too), each its own $TMPDIR
    assert all(w[2] == w[1] and w[4] == "a b;$(touch PWNED)" for w in lines)
    assert all("/pwe-" in w[3] for w in lines), lines
    # $PWE_OUTPUTS at the same path inside: each member's value came back
    records = show(next((tmp_path / "pwe-runs").iterdir()))
    assert {r["member"]: r["outputs"] for r in records} == {i: {"got": str(i)} for i in range(4)}
    assert not list(tmp_path.rglob("PWNED"))


def test_an_image_path_with_shell_characters_reaches_no_shell(charliecloud, tmp_path):
    name = "sim;touch PWNED $(touch PWNED2) `touch PWNED3` 'q"
    busybox_image(tmp_path / "images" / name)
    wf = workflow(tmp_path, image=f"./images/{name}", n=2)
    rc, out, err = run_cli("run", wf, cwd=tmp_path)
    assert rc == 0, err
    assert sorted(w[1] for w in ledger(tmp_path)) == ["0", "1"] and {w[0] for w in ledger(tmp_path)} == {MARK}
    found = [p for p in tmp_path.rglob("PWNED*")] + [p for p in Path.cwd().glob("PWNED*")]
    assert not found, found


def test_a_changed_image_makes_its_members_run_again(charliecloud, tmp_path):
    from pwe.planning.plan import plan_workflow
    from pwe.runstate.rerun_why import why_run

    image = busybox_image(tmp_path / "images" / "sim")
    wf = workflow(tmp_path)
    for _ in range(2):
        rc, out, err = run_cli("run", wf, cwd=tmp_path)
        assert rc == 0, err
    assert Counter(w[1] for w in ledger(tmp_path)) == {"0": 1, "1": 1, "2": 1}  # the second reused all three
    (image / "etc" / "pwe-marker").write_text(MARK + "-changed\n")
    assert why_run(plan_workflow(wf), str(tmp_path), "sim", 1, root=tmp_path / "pwe-runs") == ["container changed"]
    rc, out, err = run_cli("run", wf, cwd=tmp_path)
    assert rc == 0, err
    assert Counter(w[1] for w in ledger(tmp_path)) == {"0": 2, "1": 2, "2": 2}


def test_an_empty_mount_point_made_in_the_image_changes_nothing(charliecloud, tmp_path):
    from pwe.planning.images import content_id

    image = busybox_image(tmp_path / "images" / "sim")
    before = content_id(str(image))
    (image / "work" / "runs").mkdir(parents=True)
    assert content_id(str(image)) == before
    (image / "bin" / "extra").write_text("x")
    assert content_id(str(image)) != before


def test_an_image_missing_where_validate_cannot_see_it_is_a_setup_failure(charliecloud, tmp_path):
    """An absolute image path on a host other than 'local' is looked at on its nodes only:
    there it is missing, so no node takes the members (none fails: no attempt spent), and
    after three pilots the run stops with the line that says so."""
    (tmp_path / "hosts.yaml").write_text("hosts:\n  other: {protocol: local, cores_per_node: 2}\n")
    missing = tmp_path / "nowhere" / "sim"
    wf = workflow(tmp_path, image=str(missing), n=2, extra="    host: other\n")
    rc, out, err = run_cli("validate", wf, cwd=tmp_path)
    assert rc == 0, err
    rc, out, err = run_cli("run", wf, "--run-dir", tmp_path / "run", cwd=tmp_path, timeout=180)
    assert rc == 3, err
    no_traceback(err)
    last = err.strip().splitlines()[-1]
    assert f"container image {missing}: no such file or directory on this node" in last, last
    assert not (tmp_path / "ledger").exists()
    from pwe.observe.results import load_state

    _, st = load_state(tmp_path / "run")
    assert list(st.nodes["sim"].attempt) == [0, 0]  # handed back, never failed


@pytest.mark.parametrize("image,runtime,said", [
    ("./images/none", "charliecloud", "does not exist"),
    ("./images/sim", "docker", "'charliecloud', 'apptainer' or 'podman'"),
    ("./images/sim", "podman", "podman's image is a name"),
    ("-x", "charliecloud", "not starting with '-'"),
])
def test_a_missing_image_or_unknown_runtime_is_one_line_at_validate(charliecloud, tmp_path, image, runtime, said):
    busybox_image(tmp_path / "images" / "sim")
    wf = tmp_path / "wf.yaml"
    wf.write_text(f"name: x\nnodes:\n  a:\n    run: 'true'\n    container: {{image: '{image}', runtime: {runtime}}}\n")
    rc, out, err = run_cli("validate", wf, cwd=tmp_path)
    assert rc == 2 and len(err.strip().splitlines()) == 1 and said in err and "wf.yaml:5:" in err, err


def test_a_runtime_not_installed_here_is_one_line_at_validate(charliecloud, tmp_path):
    busybox_image(tmp_path / "images" / "sim")
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: x\nnodes:\n  a:\n    run: 'true'\n    container: {image: ./images/sim, runtime: charliecloud}\n")
    rc, out, err = run_cli("validate", wf, cwd=tmp_path, env={"PATH": str(tmp_path / "empty")})
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert "wf.yaml:5:" in err and "ch-run is not on PATH on this machine" in err, err
