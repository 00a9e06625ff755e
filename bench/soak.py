"""Soak (not part of the suite): the harness that hunts (tests/harness.py) for a chosen time.

    python bench/soak.py [--minutes 30] [--steps 12] [--hogs 0] [--out bench/out/soak.md]

Runs sequences of random real operations and faults on a small workflow (runs, submits,
kill -9 of the engine or the pilot at random moments and at fault points, edits,
resumes, retries, halts, cancels, second runs), each step checked from the members' own
ledger, until the time is up. Hypothesis generates without shrinking (a sequence of real
processes takes seconds; the harness keeps the steps it ran, which is the story). Writes
what it found to ``--out``: each failure with its steps, and the tally (sequences, steps,
sequences per hour). Exit status 1 if anything was found.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from common import ROOT, Hogs

sys.path[:0] = [str(ROOT / "tests"), str(ROOT)]


def main() -> int:
    from hypothesis import HealthCheck, Phase, settings
    from hypothesis.stateful import run_state_machine_as_test

    import harness

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--steps", type=int, default=12, help="steps a sequence at most")
    ap.add_argument("--hogs", type=int, default=0, help="busy loops beside it (one a core)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "soak.md")
    a = ap.parse_args()
    a.out.parent.mkdir(parents=True, exist_ok=True)
    steps = {"n": 0}
    plain_teardown = harness.Hunt.teardown

    def counted(self) -> None:
        steps["n"] += len(self.log)
        plain_teardown(self)

    harness.Hunt.teardown = counted
    found: list[str] = []
    sequences, t0 = 0, time.time()
    deadline = t0 + a.minutes * 60
    with Hogs(a.hogs):
        while time.time() < deadline:
            sequences += 1
            try:
                run_state_machine_as_test(harness.Hunt, settings=settings(
                    max_examples=1, stateful_step_count=a.steps, deadline=None, database=None,
                    phases=[Phase.generate], suppress_health_check=list(HealthCheck)))
            except Exception as exc:  # noqa: BLE001 - a finding, written down
                # (a failure that did not happen again when Hypothesis ran it once more is a
                # FlakyFailure holding the first: timing is real here; what it found stands)
                inner = list(getattr(exc, "exceptions", ())) or [exc]
                text = "\n\n".join(f"{type(e).__name__}: {e}" for e in inner)
                found.append(f"## sequence {sequences}\n\n```\n{text}\n```\n")
                print(f"sequence {sequences}: FOUND {text.splitlines()[0][:300]}", flush=True)
            else:
                print(f"sequence {sequences}: ok", flush=True)
    hours = (time.time() - t0) / 3600
    tally = (f"{sequences} sequences ({steps['n']} commands) in {hours * 60:.1f} min with {a.hogs} CPU hogs: "
             f"{sequences / hours:.0f} sequences an hour; {len(found)} found")
    a.out.write_text(f"# Soak of the harness ({time.strftime('%Y-%m-%d %H:%M')})\n\n{tally}\n\n" + "\n".join(found))
    print(tally)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
