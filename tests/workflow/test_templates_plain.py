"""Templates of text and ``{{ name }}`` only are rendered without jinja2 (issue 35): the
same text and the same names as jinja2's sandbox gives them, and jinja2 not imported on
the road to a run's first member."""

from __future__ import annotations

import json
import random
import subprocess
import sys

import pytest

from pwe.workflow import sandbox
from pwe.workflow.templates import JINJA_WORDS, PathTemplate, PayloadTemplate, TemplateSyntax, error_text, \
    plain_parts

WORDS = ("true false none True False None and or not in is if else for endfor block set raw macro call filter "
         "import from with recursive as loop range self caller varargs kwargs super namespace lipsum dict cycler "
         "joiner x y _y").split()
BITS = ["{{ x }}", "{{x}}", "{{  y  }}", "{", "}", "{{", "}}", "{%", "%}", "{#", "#}", "a", " ", "\n", "\r",
        "\r\n", "$", "${HOME}", "'", '"', "{{{ x }}", "{{ x }}}", "{{- x }}", "{{ x -}}", "{{ z }}", "{{ x|raw }}",
        "{{ x ~ y }}", "é", "\\", "\t"] + [f"{{{{ {w} }}}}" for w in WORDS]
VALUES = ["v w", 1, 2.5, True, None, "a'b", "$(rm -rf /)", "", "x\ny", "é\u202e", -0.0, 10**30]


def _jinja(src: str, ctx: dict, path: bool):
    try:
        names, t = sandbox.compiled(src, path)
    except TemplateSyntax as exc:
        return ("syntax", exc.message, exc.lineno), None
    try:
        out = sandbox.render_path(t, ctx) if path else t.render(ctx)
    except Exception as exc:  # noqa: BLE001 - what either way raises is compared
        out = ("error", error_text(exc))
    return names, out


def _ours(src: str, ctx: dict, path: bool):
    try:
        t = (PathTemplate if path else PayloadTemplate)(src)
    except TemplateSyntax as exc:
        return ("syntax", exc.message, exc.lineno), None, False
    try:
        out = t.render(ctx)
    except Exception as exc:  # noqa: BLE001
        out = ("error", error_text(exc))
    return t.names, out, t._parts is not None


@pytest.mark.parametrize("seed", [1, 2])
def test_every_template_renders_as_jinja2_renders_it(seed):
    """6,000 templates made of pieces that are plain and pieces that are not, each
    rendered both ways (payloads and paths, values with quotes, line breaks, shell text,
    a name missing): the same names, text and errors; and hundreds of them took the
    plain road. (20,000 took 32 s of the suite; every piece still meets every other.)"""
    rnd = random.Random(seed)
    plain = 0
    for _ in range(3_000):
        src = "".join(rnd.choice(BITS) for _ in range(rnd.randint(0, 6)))
        ctx = {k: rnd.choice(VALUES) for k in ["x", "y", *rnd.sample(WORDS, 3)]}
        if rnd.random() < 0.2:
            ctx.pop("x")
        path = rnd.random() < 0.5
        names, out, was_plain = _ours(src, ctx, path)
        plain += was_plain
        assert (names, out) == _jinja(src, ctx, path), (src, ctx, path)
    assert plain > 300


def test_plain_templates_are_the_common_ones():
    for src in ("simulate --T={{ T }} --seed {{seed}}", "echo member $PWE_MEMBER", "out/{{ i }}.dat",
                "run '{{ x }}' > {{ y }}.log", "awk '{print $1}' {{ f }}", "echo ${HOME}/{{ x }}"):
        assert plain_parts(src) is not None, src
    for src in ("{{ x | raw }}", "{% for a in b %}{% endfor %}", "{{- x }}", "{{{ x }}", "{{ x }}\r\n",
                "{{ range }}", "{{ true }}", "{# c #}{{ x }}"):
        assert plain_parts(src) is None, src
    assert plain_parts("out/{{ i }}\n", path=True) is None  # (the path environment drops a trailing newline)


def test_a_plain_payload_is_shell_quoted_each_value_one_word():
    t = PayloadTemplate("prog --a={{ a }} {{ b }}")
    assert t.render({"a": "x; rm -rf / #", "b": "$(id)`id`"}) == "prog --a='x; rm -rf / #' '$(id)`id`'"
    assert PathTemplate("d/{{ a }}").render({"a": "x y"}) == "d/x y"


def test_a_missing_name_is_jinja2s_own_error():
    with pytest.raises(Exception) as got:
        PayloadTemplate("echo {{ x }}").render({})
    assert error_text(got.value) == "'x' is undefined"


def test_the_words_jinja2_reads_otherwise_are_its_globals():
    from jinja2.defaults import DEFAULT_NAMESPACE

    assert JINJA_WORDS == {"true", "false", "none", "self"} | set(DEFAULT_NAMESPACE)


def test_a_run_of_plain_templates_does_not_import_jinja2(tmp_path):
    """The road to the first member: `pwe run` of a workflow whose run and products are
    plain, in a fresh interpreter, ends with no jinja2 module loaded."""
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: plain\nnodes:\n  m:\n    parameters: {i: {range: [0, 3]}}\n"
                  "    run: echo {{ i }} > \"$PWE_WORKSPACE\"/out-{{ i }}.txt\n    products: ['out-{{ i }}.txt']\n")
    code = ("import sys, runpy; sys.argv = ['pwe', 'run', sys.argv[1], '--cores', '1', '--run-dir', sys.argv[2]]\n"
            "import atexit, json\n"
            "atexit.register(lambda: print('MODULES', json.dumps(sorted(m for m in sys.modules if m.startswith('jinja2')))))\n"
            "from pwe.cli.main import main\nmain()\n")
    p = subprocess.run([sys.executable, "-c", code, str(wf), str(tmp_path / "run")], cwd=tmp_path,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    line = [x for x in p.stdout.splitlines() if x.startswith("MODULES ")]
    assert line and json.loads(line[-1][8:]) == [], p.stdout
    assert sorted(f.name for f in tmp_path.glob("out-*.txt")) == ["out-0.txt", "out-1.txt", "out-2.txt"]


EVIL = ["$(touch MARK)", "`touch MARK`", "'; touch MARK; '", '"; touch MARK #', "a\ntouch MARK", "# x", "$HOME",
        "\\$(touch MARK)", "-n", ""]


def test_hostile_values_through_a_plain_payload_reach_the_member_as_one_word_each(tmp_path):
    """Shell contexts (HOSTILE.md): each value a parameter gives a plain payload (the road
    without jinja2) reaches the real shell that runs the member as the one word it is;
    nothing it holds runs."""
    mark = tmp_path / "pwned"
    values = [v.replace("MARK", str(mark)) for v in EVIL]
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: evil\nproperties:\n" + "".join(f"  v{k}: {json.dumps(v)}\n" for k, v in enumerate(values))
                  + "nodes:\n" + "".join(
                      f"  m{k}:\n    run: printf '%s|' {{{{ v{k} }}}} > \"$PWE_WORKSPACE/out-{k}\"\n"
                      for k in range(len(values))))
    assert all(plain_parts(f"printf '%s|' {{{{ v{k} }}}}") is not None for k in range(len(values)))
    p = subprocess.run([sys.executable, "-m", "pwe", "run", str(wf), "--cores", "2", "--run-dir",
                        str(tmp_path / "run")], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    for k, v in enumerate(values):
        assert (tmp_path / f"out-{k}").read_text() == v + "|", k
    assert not mark.exists()
