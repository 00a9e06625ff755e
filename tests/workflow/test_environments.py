"""``container:`` and ``modules:`` as the workflow file says them (pwe/workflow/model.py,
rules.py; schemas/workflow.xsd, xml_convert.py): YAML and XML make the same plan and the
same setup lines; a module name with shell characters, an image that is not one line, an
unknown runtime: one line naming file and line at validate, exit 2. The setup lines they
make quote every name and path (pwe/engine/environs.py): run by bash with hostile names,
nothing but the check runs."""

from __future__ import annotations

import subprocess

import pytest

from helpers import run_cli

YAML = """\
name: envs
defaults:
  container: {image: /opt/images/sim, runtime: charliecloud}
nodes:
  a:
    parameters: {x: [1, 2]}
    run: 'true'
    modules: [gcc/12, openmpi/4.1.5+cuda]
  b:
    run: 'true'
    container: {image: /opt/images/b.sif, runtime: apptainer}
  c:
    run: 'true'
    container: {image: localhost/sim:1, runtime: podman}
"""
XML = """\
<workflow name="envs">
  <defaults><container image="/opt/images/sim" runtime="charliecloud"/></defaults>
  <node id="a"><parameter name="x"><value>1</value><value>2</value></parameter><run>true</run>
    <modules><module>gcc/12</module><module> openmpi/4.1.5+cuda </module></modules></node>
  <node id="b"><run>true</run><container image="/opt/images/b.sif" runtime="apptainer"/></node>
  <node id="c"><run>true</run><container image="localhost/sim:1" runtime="podman"/></node>
</workflow>
"""


def test_yaml_and_xml_make_the_same_plan_and_setup_lines(write):
    from pwe.engine.tasks import setup_sets
    from pwe.planning.plan import plan_workflow

    # (a host other than 'local': the images are not on this machine, as on a cluster's)
    y, x = (plan_workflow(p, host="cluster") for p in (write(YAML), write(XML, "wf.xml")))
    assert y.workflow == x.workflow
    assert y.workflow.nodes["a"].modules == ["gcc/12", "openmpi/4.1.5+cuda"]
    sets = setup_sets(y)
    assert sets == setup_sets(x) and sorted(n for _, nids in sets.values() for n in nids) == ["a", "b", "c"]
    lines = {nids[0]: "\n".join(lines) for lines, nids in sets.values()}
    assert "module load gcc/12 openmpi/4.1.5+cuda ||" in lines["a"] and "command -v ch-run" in lines["a"]
    assert "command -v apptainer" in lines["b"] and "podman image exists localhost/sim:1" in lines["c"]


@pytest.mark.parametrize("name", ["gcc/12; touch PWNED", "$(touch PWNED)", "gcc 12", "`id`", "-x", ".hidden",
                                  "a|b", "a\nb", "x" * 201])
def test_a_module_name_with_shell_characters_is_one_line_at_validate(write, tmp_path, name):
    import json

    wf = write(f"name: x\nnodes:\n  a:\n    run: 'true'\n    modules: [gcc/12, {json.dumps(name)}]\n")
    rc, out, err = run_cli("validate", wf, cwd=tmp_path)
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert "wf.yaml:5:" in err and "is not a module name" in err and "Traceback" not in err, err
    assert not list(tmp_path.rglob("PWNED"))


@pytest.mark.parametrize("spec,said", [
    ("{image: /i, runtime: docker}", "'charliecloud', 'apptainer' or 'podman'"),
    ("{image: /i}", "runtime"),
    ("{image: \"a\\nb\", runtime: apptainer}", "one line"),
    ("{image: '', runtime: apptainer}", "not a path or name"),
    ("{image: 'sim; id', runtime: podman}", "podman's image is a name"),
    ("{image: /i, runtime: podman, gpus: 1}", "gpus"),
])
def test_a_bad_container_is_one_line_at_validate(write, tmp_path, spec, said):
    wf = write(f"name: x\ndefaults:\n  container: {spec}\nnodes:\n  a:\n    run: 'true'\n")
    rc, out, err = run_cli("validate", wf, cwd=tmp_path)
    assert rc == 2 and len(err.strip().splitlines()) == 1 and said in err and "wf.yaml:3:" in err, err


def test_the_setup_lines_quote_every_name_and_path(tmp_path):
    """Run by bash as a pilot runs them: an image named with shell characters is looked at,
    and its mount points made, as one word; nothing else runs."""
    from pwe.engine.environs import container_lines

    image = tmp_path / "im;touch PWNED $(touch PWNED2) `touch PWNED3`'"
    image.mkdir()
    script = "set -e\n" + "\n".join(container_lines("charliecloud", str(image))) + "\n"
    binds = "/srv/pwe ws/run $(touch PWNED4)\n/tmp/under-tmp\n"
    proc = subprocess.run(["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "PWE_SETUP_BINDS": binds})
    assert proc.returncode == 0, proc.stderr
    assert (image / "srv" / "pwe ws" / "run $(touch PWNED4)").is_dir()  # its mount point, made in the image
    assert not (image / "tmp" / "under-tmp").exists()  # (ch-run -t makes those under /tmp itself)
    assert not list(tmp_path.rglob("PWNED*"))
    proc = subprocess.run(["bash", "-c", script.replace(str(image), str(image) + "-gone")], cwd=tmp_path,
                          capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
    assert proc.returncode == 1 and proc.stderr.startswith("pwe: container image ") and "no such file" in proc.stderr
