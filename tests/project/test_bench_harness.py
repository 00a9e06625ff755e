"""bench/ on one harness: the options every benchmark shares (bench/common.py's parser),
its one timer, its one A/B runner, and every script answering --help. The benchmarks
themselves are not run here (they take minutes; bench/BENCHMARKS.md holds their figures)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
sys.path.insert(0, str(BENCH))

import common  # noqa: E402


def test_the_shared_options_parse_with_their_old_spellings(tmp_path):
    ap = common.parser(common.__doc__, repeat=3, members=5000, cores=2, where="tmpfs", both=True, json_out=True)
    a = ap.parse_args([])
    assert (a.repeat, a.members, a.cores, a.where, a.json) == (3, 5000, 2, "tmpfs", None)
    a = ap.parse_args(["--repeats", "4", "--members", "7", "--cores", "8", "--where", "both", "--json",
                       str(tmp_path / "f.json")])
    assert (a.repeat, a.members, a.cores, a.where, a.json) == (4, 7, 8, "both", tmp_path / "f.json")
    assert ap.parse_args(["--runs", "6"]).repeat == 6  # (ab_dispatch.py's and converge_chain.py's name)
    assert ap.parse_args(["--out", "x.json"]).json == Path("x.json")  # (ui.py's name)
    assert common.place(ap.parse_args(["--where", str(tmp_path)]).where) == tmp_path.resolve()
    assert common.place("tmpfs") == Path("/dev/shm")


def test_an_option_a_script_does_not_share_is_not_there():
    ap = common.parser(None, repeat=None)
    with pytest.raises(SystemExit):
        ap.parse_args(["--repeat", "3"])


@pytest.mark.parametrize("argv", [["--where", "nowhere-at-all"], ["--repeat", "0"], ["--members", "many"]])
def test_a_bad_shared_option_is_one_line_naming_it_and_exit_2(argv, capsys):
    ap = common.parser(None, repeat=3, members=10, where="disk")
    with pytest.raises(SystemExit) as e:
        ap.parse_args(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert argv[0] in err and "Traceback" not in err


def test_json_figures_are_written_where_asked(tmp_path):
    common.write_json(tmp_path / "f.json", {"wall": 1.5})
    assert (tmp_path / "f.json").read_text().strip().replace(" ", "").replace("\n", "") == '{"wall":1.5}'
    common.write_json(None, {"wall": 1.5})  # (no --json: nothing written, no error)


def test_the_timer_times_a_real_process_and_reads_its_own_peak_memory():
    wall, rss_kb, out = common.measure([sys.executable, "-c", "b = bytearray(64 << 20); print(len(b))"], out=True)
    assert out == f"{64 << 20}\n"
    assert isinstance(wall, float) and wall > 0
    assert rss_kb >= 64 << 10  # its own 64 MiB, read by wait4: not this test process's
    assert common.timed([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=b"x" * 100_000) > 0


def test_the_timer_says_why_a_process_failed():
    with pytest.raises(SystemExit, match="exit 3: broken here"):
        common.timed([sys.executable, "-c", "import sys; print('broken here', file=sys.stderr); sys.exit(3)"])
    assert common.timed([sys.executable, "-c", "raise SystemExit(1)"], ok=(0, 1)) > 0


def test_the_ab_runner_interleaves_and_turns_the_order_round():
    calls: list[tuple[str, int]] = []

    def arm(name):
        def one(k):
            calls.append((name, k))
            return {"A": 1.0, "B": 2.0}[name] + k
        return one

    got = common.interleave({"A": arm("A"), "B": arm("B")}, 4)
    assert calls == [("A", 0), ("B", 0), ("B", 1), ("A", 1), ("A", 2), ("B", 2), ("B", 3), ("A", 3)]
    assert got == {"A": [1.0, 2.0, 3.0, 4.0], "B": [2.0, 3.0, 4.0, 5.0]}
    s = common.summary(got["B"])
    assert (s["median"], s["min"], s["max"], s["n"]) == (3.5, 2.0, 5.0, 4)
    assert s["spread"] == pytest.approx(3.0 / 3.5)


def test_ab_compares_two_trees_in_one_run(tmp_path):
    p = subprocess.run([sys.executable, "bench/ab.py", "--a", ".", "--b", ".", "--measure", "pass", "--repeats", "1",
                        "--fast-repeats", "2", "--json", str(tmp_path / "ab.json")], cwd=ROOT, capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    rows = [line for line in p.stdout.splitlines() if line.startswith("| pass")]
    assert [r.split("|")[2].strip() for r in rows] == ["A", "B"], p.stdout
    assert all(r.split("|")[3].strip() == "2" for r in rows)  # 2 rounds each
    assert '"b_over_a"' in (tmp_path / "ab.json").read_text()


def test_ab_refuses_a_measure_it_does_not_know():
    p = subprocess.run([sys.executable, "bench/ab.py", "--a", ".", "--b", ".", "--measure", "w9"], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2
    assert "--measure: w9" in p.stderr and "Traceback" not in p.stderr


SCRIPTS = sorted(p.name for p in BENCH.glob("*.py"))


def test_the_scripts_are_found():
    assert {"common.py", "ab.py", "startup.py", "peers.py"} <= set(SCRIPTS)


@pytest.mark.parametrize("script", [s for s in SCRIPTS if s != "common.py"])
def test_every_bench_script_answers_help(script):
    p = subprocess.run([sys.executable, f"bench/{script}", "--help"], cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr[-1000:]
    assert p.stdout.startswith("usage:"), p.stdout[:300]
