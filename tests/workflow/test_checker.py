"""The checker derived from the pydantic models (pwe/base/checker.py, its tables written by
``python -m pwe.workflow.schema``): its tables stay equal to the models; random documents,
right and wrong, are checked both ways, and wherever the checker vouches for one, pydantic
takes it too and makes the same values; every document pydantic takes, the checker takes
(so the road to the first member never needs pydantic for a good workflow); a run of the
quickstart imports no pydantic; the records behave as the models where pwe uses them."""

from __future__ import annotations

import math
import random
import subprocess
import sys

import pytest
from pydantic import BaseModel, ValidationError

from helpers import ROOT
from hostinfo import records as host_records
from hostinfo.model import Host, HostsFile
from pwe.base.checker import Record, Refused
from pwe.workflow import records as wf_records
from pwe.workflow import schema
from pwe.workflow.model import Scheduling, Workflow

STRINGS = ["", " ", "a", "abc_1", "x-y.z", "T", "seed", "ssh://u@h", "ssh://u@h:22", "-opt", "a b", "line\nbreak",
           "ends\n", "10%", "0%", "150%", "oom", "exit", "walltime", "now+1h", "now+", "2030-01-01T08:00",
           "2030/01/01 08:00:00", "local", "slurm", "pbs", "sge", "1abc", "/abs/path", "rel/path", "*.dat", "../up",
           "a" * 101, "glidein", "batch", "own", "shared", "product", "zip", "pressure", "fifo", "soon", "now",
           "redis://h:6379/0", "redis://:pw@h:6379/0", "spool", "redis", "auto", "srun", "none", "echo {{ x }}",
           "prepare", "simulate", "x\x00y", "ünï", "n1", "pwe-n1"]
INTS = [-1, 0, 1, 2, 3, 5, 64, 100, 101, 255, 256, 1000, 10000, 10001, 10 ** 6, 2 ** 63, 10 ** 400, -10 ** 309]
FLOATS = [0.0, 0.5, 1.0, 1.5, 2.0, 100.5, 101.0, -1.0, math.inf, -math.inf, math.nan, 1e7, 1e-9]


class Odd:
    """A value of no type a document has."""


def junk(rng: random.Random) -> object:
    return rng.choice([None, True, False, rng.choice(INTS), rng.choice(FLOATS), rng.choice(STRINGS), [], {},
                       [rng.choice(STRINGS)], {"k": 1}, ("tuple",), {1, 2}, b"bytes", Odd()])


#: values a field takes more often than not (the rest drawn by type), so that documents of
#: many fields are often right as a whole
GOOD = {"contact": ["local", "local", "ssh://u@h"], "protocol": ["local", "slurm", "pbs", "sge"],
        "transport": ["spool"], "shared_fs": [True], "run": ["echo hi", "echo {{ x }}"], "failed": [3, "10%"],
        "requestedStart": ["now+1h", "2030-01-01T08:00"], "max_queued_pilots": [None, 1], "max_pilots": [5],
        "range": [[0, 5], [0, 10, 2], [1.5, 0, -0.5]], "on": [["oom", 3]], "after": ["a", ["a"]],
        "broker_password_file": [None, "pw"], "commands_dir": [None, "/opt/bin"], "ranksPerNode": [None, 1],
        "Host.nodes": [[], ["n1", "n2"]], "inputs": [None, ["data/*.csv"]], "minCpus": [None, 1], "minWallTime": [None, 1], "minNodes": [None, 1],
        "minTotalMemory": [None, 1], "minWallTimePerMember": [None, 1], "check": [None, "true"], "python": [None, None, None, "mypkg.fits:fit"],
        "container": [None, {"image": "/opt/sim", "runtime": "charliecloud"}], "modules": [None, ["gcc/12"]],
        "validate": [None, "true"], "products": [None, ["r/{{ x }}"], ["r", {"path": "r/x", "nonEmpty": True}]]}


class Gen:
    """Documents drawn from a checker table: mostly of the right shape, some not."""

    def __init__(self, table: dict, rng: random.Random):
        self.table, self.rng = table, rng
        self.junk = 0.01

    def value(self, node: dict, depth: int = 0, hint: str = "") -> object:
        rng = self.rng
        if rng.random() < self.junk or depth > 8:
            return junk(rng)
        good = GOOD.get(hint) or GOOD.get(hint.partition(".")[2])
        if good and rng.random() < 0.8:
            return rng.choice(good)
        t = node["type"]
        if t == "model-ref":
            return self.model(node["name"], depth + 1)
        if t in ("function-after", "function-before", "model"):
            return self.value(node["schema"], depth) if "schema" in node else self.fields(node, depth)
        if t == "nullable":
            return None if rng.random() < 0.2 else self.value(node["schema"], depth)
        if t in ("str", "int", "float", "bool"):
            return self.scalar(node)
        if t == "literal":
            return rng.choice(node["expected"] + [rng.choice(STRINGS)])
        if t == "list":
            return [self.value(node["items"], depth + 1) for _ in range(rng.choice([0, 1, 1, 2, 3, 4]))]
        if t == "dict":
            return {self.key(node["keys"], depth + 1): self.value(node["values"], depth + 1)
                    for _ in range(rng.choice([0, 1, 1, 2, 3]))}
        if t == "union":
            return self.value(rng.choice(node["choices"]), depth)
        if t == "tagged-union":
            return self.value(rng.choice(list(node["choices"].values())), depth)
        raise AssertionError(t)

    def scalar(self, node: dict) -> object:
        rng, t = self.rng, node["type"]
        if t == "str":
            if "pattern" in node and rng.random() < 0.9:
                return rng.choice(["x", "T", "seed_2", "n1", "Run_9"])
            return rng.choice(STRINGS)
        if t == "int":
            if rng.random() < 0.7:
                return rng.randint(max(node.get("ge", 1), 1), min(node.get("le", 100), 100))
            return rng.choice(INTS + [node.get("ge", 1), node.get("le", 1)])
        if t == "float":
            return rng.choice([2.5, 30.0, 7] if rng.random() < 0.6 else FLOATS + INTS[:8])
        return rng.random() < 0.5

    def key(self, node: dict, depth: int) -> object:
        k = self.value(node, depth)
        try:
            hash(k)
        except TypeError:  # (a mapping's key: a list or a mapping cannot be one)
            return self.rng.choice(STRINGS)
        return k

    def model(self, name: str, depth: int = 0) -> dict:
        node = self.table[name]
        while node["type"] != "model":
            node = node["schema"]
        return self.fields(node, depth)

    def fields(self, model: dict, depth: int) -> dict:
        rng = self.rng
        doc = {}
        for name, field in model["fields"].items():
            # (a node's payload is run or python, one of them: run drawn as if required, python seldom)
            required = "default" not in field or f"{model['name']}.{name}" == "Node.run"
            if (required and rng.random() > 0.01) or (not required and rng.random() < 0.3):
                doc[name] = self.value(field["schema"], depth, hint=f"{model['name']}.{name}")
        if rng.random() < 0.01:
            doc[rng.choice(["extra", "Run", "maxWalltime", "nodes_"])] = 1
        return doc


def readable(v: object) -> bool:
    """Whether a reader could have made ``v`` (YAML and XML make these types only; pydantic's
    lax str also takes bytes, which the checker leaves to it)."""
    if isinstance(v, dict):
        return all(readable(k) and readable(x) for k, x in v.items())
    if isinstance(v, list):
        return all(readable(x) for x in v)
    return v is None or type(v) in (bool, int, float, str)


def canon(v: object) -> object:
    """Values with their types (1, 1.0 and True are equal in Python, not in a document)."""
    if isinstance(v, (BaseModel, Record)):
        return (type(v).__name__, sorted(v.model_fields_set), {k: canon(x) for k, x in _values(v).items()})
    if isinstance(v, list):
        return ["list", [canon(x) for x in v]]
    if isinstance(v, dict):
        return ["dict", [(canon(k), canon(x)) for k, x in v.items()]]
    if isinstance(v, float) and math.isnan(v):
        return ("float", "nan")
    return (type(v).__name__, v)


def _values(m: object) -> dict:
    return {k: getattr(m, k) for k in type(m).model_fields}


def both_ways(pyd_cls: type, checker_mod: object, name: str, doc: object) -> tuple[str, str]:
    try:
        want = pyd_cls.model_validate(doc)
    except ValidationError:
        want = None
    try:
        got = checker_mod.check(name, doc)
    except Refused:
        got = None
    if got is not None:
        assert want is not None, f"the checker took what pydantic refuses: {doc!r}"
        assert canon(got) == canon(want), doc
        assert got.model_dump() == want.model_dump(), doc
    return ("ok" if want is not None else "err"), ("ok" if got is not None else "refused")


def test_the_tables_are_derived_from_the_models_as_they_are_now():
    assert schema.main(["--check"]) == 0, "run: python -m pwe.workflow.schema"


@pytest.mark.parametrize("pyd_cls,mod,name,count", [
    (Workflow, wf_records, "Workflow", 4000), (Scheduling, wf_records, "Scheduling", 2000),
    (HostsFile, host_records, "HostsFile", 3000), (Host, host_records, "Host", 3000)],
    ids=["Workflow", "Scheduling", "HostsFile", "Host"])
def test_random_documents_are_judged_as_pydantic_judges_them(pyd_cls, mod, name, count):
    rng = random.Random(f"checker-{name}")
    gen = Gen(mod.TABLE, rng)
    seen = {("ok", "ok"): 0, ("err", "refused"): 0, ("ok", "refused"): 0}
    took_not = []
    for i in range(count):
        gen.junk = (0.0, 0.003, 0.03)[i % 3]
        doc = gen.model(name)
        key = both_ways(pyd_cls, mod, name, doc)
        seen[key] += 1
        if key == ("ok", "refused") and readable(doc):
            took_not.append(doc)
    # both kinds were drawn, many of each (a generator that drew only one kind proves little)
    assert seen[("ok", "ok")] >= count // 20 and seen[("err", "refused")] >= count // 20, seen
    # what pydantic takes from a reader, the checker takes: a good document never needs pydantic
    assert not took_not, f"{len(took_not)} taken by pydantic only, e.g. {took_not[:2]!r}"


def test_every_example_workflow_is_taken_by_the_checker_with_pydantics_values():
    from pwe.base.yaml_reader import read_text, read_yaml

    files = sorted((ROOT / "examples").glob("*.yaml"))
    assert len(files) >= 3
    for path in files:
        raw = read_yaml(path, read_text(path))
        if "nodes" not in raw:
            continue
        assert both_ways(Workflow, wf_records, "Workflow", raw) == ("ok", "ok"), path


def test_the_example_xml_workflows_and_hosts_file_are_taken_by_the_checker():
    from pwe.base.yaml_reader import read_text, read_yaml
    from pwe.workflow.load import read_raw

    xml = sorted((ROOT / "examples").glob("*.xml"))
    assert xml
    for path in xml:
        assert both_ways(Workflow, wf_records, "Workflow", read_raw(path)) == ("ok", "ok"), path
    hosts = ROOT / "examples" / "hosts.yaml"
    assert both_ways(HostsFile, host_records, "HostsFile", read_yaml(hosts, read_text(hosts))) == ("ok", "ok")


def test_a_run_of_the_quickstart_imports_no_pydantic(tmp_path):
    (tmp_path / "wf.yaml").write_text((ROOT / "examples" / "quickstart.yaml").read_text())
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "pwe", "run", "wf.yaml", "--fresh"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "14 done of 14" in proc.stdout
    imported = [line.split("|")[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")]
    assert "pwe.planning.plan" in imported and "hostinfo.registry" in imported  # (the log is what ran)
    assert not [m for m in imported if m.split(".")[0] in ("pydantic", "pydantic_core", "jinja2")]


def test_a_wrong_workflow_is_still_worded_by_pydantic_in_one_line(tmp_path):
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: w\nnodes:\n  a:\n    run: echo\n    retries: -1\n")
    proc = subprocess.run([sys.executable, "-m", "pwe", "validate", str(wf)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [f"{wf}:5: 'nodes.a.retries': must be at least 0 (got -1)"]


def test_records_copy_dump_and_compare_as_the_models_do():
    rng = random.Random("records")
    gen = Gen(host_records.TABLE, rng)
    checked = 0
    while checked < 200:
        doc = gen.model("Host")
        try:
            want = Host.model_validate(doc)
        except ValidationError:
            continue
        got = host_records.check("Host", doc)
        checked += 1
        assert got.model_dump(exclude_defaults=True) == want.model_dump(exclude_defaults=True)
        assert got.model_dump(exclude_none=True) == want.model_dump(exclude_none=True)
        assert got.model_dump(exclude={"name", "contact"}) == want.model_dump(exclude={"name", "contact"})
        copied = got.model_copy(update={"name": "other", "cores_per_node": 7})
        model_copied = want.model_copy(update={"name": "other", "cores_per_node": 7})
        assert canon(copied) == canon(model_copied)
        assert copied != got and got == host_records.check("Host", doc)
        assert got.queued_most == want.queued_most and got.idle_after(True) == want.idle_after(True)
    with pytest.raises(TypeError):
        got.name = "x"


def test_a_merged_profile_is_checked_again_and_a_contradiction_is_pydantics_error():
    lo = wf_records.check("Scheduling", {"minCpus": 8, "maxWallTime": 10})
    assert lo.merged(wf_records.check("Scheduling", {"maxWallTime": 20})).maxWallTime == 20
    merged = lo.merged(wf_records.check("Scheduling", {"ranksPerMember": 4, "threadsPerRank": 2}))
    assert type(merged).__module__ == "pwe.workflow.check_table" and merged.cores_per_member() == 8
    assert merged.model_fields_set == {"minCpus", "maxWallTime", "ranksPerMember", "threadsPerRank"}
    with pytest.raises(ValidationError, match=r"minCpus \(8\) is larger than maxCpus \(2\)"):
        lo.merged(wf_records.check("Scheduling", {"maxCpus": 2}))


@pytest.mark.parametrize("body", [
    "nodes:\n  a:\n    parameters: {{x: {{range: [0, {big}]}}}}\n    run: echo\n",
    "budget: {{coreHours: {big}}}\nnodes:\n  a:\n    run: echo\n",
    "nodes:\n  a:\n    run: echo\n    retry: {{attempts: 2, grow: {{memoryPerMember: {big}}}}}\n",
    "nodes:\n  a:\n    run: echo\n    scheduling: {{maxWallTime: {big}, memoryPerMember: -{big}}}\n",
], ids=["range", "budget", "grow", "scheduling"])
def test_a_number_too_large_for_a_float_is_one_line_not_a_traceback(tmp_path, body):
    """(sizes and counts) A 400-digit integer where a number goes: math.isfinite raised
    OverflowError in the rules (a traceback before this change); now one line, exit 2."""
    wf = tmp_path / "wf.yaml"
    wf.write_text("name: w\n" + body.format(big=10 ** 400))
    proc = subprocess.run([sys.executable, "-m", "pwe", "validate", str(wf)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert len(proc.stderr.strip().splitlines()) == 1 and proc.stderr.startswith(f"{wf}:"), proc.stderr


def test_a_hosts_file_with_a_number_too_large_for_a_float_is_one_line(tmp_path):
    (tmp_path / "wf.yaml").write_text("name: w\nnodes:\n  a:\n    run: echo\n")
    (tmp_path / "hosts.yaml").write_text(f"hosts:\n  big:\n    budget: {{coreHours: {10 ** 400}}}\n"
                                         f"    submit_rate: {10 ** 400}\n")
    proc = subprocess.run([sys.executable, "-m", "pwe", "validate", "wf.yaml"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin",
                                                       "HOME": str(tmp_path)})
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert len(proc.stderr.strip().splitlines()) == 1 and "hosts.yaml:" in proc.stderr and "hosts.big." in proc.stderr
