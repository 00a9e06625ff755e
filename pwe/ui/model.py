"""Runs as the dashboard reads them: each run's plan and state read once (the checkpoint,
then the journal's tail: :func:`pwe.runstate.checkpoint.load`) and kept up to date by applying
only what the journal gained since (:func:`pwe.runstate.journal.replay` from a byte offset, the
one replay every reader uses), so a page of a 10^6-member run's members costs a page,
not a replay. The trace (for the timeline and the per-pilot progress) is built the
first time it is asked for, then kept up to date the same way.

At most :data:`KEEP` runs are kept (the least recently used goes first).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

#: How many runs are kept read.
KEEP = 8
#: A run is brought up to date at most this often (seconds).
FRESH = 0.5
#: A journal longer than this has its trace (the timeline's) read from its last TRACE_TAIL bytes.
WHOLE_TRACE, TRACE_TAIL = 64 * 1024 * 1024, 16 * 1024 * 1024


class LoadedRun:
    """One run's plan, state and (once asked for) trace, with the journal offsets they
    are as of."""

    def __init__(self, run_dir: Path):
        from ..runstate.checkpoint import load
        from ..runstate.runs import check_journal, read

        self.dir = run_dir
        self.lock = threading.RLock()
        self.info, self.plan = read(run_dir)
        check_journal(run_dir)
        self.state, replayed, _ = load(run_dir, self.plan)
        self.end, self.lines = replayed.end, replayed.lines
        self.trace: Any = None
        self.trace_end = self.trace_lines = self.partial = 0
        self.checked = time.monotonic()

    @property
    def journal(self) -> Path:
        return self.dir / "journal.jsonl"

    def _size(self) -> int:
        try:
            return self.journal.stat().st_size
        except OSError:
            return 0

    def refresh(self, force: bool = False) -> bool:
        """Apply what the journal gained since; False when the journal shrank (it is not
        the one read: the caller reads the run again)."""
        from ..runstate.journal import replay

        with self.lock:
            now = time.monotonic()
            if not force and now - self.checked < FRESH:
                return True
            self.checked = now
            size = self._size()
            if size < self.end or (self.trace is not None and size < self.trace_end):
                return False
            if size > self.end:
                done = replay(self.journal, self.state.apply, start=self.end, lines=self.lines)
                self.end, self.lines = done.end, done.lines
            if self.trace is not None and size > self.trace_end:
                done = replay(self.journal, self.trace.take, start=self.trace_end, lines=self.trace_lines)
                self.trace_end, self.trace_lines = done.end, done.lines
            return True

    def traced(self) -> Any:
        """The run's trace (:class:`pwe.observe.trace.Trace`), read the first time: the whole journal,
        or, of a journal over :data:`WHOLE_TRACE` bytes, its last :data:`TRACE_TAIL` bytes
        (the attempts assigned there: ``self.partial`` is then the offset it starts at)."""
        from ..base.regular import lines, open_regular
        from ..runstate.journal import replay
        from ..observe.trace import Trace

        with self.lock:
            if self.trace is None:
                tr = Trace(self.plan)
                start = 0
                size = self._size()
                if size > WHOLE_TRACE:
                    with open_regular(self.journal, "rb", within=self.dir) as fh:
                        fh.seek(size - TRACE_TAIL)
                        for _ in lines(fh, TRACE_TAIL):  # (to the next whole line)
                            break
                        start = fh.tell()
                done = replay(self.journal, tr.take, start=start)
                self.trace, self.trace_end, self.trace_lines = tr, done.end, done.lines
                self.partial = start
            return self.trace


class Runs:
    """The runs read so far (:class:`LoadedRun`), by directory, least recently used first."""

    def __init__(self, keep: int = KEEP):
        self.keep = keep
        self._runs: OrderedDict[str, LoadedRun] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, run_dir: Path) -> LoadedRun:
        key = str(run_dir)
        with self._lock:
            run = self._runs.get(key)
            if run is not None:
                self._runs.move_to_end(key)
        if run is not None and run.refresh():
            return run
        run = LoadedRun(run_dir)
        with self._lock:
            self._runs[key] = run
            self._runs.move_to_end(key)
            while len(self._runs) > self.keep:
                self._runs.popitem(last=False)
        return run
