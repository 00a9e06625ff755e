"""A warm Python worker: one process that imports a node's module once and then runs its
function for one member after another (``python: package.module:function``).

Run by the pilot (:mod:`pilot.pyworkers`) as ``PYTHON pyworker.py SPEC WORKSPACE FD`` (inside
a container ``PYTHON - SPEC WORKSPACE FD``, this program on its stdin: pilot/containers.py):
``SPEC`` is ``package.module:function``, ``WORKSPACE`` goes first on ``sys.path`` (the
module is found there, then on the interpreter's own path), ``FD`` is this process's end
of a Unix socket to the pilot. It imports the module at once, then reads calls: JSON
lines (never pickle), each with the two files its member's stdout and stderr go to (sent
with the line, ``SCM_RIGHTS``), and answers each with one JSON line:

- in: ``{"id": N, "kw": {parameters}, "env": {the member's own variables}, "vd": "validate"}``
  (``vd`` where its node has a ``validate``: a shell command run after the function returned,
  :meth:`Worker.validate`)
- out: ``{"id": N, "rc": 0|1|status, "cpu": s, "rss": KB, "out": {outputs}, "why": "..."}`` (``why`` when
  the call failed in a way a traceback does not say: the module could not be imported, the
  function is missing, its return value is not a mapping of JSON values; then ``broken``
  is 1 when no call of this worker can succeed, and the pilot replaces it).

During a call, fds 1 and 2 are the member's files (what it prints is its output; a
traceback goes to its stderr), ``os.environ`` holds the member's variables (restored
after). The return value, a mapping of JSON values, is its outputs, each a text (a string
as it is, any other value as compact JSON), said with the answer (``out``; over
:data:`OUTPUTS_INLINE` bytes of them, appended to ``$PWE_OUTPUTS`` as ``key=value`` lines
instead, as a command would). ``rss``: where the call says ``mem``, the call's peak
resident memory of this process (its peak is reset before the call where the kernel allows
it: ``/proc/self/clear_refs``), which the pilot holds against the member's
``memoryPerMember``; else this process's peak so far.

Should the pilot die while a call runs, the answer cannot be written: the worker exits
with the call's status, so the pilot's guardian (:mod:`pilot.guardian`), which has this
process as the member's, takes that as the member's end. An end of the socket while idle:
it exits with the last call's status (the pilot may have died before it read the answer;
when it had reported that end, the guardian takes this process for none of its members).
Standard library only, and no import of the ``pilot`` package (any Python 3.8 or later may
run it, the user's own through ``PWE_PYTHON``).
"""

import array
import importlib
import json
import os
import socket
import sys
import traceback

#: the most bytes of one call's line (its parameters and variables: the pilot's task was bounded)
MOST = 1 << 22
#: the most bytes of outputs said with the answer; more go to the outputs file (which the
#: pilot reads as a command's, bounded)
OUTPUTS_INLINE = 16 << 10
#: the output a validate that failed leaves, its exit status (pilot.members.INVALID_OUTPUT:
#: this program imports nothing of the pilot's)
INVALID_OUTPUT = "_pwe_invalid"
#: how the names of pwe's own outputs begin (a function may return none of them)
OWN_OUTPUTS = "_pwe_"
_encode = json.JSONEncoder(separators=(",", ":"), allow_nan=False).encode


def load(spec):
    """The function ``spec`` names, or (None, why): one line naming what and where (after
    the traceback of its import, when that raised: each call's stderr says both)."""
    module_name, _, name = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except BaseException as exc:  # noqa: BLE001 - whatever its import raises is the member's to see
        return None, (f"{traceback.format_exc()}pwe: cannot import {module_name}: {type(exc).__name__}: "
                      f"{_one_line(exc)}")
    fn = getattr(module, name, None)
    where = getattr(module, "__file__", None) or module_name
    if fn is None:
        return None, f"{where}: module {module_name} has no function '{name}'"
    if not callable(fn):
        return None, f"{where}: {module_name}.{name} is a {type(fn).__name__}, not a function"
    return fn, ""


def _one_line(exc):
    text = str(exc).strip().splitlines()
    return (text[0] if text else "")[:300]


def outputs_of(value, spec):
    """The outputs of a return value, {name: text}, or (None, why): a mapping whose keys are
    names (no ``=``, no line end) and whose values are JSON values; None: no outputs."""
    if value is None:
        return {}, ""
    if not isinstance(value, dict):
        return None, f"{spec} returned {type(value).__name__}, not a mapping of JSON values (a dict, or None)"
    out = {}
    for key, v in value.items():
        if not isinstance(key, str) or not key.strip() or "=" in key or "\n" in key or "\r" in key:
            return None, f"{spec} returned the key {key!r:.200}: an output's name is text without '=' or a line end"
        if key.strip().startswith(OWN_OUTPUTS):
            return None, f"{spec} returned the key {key!r:.200}: an output's name starting {OWN_OUTPUTS} is pwe's own"
        if isinstance(v, str) and "\n" not in v and "\r" not in v:
            text = v
        else:
            try:
                text = _encode(v)
            except RecursionError:
                return None, f"{spec} returned {key}={type(v).__name__}: not a JSON value (nested too deep)"
            except (TypeError, ValueError) as exc:
                return None, f"{spec} returned {key}={type(v).__name__}: not a JSON value ({_one_line(exc)})"
        out[key.strip()] = text
    return out, ""


def write_outputs(path, out):
    """``key=value`` lines appended to the outputs file ``path`` (the pilot reads them as a
    command's: pilot/members.py); (status, why)."""
    if not path or not out:
        return 0, ""
    try:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write("".join(f"{k}={v}\n" for k, v in out.items()))
    except OSError as exc:
        return 1, f"cannot write its outputs to {path}: {exc.strerror or exc}"
    return 0, ""


def peak_reset():
    """Whether the kernel took the reset of this process's peak resident memory."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def peak_kb(reset):
    """This process's peak resident memory since the reset (else its resident memory now), KB."""
    want = "VmHWM:" if reset else "VmRSS:"
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(want):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def cpu_now():
    import resource

    a, b = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime


class Worker:
    def __init__(self, spec, sock, workspace):
        self.spec = spec
        self.sock = sock
        self.workspace = workspace
        self.fn, self.broken = load(spec)
        self.partial = b""
        sys.stdout.flush()
        sys.stderr.flush()
        self.log = (os.dup(1), os.dup(2))  # where fds 1 and 2 go between calls (the worker's log)

    def receive(self):
        """The next call and its two files, or None when the pilot is gone."""
        fds = []
        while b"\n" not in self.partial:
            try:
                data, anc, _, _ = self.sock.recvmsg(1 << 16, socket.CMSG_LEN(2 * 4))
            except InterruptedError:
                continue
            except OSError:
                return None
            for level, kind, blob in anc:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    got = array.array("i")
                    got.frombytes(blob[:len(blob) - len(blob) % 4])
                    fds.extend(got)
            if not data:
                return None
            self.partial += data
            if len(self.partial) > MOST:
                return None
        line, _, self.partial = self.partial.partition(b"\n")
        return json.loads(line), fds

    def call(self, msg, fds):
        """Run one member's call; its answer (a dict)."""
        sys.stdout.flush()
        sys.stderr.flush()
        if len(fds) >= 2:
            os.dup2(fds[0], 1)
            os.dup2(fds[1], 2)
        for fd in fds:
            os.close(fd)
        env = msg.get("env") or {}
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:  # (each call starts in the workspace, whatever directory the last one left it in)
            os.chdir(self.workspace)
        except OSError:
            pass
        if "tempfile" in sys.modules:  # (a $TMPDIR of its own each call: tempfile caches the first it saw)
            sys.modules["tempfile"].tempdir = None
        answer = {"id": msg.get("id")}
        # (the call's own peak where its memory is limited: two reads of /proc a call)
        reset = peak_reset() if msg.get("mem") else None
        cpu0 = cpu_now()
        rc, why = 1, self.broken.rpartition("pwe: ")[2]
        try:
            if self.fn is None:
                answer["broken"] = 1
                print(self.broken.rpartition("pwe: ")[0], end="", file=sys.stderr)
            else:
                rc, why, out = self.run(msg.get("kw") or {}, env.get("PWE_OUTPUTS"))
                if rc == 0 and not why and msg.get("vd"):
                    rc, out = self.validate(str(msg["vd"]), out, env.get("PWE_OUTPUTS"))
                if out:
                    answer["out"] = out
            if why:
                print(f"pwe: {why}", file=sys.stderr)
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            except (OSError, ValueError):
                pass
            os.dup2(self.log[0], 1)
            os.dup2(self.log[1], 2)
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        answer.update(rc=max(-255, min(255, rc)), cpu=round(cpu_now() - cpu0, 3), rss=peak_kb(reset))
        if why:
            answer["why"] = why[:1000]
        return answer

    def run(self, kw, outputs_path):
        """The function called: (status, why, its outputs: {name: text}, said with its answer;
        None when they were written to ``outputs_path``, the member's ``$PWE_OUTPUTS``: too
        many for a line)."""
        try:
            value = self.fn(**kw)
        except SystemExit as exc:
            code = exc.code
            if code is not None and not isinstance(code, int):
                print(code, file=sys.stderr)
            return (code if isinstance(code, int) else 0 if code is None else 1), "", None
        except BaseException:  # noqa: BLE001 - the member's failure: its traceback is its stderr
            traceback.print_exc()
            return 1, "", None
        try:
            out, why = outputs_of(value, self.spec)
        except Exception as exc:  # noqa: BLE001 - a mapping whose own methods raise: its member's failure, not the worker's end
            out, why = None, (f"{self.spec} returned a {type(value).__name__} that could not be read: "
                              f"{type(exc).__name__}: {_one_line(exc)}")
        if out is None:
            return 1, why, None
        if sum(len(k) + len(v) + 2 for k, v in out.items()) > OUTPUTS_INLINE:
            rc, why = write_outputs(outputs_path, out)
            return rc, why, None
        return 0, "", out

    def validate(self, command, out, outputs_path):
        """The node's ``validate`` after a call that returned: ``/bin/sh -c COMMAND`` in the
        workspace, with the member's environment and streams (a child of this process: its
        walltime, memory and cancel stop it with the worker). (status, outputs): a status
        not 0 is marked in the outputs (:data:`INVALID_OUTPUT`), as a command's validate
        marks its ``$PWE_OUTPUTS`` (pwe/planning/validate.py), so that the pilot ends the
        member ``invalid``; said in the member's stderr in the same words."""
        import subprocess

        sys.stdout.flush()
        sys.stderr.flush()
        try:
            rc = subprocess.call(["/bin/sh", "-c", command], stdin=subprocess.DEVNULL, cwd=self.workspace)
        except OSError as exc:
            print(f"pwe: cannot run the validate: {exc.strerror or exc}", file=sys.stderr)
            rc = 127
        if rc == 0:
            return 0, out
        rc = 128 - rc if rc < 0 else rc  # (killed by a signal: as a shell says it)
        print(f"pwe: the validate exited {rc}: the result is not good", file=sys.stderr)
        mark = {INVALID_OUTPUT: str(rc)}
        if out is None:  # (its outputs went to the file: its mark goes there too)
            write_outputs(outputs_path, mark)
            return rc, None
        return rc, {**out, **mark}

    def answer(self, msg):
        """Say the answer; False when the pilot is gone."""
        try:
            self.sock.sendall(_encode(msg).encode() + b"\n")
            return True
        except OSError:
            return False


def main(argv):
    spec, workspace, fd = argv[1], argv[2], int(argv[3])
    if argv[0] == "-":  # (read from stdin, inside a container: pilot/containers.py; no call reads it)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
    # the module is found in the workspace first (not in the directory of this script)
    here = os.path.dirname(os.path.abspath(globals().get("__file__") or os.devnull))
    sys.path[:] = [workspace] + [p for p in sys.path if p and os.path.abspath(p) != here]
    sock = socket.socket(fileno=fd)
    worker = Worker(spec, sock, workspace)
    last = 0
    while True:
        got = worker.receive()
        if got is None:
            # the pilot is gone, or closed us: our status is the last call's (should the pilot
            # have died before it read the answer, its guardian takes this as the member's end)
            return last
        msg, fds = got
        env = msg.get("env") or {}
        answer = worker.call(msg, fds)
        last = answer["rc"] if 0 <= answer["rc"] <= 255 else 1
        if not worker.answer(answer):
            # the pilot died while the call ran: its outputs where its guardian finds them (as a
            # command's, pilot/tmpdirs.py), and our status is the member's, as above
            write_outputs(env.get("PWE_OUTPUTS"), answer.get("out"))
            return last


if __name__ == "__main__":
    sys.exit(main(sys.argv))
