"""The ``PWE_*`` settings (pilot/settings.py, re-exported as pwe.base.settings): each one a
good value of takes effect where it is read, a bad value is one line naming it with exit
status 2 (from a real ``pwe`` and a real pilot), none is read anywhere else (the source
scanned with ``ast``), and the docs' page lists them all from the same table."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import ROOT

from pilot.settings import (BROKER, CHECKPOINT_EVERY, HOME, NO_CGROUPS, NO_GUARDIAN, ORPHAN_GRACE, OUTPUT_CAP, OUTPUTS, QUEUE,
                            SEAL_ABOVE,
                            SERVICE_DIR, SERVICE_STALE, SERVICE_WORKER, SETTINGS, SPAWNERS, BadSetting,
                            outputs_table, settings_table)

ENV = {k: v for k, v in os.environ.items() if not k.startswith("PWE_")}
ENV["PYTHONPATH"] = str(ROOT)
HELLO = str(ROOT / "examples" / "quickstart.yaml")

#: a value each setting of a checked kind refuses (a path or a text is taken as given: PWE_BROKER
#: and PWE_QUEUE are checked where they are used, test_home_broker_and_queue_...)
BAD = {
    CHECKPOINT_EVERY.name: "soon", SEAL_ABOVE.name: "-1", SERVICE_STALE.name: "0",
    SERVICE_WORKER.name: "maybe", ORPHAN_GRACE.name: "3601",
    NO_GUARDIAN.name: "2", SPAWNERS.name: "many", NO_CGROUPS.name: "nan", OUTPUT_CAP.name: "100",
    "PWE_SPOOL_SEGMENT": "1000",
}


def pwe(*args: str, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pwe", *args], env={**ENV, **(env or {})}, cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def test_every_setting_of_a_checked_kind_has_a_bad_value_here():
    assert sorted(BAD) == sorted(s.name for s in SETTINGS if s.kind not in ("path", "text"))


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_bad_value_is_one_line_naming_it_and_exit_2(name, tmp_path):
    res = pwe("runs", env={name: BAD[name]}, cwd=tmp_path)
    assert res.returncode == 2, res
    assert "Traceback" not in res.stderr
    lines = res.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{name}=") and "set it to one" in lines[0], lines
    assert res.stdout == ""  # (said before the command ran)


def test_the_pilot_refuses_a_bad_setting_of_its_own_in_one_line(tmp_path):
    for setting in (ORPHAN_GRACE, NO_GUARDIAN, NO_CGROUPS, SPAWNERS):
        d = tmp_path / setting.name
        d.mkdir()
        res = subprocess.run([sys.executable, "-m", "pilot", "--dir", str(d), "--slots", "1"],
                             env={**ENV, setting.name: BAD[setting.name]}, capture_output=True, text=True, timeout=60)
        with pytest.raises(BadSetting) as said:
            setting.get({setting.name: BAD[setting.name]})
        assert res.returncode == 2 and res.stderr.splitlines() == [f"python -m pilot: {said.value}"], res.stderr
        assert not (d / "events.jsonl").exists()  # it never came up


def test_an_empty_value_is_unset_and_the_defaults_hold():
    for s in SETTINGS:
        assert s.get({s.name: ""}) == s.default == s.get({})
        if s.kind not in ("path", "text"):
            assert s.get({s.name: "  "}) == s.default
    assert BROKER.get({BROKER.name: "redis://h/0\n"}) == "redis://h/0\n"  # (as given: its checker refuses it)
    with pytest.raises(BadSetting):
        CHECKPOINT_EVERY.get({CHECKPOINT_EVERY.name: "nan"})
    assert NO_GUARDIAN.get({NO_GUARDIAN.name: "0"}) is False and NO_GUARDIAN.get({NO_GUARDIAN.name: "YES"}) is True


def _pilot(d: Path, env: dict, slots: int, members: int) -> list[dict]:
    """A real pilot run with ``members`` members that print their parent's pid; its events."""
    d.mkdir()
    tasks = [{"k": "task", "n": "a", "m": m, "a": 1, "cmd": f"echo $PPID > {d}/ppid.{m}", "cwd": str(d / str(m)),
              "env": {}, "ranks": 1, "threads": 1} for m in range(members)] + [{"k": "stop"}]
    (d / "tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tasks))
    proc = subprocess.run([sys.executable, "-m", "pilot", "--dir", str(d), "--slots", str(slots), "--heartbeat", "1"],
                          env={**ENV, **env}, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in (d / "events.jsonl").read_text().splitlines()]


def test_spawners_and_no_guardian_take_effect_in_a_real_pilot(tmp_path):
    # PWE_SPAWNERS=2: the members are started by two spawners, not by the pilot
    ev = _pilot(tmp_path / "spawned", {SPAWNERS.name: "2", NO_GUARDIAN.name: "1"}, 2, 6)
    pilot_pid = ev[0]["pid"]
    parents = {int((tmp_path / "spawned" / f"ppid.{m}").read_text()) for m in range(6)}
    assert len(parents) == 2 and pilot_pid not in parents
    # PWE_SPAWNERS=0: the pilot starts them itself
    ev = _pilot(tmp_path / "alone", {SPAWNERS.name: "0", NO_GUARDIAN.name: "1"}, 2, 3)
    assert {int((tmp_path / "alone" / f"ppid.{m}").read_text()) for m in range(3)} == {ev[0]["pid"]}


def test_no_guardian_takes_effect_in_a_real_pilot(tmp_path):
    """With its guardian the pilot is a forked child of the process started; without, it is it."""
    if not sys.platform.startswith("linux"):
        pytest.skip("the guardian is Linux's (a child subreaper)")
    for flag, guarded in (("1", False), ("0", True)):
        d = tmp_path / f"g{flag}"
        d.mkdir()
        (d / "tasks.jsonl").write_text('{"k":"stop"}\n')
        proc = subprocess.Popen([sys.executable, "-m", "pilot", "--dir", str(d), "--slots", "1"],
                                env={**ENV, NO_GUARDIAN.name: flag, SPAWNERS.name: "0"}, stderr=subprocess.PIPE)
        assert proc.wait(timeout=120) == 0, proc.stderr.read()
        up = json.loads((d / "events.jsonl").read_text().splitlines()[0])
        assert (up["pid"] != proc.pid) is guarded


def test_orphan_grace_is_read_before_the_fork():
    from pilot import guardian

    assert ORPHAN_GRACE.get({ORPHAN_GRACE.name: "1.5"}) == 1.5 and ORPHAN_GRACE.get({}) == 5.0
    assert not hasattr(guardian, "grace") and not hasattr(guardian, "GRACE")  # (the table's, once)


def test_seal_above_and_checkpoint_every_take_effect(tmp_path, monkeypatch):
    from pilot.sealing import seal
    from pwe.runstate.checkpoint import due

    for name in ("tasks.jsonl", "events.jsonl"):
        (tmp_path / name).write_text('{"k":"x"}\n' * 10)
    assert seal(str(tmp_path)) == 0 and (tmp_path / "events.jsonl").exists()  # 8 MiB: left plain
    monkeypatch.setenv(SEAL_ABOVE.name, "10")
    assert seal(str(tmp_path)) > 0 and not (tmp_path / "events.jsonl").exists()
    assert not due(0.0, 0.0, 5.0)  # 20 s by default
    monkeypatch.setenv(CHECKPOINT_EVERY.name, "1")
    assert due(0.0, 0.0, 5.0)


def test_service_settings_take_effect(tmp_path):
    """PWE_SERVICE_DIR names the service's directory; PWE_SERVICE_WORKER makes the app
    (what celery -A pwe.service.app finds), and nothing else does; PWE_SERVICE_STALE is read."""
    code = ("import pwe.service.app as m, pwe.service.daemon as d; from pwe.base.places import service_dir; "
            "print(service_dir()[0], getattr(m, 'app', None) is not None, hasattr(d, 'STALE'))")
    for worker in ("1", ""):
        res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                             env={**ENV, SERVICE_DIR.name: str(tmp_path), SERVICE_WORKER.name: worker})
        assert res.returncode == 0, res.stderr
        assert res.stdout.split() == [str(tmp_path), str(bool(worker)), "False"]
    assert SERVICE_STALE.get({SERVICE_STALE.name: "2.5"}) == 2.5


def test_home_broker_and_queue_take_effect_in_pwe_submit(tmp_path):
    """PWE_HOME places the service's directory; PWE_BROKER (filesystem://) and PWE_QUEUE
    (q7) say where pwe submit --service sends: the message lands in that queue there."""
    home = tmp_path / "home"
    res = pwe("submit", "--service", HELLO, env={HOME.name: str(home), BROKER.name: "filesystem://",
                                                 QUEUE.name: "q7"}, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    sent = [p for p in (home / "state" / "service").rglob("*") if p.is_file() and ".q7." in p.name]
    assert len(sent) == 1
    res = pwe("submit", "--service", HELLO, env={HOME.name: str(home), BROKER.name: "amqp://h"}, cwd=tmp_path)
    assert res.returncode == 2 and res.stderr.startswith("PWE_BROKER ") and len(res.stderr.splitlines()) == 1
    res = pwe("submit", "--service", HELLO, env={HOME.name: str(home), QUEUE.name: "a b"}, cwd=tmp_path)
    assert res.returncode == 2 and "PWE_QUEUE" in res.stderr and len(res.stderr.splitlines()) == 1


# -- nobody else reads a PWE_ variable ----------------------------------------------------

def _reads(tree: ast.AST, constants: dict[str, str]) -> list[tuple[int, str]]:
    """Reads of ``os.environ`` / ``os.getenv`` whose key is a ``PWE_`` name (a literal, an
    f-string starting so, or a module constant holding one)."""
    def pwe_name(node: ast.AST | None) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("PWE_"):
            return node.value
        if isinstance(node, ast.JoinedStr) and node.values and pwe_name(node.values[0]):
            return pwe_name(node.values[0])
        if isinstance(node, ast.Name) and node.id in constants:
            return constants[node.id]
        return None

    def is_environ(node: ast.AST) -> bool:
        return (isinstance(node, ast.Attribute) and node.attr == "environ") or \
            (isinstance(node, ast.Name) and node.id == "environ")

    found = []
    for node in ast.walk(tree):
        key = None
        if isinstance(node, ast.Subscript) and is_environ(node.value) and isinstance(node.ctx, ast.Load):
            key = pwe_name(node.slice)
        elif isinstance(node, ast.Call) and node.args:
            f = node.func
            if isinstance(f, ast.Attribute) and (f.attr in ("get", "pop", "setdefault") and is_environ(f.value)
                                                 or f.attr == "getenv"):
                key = pwe_name(node.args[0])
            elif isinstance(f, ast.Name) and f.id == "getenv":
                key = pwe_name(node.args[0])
        elif isinstance(node, ast.Compare) and any(isinstance(op, ast.In) for op in node.ops) and \
                any(is_environ(c) for c in node.comparators):
            key = pwe_name(node.left)
        if key:
            found.append((node.lineno, key))
    return found


def test_no_pwe_variable_is_read_outside_the_settings_module():
    offenders = []
    for package in ("pwe", "pilot", "hostinfo", "protocols"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if path.relative_to(ROOT).as_posix() == "pilot/settings.py":
                continue
            tree = ast.parse(path.read_text(), str(path))
            constants = {t.id: n.value.value for n in ast.walk(tree) if isinstance(n, ast.Assign)
                         and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)
                         and n.value.value.startswith("PWE_") for t in n.targets if isinstance(t, ast.Name)}
            offenders += [f"{path.relative_to(ROOT)}:{line}: {name}" for line, name in _reads(tree, constants)]
    assert offenders == []


def test_the_scan_finds_the_reads_it_is_for():
    code = ('import os\nV = "PWE_V"\nos.environ.get("PWE_A")\nos.environ["PWE_B"]\nos.getenv("PWE_C")\n'
            'os.environ.get(V)\n"PWE_D" in os.environ\nos.environ.get("HOME")\nenv = {"PWE_E": "1"}\n')
    assert [n for _, n in _reads(ast.parse(code), {"V": "PWE_V"})] == ["PWE_A", "PWE_B", "PWE_C", "PWE_V", "PWE_D"]


# -- the docs ------------------------------------------------------------------------------

def test_the_docs_page_is_made_from_the_table():
    sys.path.insert(0, str(ROOT / "docs" / "gen"))
    try:
        import reference
    finally:
        sys.path.remove(str(ROOT / "docs" / "gen"))
    page = (ROOT / "docs" / "reference" / "environment.md").read_text()
    made = reference.environment(page)
    assert settings_table() in made and outputs_table() in made and "<!-- pwe:" not in made
    for s in SETTINGS:
        assert f"| `{s.name}` |" in made and s.doc.replace("|", "\\|") in made
    for name, _ in OUTPUTS:
        assert f"| `{name}` |" in made
    assert "reference/environment.md" in (ROOT / "mkdocs.yml").read_text()
    # the page's example is what pwe says
    example = next(line[3:] for line in page.splitlines() if line.startswith("#> PWE_CHECKPOINT_EVERY="))
    res = pwe("status", env={CHECKPOINT_EVERY.name: "soon"})
    assert res.returncode == 2 and res.stderr.strip() == example


def test_python_m_pilot_settings_prints_the_tables():
    res = subprocess.run([sys.executable, "-m", "pilot.settings"], env=ENV, capture_output=True, text=True,
                         timeout=60, cwd=ROOT)
    assert res.returncode == 0 and res.stdout == settings_table() + "\n" + outputs_table()
