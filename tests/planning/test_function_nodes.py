"""A function node (``python: package.module:function``) as the plan sees it: bad input is one
line at validate (exit 2), the module found without being imported, its source in the key."""

from __future__ import annotations

import pytest

from helpers import one_line_error, pwe

MODULE = "import os\nwith open(os.path.join(os.path.dirname(__file__), 'imported'), 'a') as fh:\n" \
         "    fh.write('x')\n\n\ndef fit(x):\n    return {'x': x}\n\nalias = fit\n"


def _workspace(tmp_path, node: str):
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("raise SystemExit('the package must not be imported')\n")
    (tmp_path / "mypkg" / "fits.py").write_text(MODULE)
    (tmp_path / "mypkg" / "syntax.py").write_text("def fit(x):\n    return {'x': x\n\n")
    wf = tmp_path / "wf.yaml"
    wf.write_text(f"name: fn\nnodes:\n  f:\n    parameters: {{x: [1, 2]}}\n{node}")
    return wf


@pytest.mark.parametrize("node,line,said", [
    ("    python: mypkg.fits:nope\n", 5, "/mypkg/fits.py defines no 'nope' at its top level"),
    ("    python: mypkg.other:fit\n", 5, "module mypkg.other is not found in the workspace"),
    ("    python: nosuch.mod:fit\n", 5, "module nosuch.mod is not found"),
    ("    python: 'mypkg.fits:fit; rm -rf /'\n", 5, "is package.module:function"),
    ("    python: 'mypkg.fits'\n", 5, "is package.module:function"),
    ("    python: \"\\e[31mred:x\"\n", 5, "'\\x1b[31mred:x'"),
    ("    python: mypkg.fits:fit\n    run: echo\n", 3, "gives both 'run' and 'python'"),
    ("    python: mypkg.syntax:fit\n", 5, "/mypkg/syntax.py:2: "),
    ("    description: nothing\n", 3, "the node has no payload: give 'run' (a shell command) or 'python'"),
    ("    python: mypkg.fits:fit\n    check: echo converged=true >> $PWE_OUTPUTS\n", 5, "takes no 'check'"),
    ("    python: mypkg.fits:fit\n    scheduling: {ranksPerMember: 4}\n", 5, "ranksPerMember must be 1"),
    ("    python: " + "a" * 500 + ":f\n", 5, "at most"),
], ids=["no function", "no module", "no package", "shell", "no function named", "escape", "both", "syntax", "neither",
        "check", "ranks", "long"])
def test_bad_function_nodes_are_one_line_at_validate(tmp_path, node, line, said):
    wf = _workspace(tmp_path, node)
    err = one_line_error(*pwe("validate", wf, cwd=tmp_path))
    assert err.startswith(f"{wf}:{line}: ") or err.startswith(f"wf.yaml:{line}: "), err
    assert said in err, err
    assert "\x1b" not in err  # (shown inert)
    assert not (tmp_path / "imported").exists()  # (nothing of the user's ran)


def test_a_good_function_node_validates_without_importing_its_module(tmp_path):
    for spec in ("mypkg.fits:fit", "mypkg.fits:alias", "json:dumps", "math:sqrt"):
        d = tmp_path / spec.replace(":", "_")
        d.mkdir()
        wf = _workspace(d, f"    python: {spec}\n")
        rc, out, err = pwe("validate", wf, cwd=d)
        assert rc == 0, (spec, err)
        assert not (d / "imported").exists()


def test_the_modules_source_is_part_of_the_key(tmp_path):
    from pwe.planning.plan import plan_workflow
    from pwe.planning.reuse import node_digest, node_parts

    wf = _workspace(tmp_path, "    python: mypkg.fits:fit\n")
    first = plan_workflow(wf)
    again = plan_workflow(wf)
    assert node_digest(first, "f") == node_digest(again, "f")
    (tmp_path / "mypkg" / "fits.py").write_text(MODULE + "# changed\n")
    changed = plan_workflow(wf)
    assert node_digest(first, "f") != node_digest(changed, "f")
    a, b = node_parts(first, "f", {}, {}), node_parts(changed, "f", {}, {})
    assert {k for k in a if a[k] != b.get(k)} == {"function"}
    assert not (tmp_path / "imported").exists()


def test_xml_and_yaml_say_the_same_function_node(tmp_path):
    from pwe.planning.plan import plan_workflow
    from pwe.planning.reuse import node_digest

    yaml = _workspace(tmp_path, "    python: mypkg.fits:fit\n")
    xml = tmp_path / "wf.xml"
    xml.write_text('<workflow name="fn"><node id="f"><parameter name="x"><value>1</value><value>2</value>'
                   "</parameter><python>mypkg.fits:fit</python></node></workflow>")
    a, b = plan_workflow(yaml), plan_workflow(xml)
    assert node_digest(a, "f") == node_digest(b, "f")
    assert a.command("f", 1) == b.command("f", 1) == "python: mypkg.fits:fit"


def test_lint_takes_a_function_nodes_parameters_as_its_arguments(tmp_path):
    wf = _workspace(tmp_path, "    python: mypkg.fits:fit\n")
    rc, out, err = pwe("lint", wf, cwd=tmp_path)
    assert rc == 0 and "used by no template" not in out + err, (out, err)
    assert not (tmp_path / "imported").exists()


def test_a_function_node_in_a_container_looks_for_its_module_in_the_workspace_alone(tmp_path):
    """Inside a container the image's Python runs the worker: a module not in the workspace
    may be the image's own (not refused, not keyed by a file of this machine); one in the
    workspace (bound inside at its own path) is checked as here; an image directory with no
    python3 is one line."""
    from pwe.planning.functions import identity
    from pwe.planning.plan import plan_workflow

    (tmp_path / "hosts.yaml").write_text("hosts:\n  other: {protocol: local, cores_per_node: 2}\n")
    image = tmp_path / "img"
    (image / "usr" / "bin").mkdir(parents=True)
    (image / "usr" / "bin" / "python3").symlink_to("/usr/bin/python3.99")  # (inside the image: a link is enough)
    inside = "    host: other\n    container: {image: ./img, runtime: charliecloud}\n"
    wf = _workspace(tmp_path, inside + "    python: json:dumps\n")  # (this machine has json; the image's is its own)
    rc, out, err = pwe("validate", wf, cwd=tmp_path)
    assert rc == 0, err
    assert identity(plan_workflow(wf), "f") == {"source": "-"}
    wf.write_text(wf.read_text().replace("json:dumps", "mypkg.fits:nope"))
    assert "/mypkg/fits.py defines no 'nope'" in one_line_error(*pwe("validate", wf, cwd=tmp_path))
    wf.write_text(wf.read_text().replace("mypkg.fits:nope", "mypkg.fits:fit"))
    rc, out, err = pwe("validate", wf, cwd=tmp_path)
    assert rc == 0, err
    (image / "usr" / "bin" / "python3").unlink()
    err = one_line_error(*pwe("validate", wf, cwd=tmp_path))
    assert f"its container image {image.resolve()} has no python3" in err and "PWE_PYTHON" in err, err
    assert not (tmp_path / "imported").exists()
