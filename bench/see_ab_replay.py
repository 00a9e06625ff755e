"""A/B: what the trace's fields cost a replay of the journal (issue 12).

    flock /tmp/pwe-bench.lock python bench/see_ab_replay.py

Needs two copies of one finished 100,000-member run directory under /dev/shm/see-ab/:
``new`` as it was written, and ``old`` with the same journal rewritten without the
trace's fields (``t`` of assign/start/end, ``cpu``, ``rss``, ``nodes``), through the
journal module's own ``encode``. Times ``results.load_state`` (the one reader) on each,
alternately, 5 times; prints the medians.
"""
import statistics
import time
from pathlib import Path

from pwe.observe.results import load_state

walls: dict[str, list[float]] = {}
for _ in range(5):
    for name in ("old", "new"):  # alternately, so that the machine's drift hits both
        t = time.perf_counter()
        load_state(Path("/dev/shm/see-ab") / name)
        walls.setdefault(name, []).append(time.perf_counter() - t)
for name, w in walls.items():
    print(name, f"median {statistics.median(w):.3f} s", " ".join(f"{x:.2f}" for x in w))
