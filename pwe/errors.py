"""The errors pwe raises, drawn as one tree.

    PweError                      anything pwe reports to a user (exit status 1 unless said)
     +-- RunStopped               the run stopped before its end, state intact; resumable (exit status 3)
     +-- InputError               bad input: a workflow, a --set, a data file (exit status 2)
          +-- WorkflowSyntaxError   the file is not well-formed YAML / XML / text
          +-- WorkflowSchemaError   well-formed, but breaks the model or the XSD
          +-- WorkflowGraphError    cycles, unknown or self dependencies, duplicates
          +-- TemplateError         a payload template that cannot render

Backend exceptions (PyYAML, lxml, pydantic, jinja2, OSError) are mapped into these once,
at the boundary where they are raised, so that the CLI prints one line and never a
traceback. Every InputError carries the file and, where the file has one, the line.
"""

from __future__ import annotations

from pathlib import Path


class PweError(Exception):
    """Base of everything pwe reports to a user."""

    exit_status = 1


class RunStopped(PweError):
    """The run stopped before its end for a cause outside its members (a batch system
    refused a pilot, the disk filled, pilots kept breaking). Its state is intact: fix the
    cause, then ``pwe resume RUN``. Exit status 3, so scripts can tell it from failed
    members (1) and bad input (2)."""

    exit_status = 3


class InputError(PweError):
    """Input a user must fix. Renders as ``FILE:LINE: message``."""

    exit_status = 2

    def __init__(self, message: str, file: str | Path | None = None, line: int | None = None):
        super().__init__(message)
        self.message = message
        self.file = str(file) if file is not None else None
        self.line = line

    def __str__(self) -> str:
        where = ""
        if self.file:
            where = f"{self.file}:{self.line}: " if self.line else f"{self.file}: "
        return f"{where}{self.message}"


class WorkflowSyntaxError(InputError):
    """The file cannot be read as YAML / XML at all."""


class WorkflowSchemaError(InputError):
    """The document is well-formed but does not describe a valid workflow."""


class WorkflowGraphError(InputError):
    """The nodes do not form a DAG: a cycle, an unknown or self dependency."""


class TemplateError(InputError):
    """A payload template is malformed or names something undefined."""
