"""A writer killed between a member's frame and its index record (pilot/streams.py): the
frame is in the stream, its record is not (or is cut short). `pwe logs` still finds that
member's output, by stepping past the last frame the index names; the seal of a left pilot
writes the missing records back. What is past the last frame and is not a whole frame of
its own (garbage, a frame cut short, a CRC that does not match, an index whose last record
points into a member's bytes) is never taken for output."""

from __future__ import annotations

import shutil
import struct
import zlib
from pathlib import Path

import pytest

from helpers import output, run_cli

N = 6
RECORD = 32  # (pilot/streams.py's _INDEX.size)


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """A finished run whose members each print one line: one pilot, one writer."""
    d = tmp_path_factory.mktemp("unindexed")
    (d / "wf.yaml").write_text(f"name: unindexed\nnodes:\n  a:\n    parameters: {{i: {{range: [0, {N}]}}}}\n"
                               "    run: 'echo \"line {{ i }}\"'\n")
    rc, out, err = run_cli("run", d / "wf.yaml", "--cores", "1", "--run-dir", d / "run", cwd=d)
    assert rc == 0, err
    return d / "run"


def _copy(run: Path, to: Path) -> tuple[Path, Path, Path]:
    shutil.copytree(run, to, symlinks=True)
    base = to / "pilots" / "p1" / "out-pilot"
    return to, Path(f"{base}.stream"), Path(f"{base}.index")


def _last_member(index: Path) -> int:
    """The member the index's last record names (frames are written in the order they end)."""
    return struct.unpack(">8sQIQI", index.read_bytes()[-RECORD:])[1]


def _logs(run: Path, i: int, cwd: Path) -> tuple[int, str, str]:
    """`pwe logs RUN a:i`'s exit status and stderr, and the member's stdout as it reads it."""
    rc, out, err = run_cli("logs", run, f"a:{i}", cwd=cwd, timeout=60)
    assert "Traceback" not in err and ("NOT YOURS" in out) == ("NOT YOURS" in output(run, "a", i)), (out, err)
    return rc, output(run, "a", i), err


def test_a_frame_whose_index_record_was_never_written_is_still_found(made, tmp_path):
    run, stream, index = _copy(made, tmp_path / "run")
    data = index.read_bytes()
    assert len(data) == N * RECORD
    gone = [_last_member(index)]
    index.write_bytes(data[:-RECORD])  # (killed after the frame, before its record)
    gone.append(_last_member(index))
    index.write_bytes(data[:-2 * RECORD] + data[-2 * RECORD:-RECORD][:13])  # (two; the second cut short)
    for i in range(N):
        rc, out, err = _logs(run, i, tmp_path)
        assert rc == 0 and out == f"line {i}\n", (i, rc, out, err)
    assert len(set(gone)) == 2


def test_an_index_with_no_record_at_all_still_finds_every_member(made, tmp_path):
    run, stream, index = _copy(made, tmp_path / "run")
    index.write_bytes(b"")  # (killed after its very first frame)
    for i in range(N):
        rc, out, err = _logs(run, i, tmp_path)
        assert rc == 0 and out == f"line {i}\n", (i, rc, out, err)


def _fake_frame(member: int, text: bytes, good_crc: bool = True) -> bytes:
    body = struct.pack(">QIIIQQdH", member, 1, len(text), 0, 0, 0, 9e9, 1) + b"a" + text
    crc = zlib.crc32(body) if good_crc else zlib.crc32(body) ^ 1
    return b"PWS\x01" + struct.pack(">I", crc) + body


@pytest.mark.parametrize("tail", [
    b"\x00" * 200,                                        # garbage (a disk block of zeros)
    _fake_frame(0, b"NOT YOURS\n")[:-3],                  # a frame cut short
    _fake_frame(0, b"NOT YOURS\n", good_crc=False),      # a frame whose CRC does not match
    b"PWS\x01" + struct.pack(">I", 0) + struct.pack(">QIIIQQdH", 0, 1, (1 << 32) - 1, 0, 0, 0, 0.0, 1),  # a huge length
])
def test_what_is_past_the_last_frame_and_not_a_whole_frame_is_never_output(made, tmp_path, tail):
    run, stream, index = _copy(made, tmp_path / "run")
    with open(stream, "ab") as fh:
        fh.write(tail)
    for i in range(N):
        rc, out, err = _logs(run, i, tmp_path)
        assert rc == 0 and out == f"line {i}\n" and "NOT YOURS" not in out, (i, rc, out, err)


def test_a_whole_frame_past_the_index_is_taken_and_one_after_garbage_is_not(made, tmp_path):
    run, stream, index = _copy(made, tmp_path / "run")
    with open(stream, "ab") as fh:
        fh.write(_fake_frame(0, b"again\n") + b"\x00" * 64 + _fake_frame(1, b"NOT YOURS\n"))
    rc, out, err = _logs(run, 0, tmp_path)
    assert rc == 0 and out in ("line 0\nagain\n", "again\nline 0\n"), (rc, out, err)  # (a frame the writer wrote last)
    rc, out, err = _logs(run, 1, tmp_path)
    assert rc == 0 and out == "line 1\n", (rc, out, err)  # (past garbage: the walk stopped)


def test_an_index_whose_last_record_points_into_a_members_bytes_walks_nowhere(made, tmp_path):
    """A member printing a forged frame, and an index damaged to point at it: the walk starts
    only from the end of a frame that checks out whole, so the forgery stays bytes."""
    run, stream, index = _copy(made, tmp_path / "run")
    forged = _fake_frame(1, b"NOT YOURS\n")
    at = stream.stat().st_size
    with open(stream, "ab") as fh:  # (a whole frame of member 0 whose stdout is the forgery)
        fh.write(_fake_frame(0, forged))
    inner = at + 4 + 4 + struct.calcsize(">QIIIQQdH") + 1  # (where the forgery begins inside it)
    records = index.read_bytes()
    nk = records[:8]
    index.write_bytes(records + struct.pack(">8sQIQI", nk, 5, 1, inner - 7, 7))  # (a record that ends there)
    rc, out, err = _logs(run, 1, tmp_path)
    assert "NOT YOURS" not in out, (rc, out, err)


def test_the_seal_of_a_left_pilot_writes_the_missing_records_back(made, tmp_path):
    from pilot import streams

    run, stream, index = _copy(made, tmp_path / "run")
    data = index.read_bytes()
    index.write_bytes(data[:-RECORD] + data[-RECORD:][:5])
    assert streams.seal(str(stream.parent), 0) > 0  # (sealed: the plain stream is gone)
    assert not stream.exists() and index.read_bytes() == data
    for i in range(N):
        rc, out, err = _logs(run, i, tmp_path)
        assert rc == 0 and out == f"line {i}\n", (i, rc, out, err)


def test_the_seal_never_writes_through_a_link_put_in_the_indexs_place(made, tmp_path):
    from pilot import streams

    run, stream, index = _copy(made, tmp_path / "run")
    outside = tmp_path / "outside.index"
    outside.write_bytes(index.read_bytes()[:-RECORD])
    index.unlink()
    index.symlink_to(outside)
    before = outside.read_bytes()
    streams.seal(str(stream.parent), 0)
    assert outside.read_bytes() == before
