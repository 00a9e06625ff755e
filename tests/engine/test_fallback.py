"""fallback: local — a host whose scheduler is absent runs its members on this machine,
with a warning at plan time; one whose scheduler is there is used as written."""

import json
import os

from helpers import run_cli

# LoadLeveler is installable nowhere: its commands are really absent here (the tests'
# llemu is not on this PATH)
PATH = "/usr/local/bin:/usr/bin:/bin"


def _setup(tmp_path, fallback="local"):
    (tmp_path / "hosts.yaml").write_text(f"""hosts:
  ll: {{protocol: loadleveler, cores_per_node: 16, max_nodes: 2, fallback: {fallback}, env: {{SITE: bluegene}},
        setup: ["module load python"]}}
  cluster: {{protocol: slurm, cores_per_node: 8, max_nodes: 1, fallback: local}}
""")
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: fb\ndefaults: {host: ll}\nnodes:\n  m:\n    parameters: {i: {range: [0, 6]}}\n"
                  "    run: echo \"i={{ i }} site=$SITE\" >> ledger; echo where=$(hostname) >> $PWE_OUTPUTS\n"
                  "    scheduling: {maxWallTime: 30, account: proj1}\n")
    return wf


def test_plan_warns_and_the_run_runs_here(tmp_path):
    wf = _setup(tmp_path)
    env = {"PATH": PATH}
    rc, out, err = run_cli("plan", str(wf), "--hosts", str(tmp_path / "hosts.yaml"), cwd=tmp_path, env=env)
    assert rc == 0, err
    line = next(l for l in (out + err).splitlines() if "fallback: local" in l)
    assert "host 'll' (loadleveler): llsubmit, llq, llcancel not found here" in line
    assert "setup line(s) are not run" in line
    rc, out, err = run_cli("run", str(wf), "--hosts", str(tmp_path / "hosts.yaml"), "--run-dir", tmp_path / "run",
                           cwd=tmp_path, env=env)
    assert rc == 0, err
    assert "fallback: local" in err
    ledger = sorted((tmp_path / "run").rglob("ledger"))
    lines = sorted(l for p in ledger for l in p.read_text().splitlines())
    assert lines == [f"i={i} site=bluegene" for i in range(6)]  # each once, with the host's env
    info = json.loads((tmp_path / "run" / "run.json").read_text())
    assert info["lanes"]["ll"]["host_def"]["protocol"] == "local"  # resume keeps the stand-in
    assert info["lanes"]["ll"]["host_def"]["cores_per_node"] == os.cpu_count()


def test_a_host_whose_scheduler_is_there_is_not_replaced(slurm_cluster, tmp_path):
    wf = _setup(tmp_path)
    rc, out, err = run_cli("plan", str(wf), "--host", "cluster", "--hosts", str(tmp_path / "hosts.yaml"),
                           cwd=tmp_path, env={"PATH": PATH})
    assert rc == 0 and "fallback" not in out + err and "#SBATCH" in out


def test_without_fallback_an_absent_scheduler_is_not_replaced(tmp_path):
    wf = _setup(tmp_path, fallback="none")
    rc, out, err = run_cli("plan", str(wf), "--hosts", str(tmp_path / "hosts.yaml"), cwd=tmp_path, env={"PATH": PATH})
    said = (out + err).replace(str(tmp_path), "TMP")  # (the test's own directory is named after it)
    assert rc == 0 and "fallback" not in said and "# @ job_name" in out


def test_a_bad_fallback_value_is_one_line(tmp_path):
    wf = _setup(tmp_path, fallback="elsewhere")
    rc, out, err = run_cli("validate", str(wf), "--hosts", str(tmp_path / "hosts.yaml"), cwd=tmp_path)
    assert rc == 2
    line, = err.strip().splitlines()
    assert "hosts.yaml:2:" in line and "fallback" in line
