"""Numbers at their limits (issue 45, HOSTILE.md's class): one reader for numbers from
outside (pilot/numbers.py). Every numeric field the checker tables enumerate (the workflow's
and the hosts file's, found by walking the tables: a new field is covered without a line
here), every numeric option of every command, every numeric PWE_* setting, member specs,
journal records, a stream's index and the dashboard's URL paths, each given 0, -1, 10^12,
4,301 and 5,000 digits, '²', '①', Arabic-Indic digits, 1e-300, 1e308, NaN and infinity:
one line naming where (file:line, the option, the variable, the route), exit status 2 (HTTP
4xx), a skipped damaged record or a figure read as none; never a traceback."""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from helpers import ROOT

from hostinfo.check_table import TABLE as HOSTS_TABLE
from pilot.numbers import COUNT_MOST, MAX_DIGITS, NumberError, read_float, read_int
from pwe.base.errors import InputError
from pwe.workflow.check_table import TABLE as WORKFLOW_TABLE

PWE = str(ROOT / ".venv" / "bin" / "pwe")
BIG = "9" * 4301
HUGE = "9" * 5000
#: (YAML text, whether no numeric field may take it)
VALUES = [("0", False), ("-1", False), ("1000000000000", False), (BIG, True), (HUGE, True), ("²", True),
          ("①", True), ("1e-300", False), ("1e308", True), (".nan", True), (".inf", True), ("-.inf", True)]


# -- the fields, from the tables ------------------------------------------------------------
def _fields(table: dict, node: dict, path: tuple, out: dict, seen: tuple = ()) -> None:
    """Every int or float field under ``node``: {path: (the types of its schema's branches,
    whether it is a list's item)}; a path step ``{}`` is a mapping's key, ``[]`` a list's item."""
    kind = node["type"]
    if kind in ("int", "float"):
        out.setdefault(path, set()).add(kind)
    elif kind == "union":
        for choice in node["choices"]:
            if choice["type"] in ("str", "bool"):
                out.setdefault(path, set()).add(choice["type"])
            _fields(table, choice, path, out, seen)
    elif kind == "model":
        for name, field in node["fields"].items():
            _fields(table, field["schema"], path + (name,), out, ())
    elif kind == "model-ref" and node["name"] not in seen:
        _fields(table, table[node["name"]], path, out, seen + (node["name"],))
    elif kind in ("nullable", "function-after", "function-before"):
        _fields(table, node["schema"], path, out, seen)
    elif kind == "list":
        _fields(table, node["items"], path + ("[]",), out, seen)
    elif kind == "dict":
        _fields(table, node["values"], path + ("{}",), out, seen)
    elif kind == "tagged-union":
        for tag, choice in node["choices"].items():
            _fields(table, choice, path + (f"<{tag}>",), out, seen)


def numeric_fields(table: dict, root: str) -> list[tuple[tuple, bool]]:
    """(path, whether it takes numbers only) of every numeric field of model ``root``."""
    out: dict[tuple, set] = {}
    _fields(table, table[root], (), out)
    return sorted((p, not (kinds & {"str", "bool"})) for p, kinds in out.items() if kinds & {"int", "float"})


WF_FIELDS = numeric_fields(WORKFLOW_TABLE, "Workflow")
HOST_FIELDS = numeric_fields(HOSTS_TABLE, "HostsFile")

def _doc_at(path: tuple, base: dict) -> dict:
    """``base`` with the placeholder "@V" at ``path`` (each step made as its place needs:
    a node's mapping key is node 'a', a range is [V, 10], a list of mappings one item)."""
    doc = json.loads(json.dumps(base))
    here: dict = doc
    steps = [s for s in path if s not in ("<values>", "<range>")]
    for i, step in enumerate(steps):
        key = ("a" if steps[i - 1] == "nodes" else "h" if steps[i - 1] == "hosts" else "k") if step == "{}" else step
        rest = steps[i + 1:]
        if not rest:
            here[key] = "@V"
            return doc
        if rest == ["[]"]:
            here[key] = ["@V", 10] if key == "range" else ["@V"]
            return doc
        if rest[0] == "[]":
            item = {"name": "p"}
            here[key] = [item]
            here = item
            steps[i + 1] = "<skip>"
            continue
        if step == "<skip>":
            continue
        nxt = here.get(key)
        if not isinstance(nxt, dict):
            nxt = here[key] = {"attempts": 2} if key == "retry" else {}
        here = nxt
    raise AssertionError(path)


def _text(path: tuple, value: str, base: dict) -> str:
    return json.dumps(_doc_at(path, base)).replace('"@V"', value)  # (JSON is YAML; the value as plain YAML)


WF_BASE = {"name": "w", "nodes": {"a": {"run": "echo"}}}
HOST_BASE = {"hosts": {"h": {"protocol": "slurm"}}}


def _one_line_at(exc: InputError, path: Path) -> None:
    text = str(exc)
    assert "\n" not in text and text.startswith(f"{path}:"), text
    assert exc.line is not None, text


@pytest.mark.parametrize("field, numbers_only", WF_FIELDS, ids=[".".join(p) for p, _ in WF_FIELDS])
def test_every_numeric_workflow_field(tmp_path, field, numbers_only):
    from pwe.workflow.load import load_workflow

    assert len(WF_FIELDS) > 30  # (the tables were walked)
    for value, never in VALUES:
        text = _text(field, value, WF_BASE)
        wf = tmp_path / "wf.yaml"
        wf.write_text(text)
        try:
            load_workflow(wf)
        except InputError as exc:
            _one_line_at(exc, wf)
            continue
        assert not (never and numbers_only), f"{'.'.join(field)}: {value[:20]} taken: {text[:300]}"


@pytest.mark.parametrize("field, numbers_only", HOST_FIELDS, ids=[".".join(p) for p, _ in HOST_FIELDS])
def test_every_numeric_hosts_field(tmp_path, field, numbers_only):
    from hostinfo.registry import load

    assert len(HOST_FIELDS) > 15
    for value, never in VALUES:
        hosts = tmp_path / "hosts.yaml"
        hosts.write_text(_text(field, value, HOST_BASE))
        try:
            load(extra=hosts)
        except InputError as exc:
            _one_line_at(exc, hosts)
            continue
        assert not (never and numbers_only), f"{'.'.join(field)}: {value[:20]} taken: {hosts.read_text()[:300]}"


@pytest.mark.parametrize("form", ["yaml", "xml"])
def test_a_number_past_the_digits_read_is_one_line_in_either_form(tmp_path, form):
    """A real process: 5,000 digits in a property (YAML) or a <value> (XML) was int()'s
    ValueError, a traceback."""
    if form == "yaml":
        wf = tmp_path / "wf.yaml"
        wf.write_text(f"name: w\nproperties: {{n: {HUGE}}}\nnodes:\n  a:\n    run: echo\n")
    else:
        wf = tmp_path / "wf.xml"
        wf.write_text(f'<workflow name="w">\n<node id="a">\n<parameter name="x">\n<value>{HUGE}</value>\n'
                      '</parameter>\n<run>echo</run>\n</node>\n</workflow>\n')
    proc = subprocess.run([PWE, "validate", str(wf)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{wf}:") and "5,000 digits" in lines[0], lines


def test_an_in_range_walltime_cannot_overflow_the_plan(tmp_path):
    """maxWallTime 1e308 (or .inf) passed the model and overflowed in plan (int(inf)): now refused, one line."""
    (tmp_path / "hosts.yaml").write_text("hosts:\n  cl:\n    protocol: slurm\n    cores_per_node: 4\n")
    for value in ("1e308", ".inf", "1000000000000"):
        wf = tmp_path / "wf.yaml"
        wf.write_text(f"name: w\ndefaults: {{host: cl}}\nnodes:\n  a:\n    run: echo\n"
                      f"    scheduling: {{maxWallTime: {value}}}\n")
        proc = subprocess.run([PWE, "plan", str(wf)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
        assert proc.stderr.startswith(f"{wf}:6:") and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


# -- options --------------------------------------------------------------------------------
def _numeric_options():
    """(command path, option name) of every option of type Whole or Seconds, every command."""
    from pwe.cli.base import Seconds, Whole
    from pwe.cli.main import cli

    out = []

    def walk(cmd, names):
        if isinstance(cmd, click.Group):
            for name in cmd.list_commands(None):
                walk(cmd.get_command(None, name), names + [name])
            return
        for p in cmd.params:
            if isinstance(p, click.Option) and isinstance(p.type, (Whole, Seconds)) and not p.is_flag:
                out.append((tuple(names), max(p.opts, key=len)))

    walk(cli, [])
    return out


BAD_OPTIONS = ["²", "①", "١٢", HUGE, "nan", "inf", "1e308", "-1", "1_0", ""]


def test_every_numeric_option_refuses_what_is_not_a_number_in_range():
    from pwe.cli.main import cli

    options = _numeric_options()
    assert len(options) > 10, options
    runner = CliRunner()
    for names, opt in options:
        for value in BAD_OPTIONS:
            got = runner.invoke(cli, [*names, opt, value], catch_exceptions=True)
            where = f"pwe {' '.join(names)} {opt} {value[:12]!r}"
            assert got.exception is None or isinstance(got.exception, SystemExit), (where, got.exception)
            assert got.exit_code == 2, (where, got.output[-500:])
            assert "Traceback" not in got.output, where


def test_halt_takes_a_count_only_in_ascii_digits(tmp_path):
    (tmp_path / "wf.yaml").write_text("name: w\nnodes:\n  a:\n    run: echo\n")
    for value in ("²", "١٢", HUGE):
        proc = subprocess.run([PWE, "run", "wf.yaml", "--halt", value], capture_output=True, text=True,
                              timeout=120, cwd=tmp_path)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
        assert len(proc.stderr.strip().splitlines()) == 1 and "--halt" in proc.stderr, proc.stderr[:300]
        assert not (tmp_path / "pwe-runs").exists()


@pytest.mark.parametrize("spec", [f"a:{HUGE}", "a:٣", "a:²", "a[①]", f"a/{'9' * 19}"])
def test_a_member_spec_whose_index_is_not_ascii_digits_is_one_line(tmp_path, spec):
    proc = subprocess.run([PWE, "logs", "nosuchrun", spec], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert len(proc.stderr.strip().splitlines()) == 1 and "NODE:INDEX" in proc.stderr, proc.stderr[:300]


# -- settings, places -----------------------------------------------------------------------
def test_every_numeric_setting_refuses_what_is_not_a_number_in_range():
    from pilot.settings import SETTINGS, BadSetting

    numeric = [s for s in SETTINGS if s.kind in ("count", "seconds", "bytes")]
    assert len(numeric) > 5
    for s in numeric:
        for value in ("²", "①", "١٢", HUGE, BIG, "nan", "inf", "1e308", "1_0", "-1"):
            if value == "-1" and s.low is None:
                continue
            with pytest.raises(BadSetting) as got:
                s.get({s.name: value})
            assert s.name in str(got.value) and "\n" not in str(got.value)


@pytest.mark.parametrize("var", ["PWE_HOME", "XDG_STATE_HOME"])
@pytest.mark.parametrize("how", ["loop", "long"])
def test_a_home_too_long_or_a_symlink_loop_is_one_line(tmp_path, var, how):
    if how == "loop":
        os.symlink(tmp_path / "b", tmp_path / "a")
        os.symlink(tmp_path / "a", tmp_path / "b")
        home = str(tmp_path / "a" / "x")
    else:
        home = str(tmp_path) + ("/" + "d" * 200) * 30
    env = {k: v for k, v in os.environ.items() if k not in ("PWE_HOME", "XDG_STATE_HOME")}
    proc = subprocess.run([PWE, "runs"], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                          env={**env, var: home})
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert len(proc.stderr.strip().splitlines()) == 1 and var in proc.stderr, proc.stderr[:300]


# -- records ------------------------------------------------------------------------------
def test_journal_records_with_numbers_past_their_limits_are_skipped_or_read_as_none(tmp_path):
    """NaN and infinity reach no reader of the journal (read as no value); a 5,000-digit
    member index, a reused member's output keyed by '٣': damaged records, skipped with the
    warning, replay goes on."""
    from pwe.runstate.journal import encode, replay, unpack

    good = {"e": "end", "n": "a", "m": 1, "a": 1, "p": "p1", "t": 5.0, "rc": 0, "dt": 1.0}
    lines = [encode({**good, "dt": math.nan}), encode({**good, "cpu": math.inf}),
             encode({**good, "m": 2}).replace(b'"m":2', b'"m":' + HUGE.encode()),
             encode({"e": "reused", "n": "a", "from": "r", "r": [[0, 1, 0]], "out": {"٣": {}}}),
             encode(good)]
    (tmp_path / "journal.jsonl").write_bytes(b"".join(lines))
    seen = []

    def apply(rec):
        for r in unpack(rec, lambda node: 10):
            for v in r.values():
                assert not (isinstance(v, float) and not math.isfinite(v)), r
            seen.append(r)

    done = replay(tmp_path / "journal.jsonl", apply)
    assert done.damaged == [3, 4], done.damaged
    assert len(seen) == 3 and done.warnings()


def test_a_stream_index_record_past_any_file_is_a_damaged_frame(tmp_path):
    """An index record whose offset is 2^64 - 1 (or 2^63): os.pread raised OverflowError, a
    traceback in pwe logs; now the frame is damaged, as one the index names wrongly."""
    from pilot.streams import _INDEX, INDEX, STREAM, Reader, node_key

    d = tmp_path / "pilots" / "p1"
    d.mkdir(parents=True)
    (d / ("pilot" + STREAM)).write_bytes(b"PWS\x01" + b"\0" * 100)
    (d / ("pilot" + INDEX)).write_bytes(_INDEX.pack(node_key("a"), 0, 1, 2 ** 64 - 1, 100)
                                        + _INDEX.pack(node_key("a"), 0, 2, 2 ** 63, 100))
    with Reader(str(tmp_path / "pilots")) as r:
        frames, damaged, unreadable = r.member("a", 0)
    assert not any(frames.values()) and len(damaged) == 2 and not unreadable


# -- the dashboard ------------------------------------------------------------------------
def test_a_number_in_a_dashboard_path_or_query_is_4xx_never_500(tmp_path):
    pytest.importorskip("starlette")
    from starlette.testclient import TestClient

    from pwe.ui.api import Sources
    from pwe.ui.app import make_app
    from pwe.ui.security import Guard

    secret = "s" * 43
    (tmp_path / "pwe-runs").mkdir()
    c = TestClient(make_app(Sources(tmp_path / "pwe-runs"), Guard(secret, "127.0.0.1", 8765)),
                   base_url="http://127.0.0.1:8765", raise_server_exceptions=False)
    h = {"Authorization": f"Bearer {secret}"}
    for index in (HUGE, "9" * 19, "٣", "²", "①", "-1", "1e3"):
        for tail in ("", "/logs"):
            got = c.get(f"/api/runs/r1/members/a/{index}{tail}", headers=h)
            assert 400 <= got.status_code < 500, (index[:12], tail, got.status_code)
    for name, value in (("offset", "١٢"), ("offset", HUGE), ("limit", "²"), ("offset", "1_0")):
        got = c.get(f"/api/runs/r1/members?{name}={value}", headers=h)
        assert got.status_code == 400, (name, value[:12], got.status_code, got.text[:200])
    got = c.post("/api/runs/r1/cancel", headers={**h, "Content-Length": "²".encode("latin-1")}, content=b"")
    assert 400 <= got.status_code < 500


# -- the reader itself ----------------------------------------------------------------------
def test_the_reader_takes_ascii_digits_bounded_finite_and_in_range():
    assert read_int("12") == 12 and read_int("-3", -5, 5) == -3 and read_int("0" * 20 + "7") == 7
    for bad in ("²", "①", "١٢", " 1", "1_0", "", "+", "1.0", "1e3", "9" * (MAX_DIGITS + 1), 12, None):
        with pytest.raises(NumberError):
            read_int(bad)
    with pytest.raises(NumberError):
        read_int(str(COUNT_MOST + 1), 0, COUNT_MOST)
    assert read_float("1e-300") == 1e-300 and read_float(".5") == 0.5
    for bad in ("nan", "inf", "1e309", "-1e400", "infinity", "1_0.0", "١.٥", "0x10"):
        with pytest.raises(NumberError):
            read_float(bad)
    with pytest.raises(NumberError):
        read_float("1e308", 0, 1e6)


def test_the_fast_path_is_cheap():
    """A plain small count (what replay and the pilot read millions of) costs about int() itself."""
    import timeit

    fast = min(timeit.repeat(lambda: read_int("123456"), number=20000, repeat=5))
    plain = min(timeit.repeat(lambda: int("123456"), number=20000, repeat=5))
    assert fast < plain * 8 + 0.01, (fast, plain)

