"""Members inside podman containers (``runtime: podman``), for real: Debian's podman 4.3
with runc, configured as a site would to start containers on these machines (tests/conftest.py
``podman``: pwe passes none of it), over images each test imports into podman's store from a
directory (tests/images.py). Each member writes its ledger line from inside; the line carries
the image's own marker file (/etc/pwe-marker, which the host does not have).

Held: the environment passed by name (a value with shell characters too), $TMPDIR and
$PWE_OUTPUTS at the same paths, an output value back; a function member's warm worker inside
(its program on stdin, its socket kept: ``-i --preserve-fds=1``), each importing the module
once; the image's id in podman's store is in the key, so an image imported again under the
same name with other content makes its members run again ("container changed")."""

from __future__ import annotations

import json
import os
import uuid
from collections import Counter
from pathlib import Path

from helpers import run_cli, show
from images import INSIDE, MARK, busybox_image, python_image

RUN = ('printf "%s %s %s %s\\n" "$(cat /etc/pwe-marker)" "$PWE_MEMBER" "$TMPDIR" "$FOO" >> "$PWE_WORKSPACE/ledger"; '
       'echo t > "$TMPDIR/t" && echo "got=$PWE_PARAM_X" >> "$PWE_OUTPUTS"')

def _name() -> str:
    return f"localhost/pwe-test-{uuid.uuid4().hex[:12]}:1"


def _wf(where: Path, image: str, body: str, n: int = 3) -> Path:
    wf = where / "wf.yaml"
    wf.write_text(f"name: pod\nnodes:\n  sim:\n    parameters: {{x: {{range: [0, {n}]}}}}\n"
                  f"    env: {{FOO: \"a b;$(touch PWNED)\", LEDGER: {where / 'ledger'}, IMPORTS: {where / 'imports'}}}\n"
                  f"    container: {{image: {json.dumps(image)}, runtime: podman}}\n{body}")
    return wf


def test_members_run_inside_a_podman_image_with_their_environment_and_paths(podman, tmp_path):
    image = podman.load(busybox_image(tmp_path / "img"), _name())
    wf = _wf(tmp_path, image, f"    run: {json.dumps(RUN)}\n")
    rc, out, err = run_cli("run", wf, "--run-dir", tmp_path / "run", cwd=tmp_path, env=podman.env, timeout=240)
    assert rc == 0, err
    assert not os.path.exists("/etc/pwe-marker")
    lines = [line.split(" ", 3) for line in (tmp_path / "ledger").read_text().splitlines()]
    assert sorted(w[1] for w in lines) == ["0", "1", "2"] and {w[0] for w in lines} == {MARK}
    assert all(w[3] == "a b;$(touch PWNED)" and "/pwe-" in w[2] for w in lines), lines
    assert {r["member"]: r["outputs"] for r in show(tmp_path / "run")} == {i: {"got": str(i)} for i in range(3)}
    assert not list(tmp_path.rglob("PWNED"))


def test_function_members_run_in_warm_workers_inside_a_podman_image(podman, tmp_path):
    image = podman.load(python_image(tmp_path / "img"), _name())
    (tmp_path / "fns.py").write_text(INSIDE)
    wf = _wf(tmp_path, image, "    python: fns:inside\n", n=6)
    rc, out, err = run_cli("run", wf, "--cores", "2", "--run-dir", tmp_path / "run", cwd=tmp_path, env=podman.env,
                           timeout=240)
    assert rc == 0, err
    lines = [line.split() for line in (tmp_path / "ledger").read_text().splitlines()]
    assert Counter((w[0], w[1]) for w in lines) == Counter((MARK, str(i)) for i in range(6))
    recs = {r["member"]: r["outputs"] for r in show(tmp_path / "run")}
    assert all(o["mark"] == MARK and o["x"] == str(i) and o["foo"] == "a b;$(touch PWNED)" for i, o in recs.items())
    imported = (tmp_path / "imports").read_text().splitlines()
    assert len(imported) <= 2, imported  # (warm: a worker a slot, each importing the module once)


def test_an_image_imported_again_with_other_content_makes_its_members_run_again(podman, tmp_path):
    from pwe.planning.plan import plan_workflow
    from pwe.runstate.rerun_why import why_run

    name = _name()
    img = busybox_image(tmp_path / "img")
    podman.load(img, name)
    wf = _wf(tmp_path, name, f"    run: {json.dumps(RUN)}\n", n=2)
    for _ in range(2):
        rc, out, err = run_cli("run", wf, cwd=tmp_path, env=podman.env, timeout=240)
        assert rc == 0, err
    assert Counter(line.split()[1] for line in (tmp_path / "ledger").read_text().splitlines()) == {"0": 1, "1": 1}
    (img / "etc" / "pwe-marker").write_text(MARK + "-changed\n")
    podman.load(img, name)
    assert why_run(plan_workflow(wf), str(tmp_path), "sim", 1, root=tmp_path / "pwe-runs") == ["container changed"]
    rc, out, err = run_cli("run", wf, cwd=tmp_path, env=podman.env, timeout=240)
    assert rc == 0, err
    assert Counter(line.split()[1] for line in (tmp_path / "ledger").read_text().splitlines()) == {"0": 2, "1": 2}


def test_an_image_not_in_podmans_store_is_one_line_at_validate(podman, tmp_path):
    from helpers import no_traceback

    name = _name()  # (never imported)
    wf = _wf(tmp_path, name, "    run: 'true'\n", n=1)
    rc, out, err = run_cli("validate", wf, cwd=tmp_path, env=podman.env)
    assert rc == 2, (out, err)
    no_traceback(err)
    assert len(err.strip().splitlines()) == 1 and "wf.yaml:" in err, err
    assert f"container image '{name}' is not in podman's store on this machine" in err, err
