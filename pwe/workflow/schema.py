"""Generate what is derived from the models: ``schemas/workflow.schema.json`` (the YAML
form's JSON Schema) and the checker's tables (:mod:`pwe.base.checker`):
pwe/workflow/check_table.py (the workflow) and hostinfo/check_table.py (hosts files).

    python -m pwe.workflow.schema            # rewrite the files
    python -m pwe.workflow.schema --check    # exit 1 if a file has drifted from the models
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from hostinfo.model import HostsFile

from ..base.derive import derive, table_source
from .model import Workflow

ROOT = Path(__file__).resolve().parents[2]
SCHEMA_FILE = ROOT / "schemas" / "workflow.schema.json"
WORKFLOW_TABLE = ROOT / "pwe" / "workflow" / "check_table.py"
HOSTS_TABLE = ROOT / "hostinfo" / "check_table.py"


def generate() -> str:
    schema = Workflow.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "pwe workflow"
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


def derived() -> dict[Path, str]:
    """Each derived file and the text it should have."""
    return {SCHEMA_FILE: generate(),
            WORKFLOW_TABLE: table_source(derive(Workflow), "The workflow model (pwe/workflow/model.py)"),
            HOSTS_TABLE: table_source(derive(HostsFile), "The hosts file model (hostinfo/model.py)")}


def main(argv: list[str]) -> int:
    files = derived()
    if "--check" in argv:
        stale = [path for path, text in files.items() if not path.exists() or path.read_text() != text]
        for path in stale:
            print(f"{path} is out of date: run python -m pwe.workflow.schema", file=sys.stderr)
        return 1 if stale else 0
    for path, text in files.items():
        path.write_text(text)
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
