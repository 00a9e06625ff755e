"""The report's failures section (issue 47): ``pwe failures``' views by parameter value, error
signature and host, counted on the report's own replay of the journal; every value a member
made (markup, a terminal's escapes) shown as text. A real run in which one value of one
parameter always fails: that value is the first row of the table by value."""

from __future__ import annotations

from html.parser import HTMLParser

from helpers import failing_meshes, run_cli

WORKFLOW = failing_meshes("reportwhy")


class _Tables(HTMLParser):
    """Each table's rows (cells as text), by the table's id; every tag met."""

    def __init__(self):
        super().__init__()
        self.tables, self.tags, self._table, self._cell = {}, [], None, None

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        if tag == "table":
            self._table = self.tables.setdefault(dict(attrs).get("id"), [])
        elif tag == "tr" and self._table is not None:
            self._table.append([])
        elif tag in ("td", "th") and self._table is not None:
            self._cell = ""

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self._table[-1].append(self._cell)
            self._cell = None
        elif tag == "table":
            self._table = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell += data


def test_the_failing_value_comes_first_and_every_value_is_text(tmp_path, write):
    wf = write(WORKFLOW)
    rc, out, err = run_cli("run", wf, "--cores", "2", "--run-dir", tmp_path / "run", cwd=tmp_path, timeout=300)
    assert rc == 1, err
    rc, out, err = run_cli("report", tmp_path / "run", "-o", tmp_path / "r.html", cwd=tmp_path, timeout=300)
    assert rc == 0, err
    html = (tmp_path / "r.html").read_text()
    page = _Tables()
    page.feed(html)
    by_value = page.tables["failures-by-value"]
    assert by_value[0] == ["node", "parameter", "value", "failed", "done", "rate", "difference"]
    assert by_value[1] == ["sim", "mesh", "fine", "3", "0", "100%", "+100"], by_value
    values = [row[2] for row in by_value[1:]]
    assert "<script>alert(1)</script>" in values and "\\x1b[31mred" in values, values  # (as text, the escape visible)
    head, sig = page.tables["failures-by-signature"]  # (one signature: the three lines differ in numbers)
    assert head == ["members", "signature", "for example"]
    assert sig[0] == "3" and sig[1] == "Error: <path> \\x1b[<n>J<img src=x>", sig
    assert page.tables["failures-by-host"][1][1:] == ["3", "9", "25%"]
    # nothing a member made became markup, and no raw escape reached the page
    assert "\x1b" not in html and "img" not in page.tags and page.tags.count("script") == 2
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_a_run_without_failures_has_no_views(tmp_path, write):
    wf = write("name: fine\nnodes:\n  a:\n    parameters: {i: {range: [0, 2]}}\n    run: 'true'\n")
    rc, out, err = run_cli("run", wf, "--run-dir", tmp_path / "run", cwd=tmp_path, timeout=300)
    assert rc == 0, err
    rc, out, err = run_cli("report", tmp_path / "run", "-o", tmp_path / "r.html", cwd=tmp_path, timeout=300)
    assert rc == 0, err
    html = (tmp_path / "r.html").read_text()
    assert "no member failed" in html and "failures-by-value" not in html
