"""The pilot's helper that starts members: one per other node (over ssh), and on the
pilot's own node the local spawners (over pipes) that share its slots when it has many.

Started by the pilot as ``ssh NODE python3 -m pilot.nodeagent``, or as a child of the
pilot on its own node; reads JSON lines on stdin and answers on stdout (standard
library only; never pickle):

    in:  {"k": "run", "id": N, "argv": [...], "cmd": SHELL_CMD, "cwd": DIR, "env": {...},
          "made": true (optional: the pilot made DIR already),
          "tmp": PATH (optional: make this member's own $TMPDIR here first, remove it
          when the member ends: pilot/tmpdirs.py)}
         {"k": "kill", "id": N, "sig": 15}
    out: {"k": "started", "id": N, "pid": P}
         {"k": "ended", "id": N, "rc": RC, "cpu": S, "rss": KB}  (rusage of the reaped member)
         {"k": "failed", "id": N, "rc": 126|127, "why": "..."}

What it says in one pass of its loop goes out in one write. It ends, killing its
members, when stdin closes: the pilot is gone, or the connection is. SIGTERM, SIGHUP or
SIGINT (the batch system ending its step) kills its members too, at once. Members get the
same treatment as on the pilot's own node: own directory, own session, stdout/stderr
files there.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import sys

from .spawn import Spawner, member_base_env, reaped, start_failure
from .tmpdirs import make_fresh, remove_tree


def main() -> None:
    out = sys.stdout.buffer
    base_env = member_base_env()
    running: dict[int, int] = {}  # pid -> id
    tmps: dict[int, str] = {}     # pid -> the member's own $TMPDIR, made on this node
    made: set[str] = set()
    by_id: dict[int, int] = {}    # id -> pid
    spawner = Spawner()

    said: list[bytes] = []
    encode = json.JSONEncoder(separators=(",", ":")).encode

    def say(**msg) -> None:
        said.append(encode(msg).encode() + b"\n")

    def send() -> None:
        if said:
            data = b"".join(said)
            said.clear()
            try:
                out.write(data)
                out.flush()
            except BrokenPipeError:
                pass

    def run(msg: dict) -> None:
        env = base_env.copy()
        env.update(msg.get("env") or {})
        argv = msg["argv"]
        tmp = msg.get("tmp")
        try:
            if tmp:  # this node's own fresh $TMPDIR for the member (the pilot's is elsewhere)
                make_fresh(tmp)
            pid = spawner.spawn(argv, env, msg["cwd"], msg.get("cmd") or " ".join(argv), made=bool(msg.get("made")))
        except OSError as exc:
            rc, why = start_failure(exc)
            say(k="failed", id=msg["id"], rc=rc, why=why)
            if tmp:
                remove_tree(tmp)
            return
        if tmp:
            tmps[pid] = tmp
            made.add(tmp)
        running[pid] = msg["id"]
        by_id[msg["id"]] = pid
        say(k="started", id=msg["id"], pid=pid)

    rfd, wfd = os.pipe()
    os.set_blocking(rfd, False)
    os.set_blocking(wfd, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)

    def stopped(signum: int, _frame) -> None:
        # the batch system ends our step (scancel, the allocation's end), or our session
        # hangs up: members run in sessions of their own, which it may not reach (SLURM's
        # proctrack/linuxproc follows parents, and they outlive us as init's). None may
        # outlive us: one left running would finish its work after the pilot handed it
        # back, and run a second time elsewhere. They end now; we leave once all are reaped
        for pid in running:
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass

    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, stopped)
    signal.set_wakeup_fd(wfd)
    sel = selectors.DefaultSelector()
    sel.register(rfd, selectors.EVENT_READ, "child")
    stdin = sys.stdin.buffer.raw
    os.set_blocking(stdin.fileno(), False)
    sel.register(stdin.fileno(), selectors.EVENT_READ, "in")
    partial = b""
    open_in = True
    while open_in or running:
        for key, _ in sel.select(timeout=1.0):
            if key.data == "child":
                try:
                    while os.read(rfd, 4096):
                        pass
                except BlockingIOError:
                    pass
            else:
                try:
                    data = os.read(stdin.fileno(), 1 << 16)
                except BlockingIOError:
                    continue
                if not data:  # the pilot or the connection is gone: so are our members
                    open_in = False
                    sel.unregister(stdin.fileno())
                    for pid in running:
                        try:
                            os.killpg(pid, signal.SIGKILL)
                        except OSError:
                            pass
                    continue
                lines = (partial + data).split(b"\n")
                partial = lines.pop()
                for line in lines:
                    if not line.strip():
                        continue
                    msg = json.loads(line)
                    if msg["k"] == "run":
                        run(msg)
                    elif msg["k"] == "kill" and msg["id"] in by_id:
                        try:
                            os.killpg(by_id[msg["id"]], int(msg.get("sig", 15)))
                        except OSError:
                            pass
        for pid, rc, cpu, rss in reaped(lambda: running):
            ident = running.pop(pid, None)
            if ident is not None:
                by_id.pop(ident, None)
                if pid in tmps:
                    remove_tree(tmps.pop(pid))
                say(k="ended", id=ident, rc=rc, cpu=cpu, rss=rss)
        send()
    for parent in {os.path.dirname(t) for t in made}:  # the pilot's directories here, once empty
        try:
            os.rmdir(parent)
        except OSError:
            pass


if __name__ == "__main__":
    main()
