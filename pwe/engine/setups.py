"""The engine's side of per-node setup (``setup_per_node``): the run's sets sent to each
pilot before any task that names one (pilot/nodesetup.py runs them, once per node); a node
whose setup failed journaled (``pwe events``, ``pwe status``); a pilot whose every node
failed, or found no scratch for a member (pilot/tmpdirs.py), takes no more; SETUP_FAILURES
such pilots in a row stop the run, its state intact."""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any

from pilot.nodesetup import SETUP_FAILED
from pilot.wire import BACK, NO_SCRATCH, NODE_SETUP, SETUP, START

from ..base.errors import RunStopped
from ..runstate import records

if TYPE_CHECKING:
    from .handles import PilotHandle
    from .ledger import Ledger

#: Pilots in a row whose every node failed its setup_per_node before the run stops.
SETUP_FAILURES = 3


class Setups:
    """The engine's side of setup_per_node: the run's sets, sent to each pilot before any
    task that names one; a node whose setup failed noted; the run stopped (state intact)
    once the sets failed on every node of SETUP_FAILURES pilots in a row."""

    def __init__(self, sets: dict[str, tuple[list[str], list[str]]], ledger: Ledger):
        self.sets = sets  # {id: (lines, the nodes that need them)}: pwe/engine/tasks.py setup_sets
        self.ledger = ledger
        self.failed_pilots: set[str] = set()  # pilots in a row whose every node failed its setup
        self.stop = ""  # why the run stops (said after the pilots' messages were journaled: check)
        self.said = ""  # what the last failed set said of why (modules, container: pwe/engine/environs.py)

    def check(self) -> None:
        """Stop the run once setup_per_node failed on every node of SETUP_FAILURES pilots in a row."""
        if self.stop:
            raise RunStopped(self.stop)

    def send_to(self, pilot: PilotHandle | None) -> PilotHandle | None:
        """Send a new (or reattached) pilot the run's sets (a pilot takes a set it has already once)."""
        if pilot is None:
            return None
        for sid, (lines, _) in self.sets.items():
            pilot.send({"k": SETUP, "id": sid, "lines": lines})
        return pilot

    def news(self, pilot: PilotHandle, ev: dict[str, Any]) -> None:
        """A pilot's ``node_setup``, its first ``start``, or a ``back`` because its setup
        failed on every node or no node had scratch for a member (pilot/tmpdirs.py;
        :meth:`pwe.engine.intake.Intake.take` calls this for those alone): a node whose setup
        failed is journaled (``pwe events``, ``pwe status``); a pilot whose every node failed
        takes no more (a new one runs its members); SETUP_FAILURES such pilots in a row stop
        the run."""
        if ev.get("k") == START:  # (a pilot's first member: the pilots that could start none are no longer in a row)
            if pilot.id not in self.failed_pilots:
                self.failed_pilots = set()
            return
        if ev.get("k") == NODE_SETUP:
            if ev.get("rc") == 0:
                self.failed_pilots = set()
                return
            pilot.setup_failed_on(str(ev.get("node")))
            self.said = last_words(str(ev.get("log") or ""))
            self.ledger.take(records.note(f"pilot {pilot.id}: setup_per_node failed on node {ev.get('node')} (exit "
                                          f"{ev.get('rc')}{'; ' + self.said if self.said else ''}): no member that "
                                          f"needs it runs there; its output: {ev.get('log')}", time.time(), p=pilot.id,
                                          node=ev.get("node")))
        elif ev.get("k") == BACK and str(ev.get("why") or "").startswith((SETUP_FAILED, NO_SCRATCH)):
            why = str(ev.get("why"))
            if why.startswith(SETUP_FAILED):
                pilot.refuse(ev.get("n"), ev.get("m"))
            if not pilot.full:
                pilot.stop_taking()  # (it finishes what it runs and leaves; the next pilot tries its nodes)
                self.failed_pilots.add(pilot.id)
                if why.startswith(NO_SCRATCH):
                    self.ledger.take(records.note(f"pilot {pilot.id}: {why}: its members go to another pilot, no "
                                                  "attempt spent", time.time(), p=pilot.id))
                if len(self.failed_pilots) < SETUP_FAILURES:
                    return
                if why.startswith(SETUP_FAILED):
                    said = f"; the last said: {self.said}" if self.said else ""
                    self.stop = (f"setup_per_node failed on every node of {len(self.failed_pilots)} pilots in a row "
                                 f"(see {pilot.dir}/setup-*.log{said}): fix the lines, then resume")
                else:
                    self.stop = (f"{len(self.failed_pilots)} pilots in a row found no scratch for a member on any "
                                 f"of their nodes; the last: {why[len(NO_SCRATCH):].strip(' ()')}: free the nodes' "
                                 "scratch, or give the host a 'scratch:' that takes files")


def last_words(log: str) -> str:
    """The last ``pwe: ...`` line of a set's log (what its modules' or container's lines say
    of a failure: pwe/engine/environs.py), control characters shown; "" for none. Its last
    4 KB are read, a regular file only (pwe.base.regular)."""
    from ..base.regular import open_regular
    from ..base.text import shown

    try:
        with open_regular(log, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            fh.seek(max(0, size - 4096))
            tail = fh.read(4096).decode("utf-8", "replace")
    except (OSError, ValueError):
        return ""
    said = [line for line in tail.splitlines() if line.startswith("pwe: ")]
    return shown(said[-1][:300]) if said else ""
