"""Generate ``schemas/workflow.schema.json`` (the YAML form's JSON Schema) from the models.

    python -m pwe.workflow.schema            # rewrite the file
    python -m pwe.workflow.schema --check    # exit 1 if the file has drifted from the models
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from .model import Workflow

SCHEMA_FILE = Path(__file__).resolve().parents[2] / "schemas" / "workflow.schema.json"


def generate() -> str:
    schema = Workflow.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "pwe workflow"
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


def main(argv: list[str]) -> int:
    text = generate()
    if "--check" in argv:
        if not SCHEMA_FILE.exists() or SCHEMA_FILE.read_text() != text:
            print(f"{SCHEMA_FILE} is out of date: run python -m pwe.workflow.schema", file=sys.stderr)
            return 1
        return 0
    SCHEMA_FILE.write_text(text)
    print(f"wrote {SCHEMA_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
