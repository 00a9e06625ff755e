"""Output streams against hostile input (/work/shared/HOSTILE.md's classes that apply): a
member's bytes that forge another member's frame; a stream that is damaged, cut short, a
FIFO, a link out of the run directory; an index whose records disagree; a sealed stream that
is cut short, not gzip or a bomb; PWE_OUTPUT_CAP and --attempt out of bounds. Each: one line
naming what is wrong, exit status 2 for that member, the others read fine."""

from __future__ import annotations

import gzip
import os
import shutil
import struct
import zlib
from pathlib import Path

import pytest

from helpers import output, run_cli

N = 4


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """One run: member 0 prints a frame forged for member 1 (its own bytes); each member
    prints its line on stdout and stderr."""
    from pilot import streams

    d = tmp_path_factory.mktemp("streams")
    body = struct.pack(">QIIIQQdH", 1, 1, 6, 0, 0, 0, 9e9, 1) + b"a" + b"FORGED"
    (d / "forged.bin").write_bytes(streams.MAGIC + struct.pack(">I", zlib.crc32(body)) + body)
    (d / "wf.yaml").write_text(
        f"name: hostile\nproperties: {{forged: {d / 'forged.bin'}}}\nnodes:\n  a:\n"
        f"    parameters: {{i: {{range: [0, {N}]}}}}\n"
        "    run: 'if [ {{ i }} = 0 ]; then cat {{ forged }}; fi; echo \"line {{ i }}\"; echo \"err {{ i }}\" >&2'\n")
    rc, out, err = run_cli("run", d / "wf.yaml", "--cores", "1", "--run-dir", d / "run", cwd=d)
    assert rc == 0, err
    return d / "run"


def _copy(run: Path, to: Path) -> Path:
    shutil.copytree(run, to, symlinks=True)
    return to


def _stream(run: Path) -> Path:
    (path,) = (run / "pilots" / "p1").glob("out-pilot.stream")
    return path


def _refused(run: Path, member: str, phrase: str, cwd: Path) -> None:
    rc, out, err = run_cli("logs", run, member, cwd=cwd, timeout=60)
    assert rc == 2 and err.count("\n") == 1 and "Traceback" not in err and phrase in err, (rc, err)


def _fine(run: Path, i: int, cwd: Path) -> None:
    rc, out, err = run_cli("logs", run, f"a:{i}", "--stdout", "--stderr", cwd=cwd, timeout=60)
    assert rc == 0 and f"line {i}\n" in out and f"err {i}\n" in out, (rc, out, err)


def test_a_members_bytes_cannot_forge_another_members_frame(made, tmp_path):
    assert output(made, "a", 1) == "line 1\n"  # (not FORGED: frames are found through the index)
    assert "FORGED" in output(made, "a", 0) and output(made, "a", 0).endswith("line 0\n")


def test_a_damaged_frame_refuses_that_member_only(made, tmp_path):
    run = _copy(made, tmp_path / "run")
    path = _stream(run)
    data = bytearray(path.read_bytes())
    at = data.index(b"line 2")
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))
    _refused(run, "a:2", "damaged frame", tmp_path)
    for i in (1, 3):
        _fine(run, i, tmp_path)


def test_a_stream_cut_short_refuses_the_members_past_the_cut(made, tmp_path):
    run = _copy(made, tmp_path / "run")
    path = _stream(run)
    data = path.read_bytes()
    path.write_bytes(data[:data.index(b"line 3") + 2])
    _refused(run, "a:3", "cut short", tmp_path)
    _fine(run, 1, tmp_path)


@pytest.mark.parametrize("which", [".stream", ".index"])
def test_a_fifo_where_a_stream_file_should_be_never_hangs(made, tmp_path, which):
    run = _copy(made, tmp_path / "run")
    path = run / "pilots" / "p1" / f"out-pilot{which}"
    path.unlink()
    os.mkfifo(path)
    _refused(run, "a:1", "a FIFO", tmp_path)


def test_a_stream_that_links_out_of_the_run_directory_is_refused(made, tmp_path):
    run = _copy(made, tmp_path / "run")
    path = _stream(run)
    outside = tmp_path / "outside"
    outside.write_bytes(path.read_bytes())
    path.unlink()
    path.symlink_to(outside)
    _refused(run, "a:1", "a link out of", tmp_path)


def test_an_index_record_whose_length_disagrees_is_refused(made, tmp_path):
    run = _copy(made, tmp_path / "run")
    index = run / "pilots" / "p1" / "out-pilot.index"
    data = bytearray(index.read_bytes())
    # the last record's frame length (its last 4 bytes) said to be 4 GB
    data[-4:] = struct.pack(">I", 0xFFFFFFFF)
    index.write_bytes(bytes(data))
    rc, out, err = run_cli("logs", run, f"a:{N - 1}", cwd=tmp_path)
    assert rc == 2 and err.count("\n") == 1 and "index record" in err, err
    _fine(run, 1, tmp_path)


def test_a_sealed_stream_reads_the_same_and_its_damage_is_one_line(made, tmp_path):
    from pilot.streams import seal

    run = _copy(made, tmp_path / "run")
    assert seal(str(run / "pilots" / "p1"), 0) >= 0
    assert not (run / "pilots" / "p1" / "out-pilot.stream").exists()
    gz = run / "pilots" / "p1" / "out-pilot.stream.gz"
    for i in range(1, N):
        _fine(run, i, tmp_path)
    good = gz.read_bytes()
    gz.write_bytes(good[: len(good) // 2])  # cut short
    _refused(run, "a:2", "cut short", tmp_path)
    gz.write_bytes(b"x" * len(good))
    _refused(run, "a:2", "not gzip", tmp_path)
    # a bomb: one block that expands far past a block's size
    bomb = gzip.compress(b"\0" * (64 << 20))
    gz.write_bytes(bomb)
    (run / "pilots" / "p1" / "out-pilot.stream.blocks").write_bytes(struct.pack(">2Q", 0, len(bomb)))
    _refused(run, "a:1", "expands past", tmp_path)


@pytest.mark.parametrize("value", ["abc", "-1", "0", "1e12", "nan", "99999999999999"])
def test_a_bad_output_cap_is_one_line_and_no_run(tmp_path, value):
    (tmp_path / "wf.yaml").write_text("name: cap\nnodes:\n  a:\n    run: echo hi\n")
    rc, out, err = run_cli("run", tmp_path / "wf.yaml", "--run-dir", tmp_path / "run", cwd=tmp_path,
                           env={"PWE_OUTPUT_CAP": value})
    assert rc == 2 and err.count("\n") == 1 and "PWE_OUTPUT_CAP" in err and "Traceback" not in err, err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("value", ["0", "-1", "abc", "1000000000000", "1.5"])
def test_a_bad_attempt_is_one_line(made, tmp_path, value):
    rc, out, err = run_cli("logs", made, "a:1", "--attempt", value, cwd=tmp_path)
    assert rc == 2 and "--attempt" in err and "Traceback" not in err, err
