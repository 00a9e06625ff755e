"""The dashboard's figures (issue 24), in a real headless Chromium against a real `pwe ui`:

1. time to interactive of a run's page (its DAG, counts and the first page of its member
   table drawn: ``window.pweStats.interactive``, ms after the navigation began) for runs of
   10^3, 10^5 and 10^6 members, with the server cold (a fresh `pwe ui`: the run read from its
   checkpoint) and warm (read before);
2. the server's memory (RSS of `pwe ui`) while 10 browsers watch a running 10^5-member run;
3. member events per second delivered to a page (its event stream: journal records as
   pwe.runstate.journal.unpack gives them) against those the engine wrote meanwhile, and what one
   page takes in when the journal grows faster than an engine here writes it.

Runs are made with `pwe submit` (members `true`, 2 cores); the 10^5 and 10^6 runs are
cancelled once some thousands of members ended (a page shows every member however many
ran). Usage: python bench/ui.py [--sizes 1000,100000,1000000] [--browsers 10] [--json FILE]
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from common import journal_records, parser, write_json  # noqa: E402

WF = ("name: ui{n}\ndefaults: {{host: local}}\nnodes:\n  m:\n"
      "    parameters: {{i: {{range: [0, {n}]}}}}\n    run: 'true'\n")


def pwe(*args, cwd):
    return subprocess.run([sys.executable, "-m", "pwe", *map(str, args)], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


def make_run(cwd: Path, n: int, cancel_after: int | None) -> str:
    (cwd / f"wf{n}.yaml").write_text(WF.format(n=n))
    if cancel_after is None:
        p = pwe("run", f"wf{n}.yaml", "--cores", "2", "--json", cwd=cwd)
        return Path(json.loads(p.stdout)["run_dir"]).name
    p = pwe("submit", f"wf{n}.yaml", "--cores", "2", cwd=cwd)
    run_id = p.stdout.strip()
    journal = cwd / "pwe-runs" / run_id / "journal.jsonl"
    while not journal.exists() or ends_in(journal) < cancel_after:
        time.sleep(0.5)
    pwe("cancel", run_id, cwd=cwd)
    return run_id


class UI:
    def __init__(self, cwd: Path):
        self.proc = subprocess.Popen([sys.executable, "-m", "pwe", "ui", "--port", "0"], cwd=cwd,
                                     env={**os.environ, "PYTHONPATH": str(ROOT)}, stderr=subprocess.PIPE,
                                     stdout=subprocess.DEVNULL, text=True)
        while True:
            line = self.proc.stderr.readline()
            if not line:
                raise SystemExit("pwe ui did not start")
            if "http://" in line:
                self.url = next(w for w in line.split() if w.startswith("http://"))
                self.base = self.url.split("/login")[0]
                return

    def rss_mb(self) -> float:
        with open(f"/proc/{self.proc.pid}/status") as fh:
            return next(int(l.split()[1]) for l in fh if l.startswith("VmRSS")) / 1024

    def stop(self):
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(10)


def browser():
    from test_see import _browser

    return _browser()


def interactive(driver, ui: UI, run_id: str) -> float:
    driver.get(ui.url)
    driver.get("about:blank")
    driver.get(f"{ui.base}/#/run/{run_id}")
    deadline = time.time() + 120
    while time.time() < deadline:
        t = driver.execute_script("return window.pweStats && window.pweStats.interactive")
        if t:
            return t
        time.sleep(0.02)
    raise SystemExit(f"{run_id}: the page never became interactive")


def ends_in(journal: Path) -> int:
    """How many members' ends the journal has so far (its ``ends`` records count each row)."""
    return sum(r["e"] == "end" for r in journal_records(journal.parent, whole=False))


def events_in(journal: Path, start: int, end: int) -> int:
    """The member events (records as pwe.runstate.journal.unpack gives them: what a page is sent)
    in the journal's whole lines from byte ``start`` to about ``end``."""
    from pwe.runstate.journal import decode, unpack

    with open(journal, "rb") as fh:
        fh.seek(start)
        data = fh.read(end - start)
    data = data[:data.rfind(b"\n") + 1]
    return sum(len(unpack(r)) for r in map(decode, data.splitlines(keepends=True)) if r is not None)


def capacity(work: Path, run_id: str, n: int) -> dict:
    """What one page's stream carries when the journal grows faster than an engine writes
    it here: ``n`` note records appended at once to a copy of a finished run; the time
    until the page has counted them all."""
    import shutil

    from pwe.runstate.journal import encode

    copy = work / "pwe-runs" / f"{run_id}-cap"
    shutil.copytree(work / "pwe-runs" / run_id, copy)
    ui = UI(work)
    d = browser()
    try:
        interactive(d, ui, copy.name)
        time.sleep(1.0)
        before = d.execute_script("return window.pweStats.records")
        now = time.time()
        data = b"".join(encode({"e": "note", "what": f"bench {i}", "t": now}) for i in range(n))
        t0 = time.time()
        with open(copy / "journal.jsonl", "ab") as fh:
            fh.write(data)
        while d.execute_script("return window.pweStats.records") - before < n:
            if time.time() - t0 > 300:
                raise SystemExit("the page did not take them all in 300 s")
            time.sleep(0.05)
        dt = time.time() - t0
    finally:
        d.quit()
        ui.stop()
    print(f"{n:,} journal records appended at once ({len(data) / 1e6:.1f} MB): one page had them all after "
          f"{dt:.2f} s: {n / dt:,.0f} records/s", flush=True)
    return {"records": n, "bytes": len(data), "seconds": round(dt, 2), "per_s": round(n / dt)}


def main() -> None:
    ap = parser(__doc__, repeat=None, json_out=True)
    ap.add_argument("--sizes", default="1000,100000,1000000")
    ap.add_argument("--browsers", type=int, default=10)
    ap.add_argument("--watch", type=float, default=20.0, help="seconds the browsers watch the running run")
    ap.add_argument("--capacity", type=int, default=200_000,
                    help="journal records appended at once to a copy of the smallest run, for the rate one page "
                         "takes them in (0: not measured)")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="pwe-bench-ui-"))
    os.environ["PWE_HOME"] = str(work / "home")
    out: dict = {"tti_ms": {}, "machine": os.uname().nodename, "cpus": os.cpu_count()}
    runs = {}
    for n in map(int, a.sizes.split(",")):
        t = time.time()
        runs[n] = make_run(work, n, None if n <= 1000 else 3000)
        print(f"run of {n:,} members made in {time.time() - t:.0f} s: {runs[n]}", flush=True)
    d = browser()
    try:
        for n, run_id in runs.items():
            cold = []
            warm = []
            for _ in range(3):
                ui = UI(work)
                try:
                    cold.append(interactive(d, ui, run_id))
                    warm.append(interactive(d, ui, run_id))
                finally:
                    ui.stop()
            out["tti_ms"][n] = {"cold": sorted(cold)[1], "warm": sorted(warm)[1], "all_cold": cold, "all_warm": warm}
            print(f"{n:>9,} members: time to interactive cold {sorted(cold)[1]:.0f} ms, warm {sorted(warm)[1]:.0f} ms"
                  f"  (medians of 3: {[round(x) for x in cold]}, {[round(x) for x in warm]})", flush=True)
    finally:
        d.quit()

    # a running 10^5-member run watched by N browsers
    (work / "live.yaml").write_text(WF.format(n=100_000).replace("name: ui100000", "name: uilive"))
    ui = UI(work)
    base_rss = ui.rss_mb()
    run_id = pwe("submit", "live.yaml", "--cores", "2", cwd=work).stdout.strip()
    journal = work / "pwe-runs" / run_id / "journal.jsonl"
    drivers = []
    try:
        for _ in range(a.browsers):
            dr = browser()
            dr.get(ui.url)
            dr.get(f"{ui.base}/#/run/{run_id}")
            drivers.append(dr)
        time.sleep(3)
        peak, samples = 0.0, []
        r0 = [dr.execute_script("return window.pweStats.records") for dr in drivers]
        j0 = journal.stat().st_size
        t0 = time.time()
        while time.time() - t0 < a.watch:
            rss = ui.rss_mb()
            samples.append(rss)
            peak = max(peak, rss)
            time.sleep(0.5)
        dt = time.time() - t0
        time.sleep(1.0)  # (the last look of each stream)
        r1 = [dr.execute_script("return window.pweStats.records") for dr in drivers]
        j1 = events_in(journal, j0, journal.stat().st_size)
        j0 = 0
        ends = ends_in(journal)
        per_page = [(b - a) / dt for a, b in zip(r0, r1)]
        out["watch"] = {"browsers": a.browsers, "seconds": round(dt, 1), "rss_before_mb": round(base_rss, 1),
                        "rss_peak_mb": round(peak, 1), "rss_median_mb": round(sorted(samples)[len(samples) // 2], 1),
                        "journal_events_per_s": round((j1 - j0) / dt, 1),
                        "delivered_per_s_per_page": [round(x, 1) for x in per_page],
                        "members_ended_at_end": ends}
        print(f"{a.browsers} browsers on a running 100,000-member run for {dt:.0f} s: pwe ui RSS {base_rss:.0f} MB "
              f"before, peak {peak:.0f} MB; journal {((j1 - j0) / dt):,.0f} member events/s written, delivered to "
              f"each page {min(per_page):,.0f}-{max(per_page):,.0f}/s", flush=True)
    finally:
        for dr in drivers:
            dr.quit()
        pwe("cancel", run_id, cwd=work)
        ui.stop()
    if a.capacity:
        out["capacity"] = capacity(work, runs[min(runs)], a.capacity)
    print(json.dumps(out))
    write_json(a.json, out)


if __name__ == "__main__":
    main()
