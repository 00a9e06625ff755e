"""The pilots of a lane whose nodes have nothing left to run leave at once, not after their
host's idle_timeout (pwe/engine/feed.py, Feeder.let_go): a stage that is over gives its
allocation back while the run's later stages go on. The GPU-partition tests of
tests/planning/test_partition.py see the same on a real SLURM (the first stage's pilot leaves
"exited", not "exited (idle)", and the second stage's job starts at once)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from helpers import ROOT, run_cli, wait_for


def _pilots(run_dir) -> list[dict]:
    rc, out, _ = run_cli("pilot", "list", run_dir, "--json")
    try:
        got = json.loads(out) if rc == 0 else []
    except ValueError:
        return []
    return got if isinstance(got, list) else got.get("pilots", [])


def test_a_stage_that_is_over_lets_its_pilot_go_while_the_next_runs(tmp_path):
    """Two stages on two hosts whose pilots would idle for an hour; the second stage's
    member waits for a file the test makes only once the first stage's pilot is gone: it
    is gone while that member still runs, and it left because it was told to, not idle."""
    ledger, mark = tmp_path / "ledger", tmp_path / "go-on"
    (tmp_path / "hosts.yaml").write_text(
        "hosts:\n  first: {protocol: local, cores_per_node: 1, idle_timeout: 3600}\n"
        "  second: {protocol: local, cores_per_node: 1, idle_timeout: 3600}\n")
    wf = tmp_path / "wf.yaml"
    wf.write_text(f"name: stages\nnodes:\n  a:\n    host: first\n    parameters: {{i: {{range: [0, 3]}}}}\n"
                  f"    run: echo a {{{{ i }}}} >> {ledger}\n"
                  f"  b:\n    host: second\n    after: [a]\n"
                  f"    run: while [ ! -e {mark} ]; do sleep 0.1; done; echo b 0 >> {ledger}\n")
    run_dir = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "pwe", "run", str(wf), "--run-dir", str(run_dir)], cwd=tmp_path,
                            env=dict(os.environ, PYTHONPATH=str(ROOT)), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)

    def first_gone() -> dict | None:
        assert proc.poll() is None, proc.communicate()  # (the run waits for the mark: it cannot end before)
        pilots = {p.get("host"): p for p in _pilots(run_dir)} if (run_dir / "state.json").exists() else {}
        return pilots if (pilots.get("first") or {}).get("state") == "gone" else None

    try:
        pilots = wait_for(first_gone, timeout=240, what="the first stage's pilot gone", step=0.5)
        assert pilots["first"].get("why") == "exited", pilots  # (told to leave; idle it says "exited (idle)")
        assert (pilots.get("second") or {}).get("state") == "running", pilots  # the second stage still runs
    finally:
        mark.touch()
        out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err
    assert sorted(ledger.read_text().splitlines()) == ["a 0", "a 1", "a 2", "b 0"]
