"""The pilot's helper on another node: one ssh session per node, members forked there.

Started by the pilot as ``ssh NODE python3 -m pilot.nodeagent``; reads JSON lines on
stdin and answers on stdout (standard library only):

    in:  {"k": "run", "id": N, "argv": [...], "cmd": SHELL_CMD, "cwd": DIR, "env": {...}}
         {"k": "kill", "id": N, "sig": 15}
    out: {"k": "started", "id": N, "pid": P} | {"k": "ended", "id": N, "rc": RC}
         {"k": "failed", "id": N, "rc": 126|127, "why": "..."}

It ends, killing its members, when stdin closes: the pilot is gone, or the connection is.
Members get the same treatment as on the pilot's own node: own directory, own session,
stdout/stderr files there.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import sys

from .spawn import Spawner, member_base_env, reaped, start_failure


def main() -> None:
    out = sys.stdout.buffer
    base_env = member_base_env()
    running: dict[int, int] = {}  # pid -> id
    by_id: dict[int, int] = {}    # id -> pid
    spawner = Spawner()

    def say(**msg) -> None:
        out.write(json.dumps(msg, separators=(",", ":")).encode() + b"\n")
        out.flush()

    def run(msg: dict) -> None:
        env = base_env.copy()
        env.update(msg.get("env") or {})
        argv = msg["argv"]
        try:
            pid = spawner.spawn(argv, env, msg["cwd"], msg.get("cmd") or " ".join(argv))
        except OSError as exc:
            rc, why = start_failure(exc)
            say(k="failed", id=msg["id"], rc=rc, why=why)
            return
        running[pid] = msg["id"]
        by_id[msg["id"]] = pid
        say(k="started", id=msg["id"], pid=pid)

    rfd, wfd = os.pipe()
    os.set_blocking(rfd, False)
    os.set_blocking(wfd, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
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
        for pid, rc, usage in reaped(lambda: running):
            ident = running.pop(pid, None)
            if ident is not None:
                by_id.pop(ident, None)
                try:
                    say(k="ended", id=ident, rc=rc, **usage)
                except BrokenPipeError:
                    pass


if __name__ == "__main__":
    main()
