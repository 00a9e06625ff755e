"""A node's ``validate``: a command that says whether a member's result is good.

``validate: ./check out/{{ seed }}.h5`` is a jinja2 template rendered by the one renderer
exactly as ``run`` is (:class:`pwe.workflow.templates.PayloadTemplate`: values
shell-quoted). It runs after the member's payload exits 0, as part of the member's one
command (:func:`with_validate`, the way a ``check`` rides it: pwe/planning/trees.py): in the
member's directory, with its environment (``PWE_*``, ``env:``), within its walltime, its
output in the member's streams. Exit 0: the result is good. Any other: the command exits
with the validate's status after appending ``_pwe_invalid=STATUS`` to ``$PWE_OUTPUTS``
(:data:`pilot.members.INVALID_OUTPUT`), and the pilot ends the member with reason
``invalid`` (pilot/wire.py), which ``retry.on`` may name. A member that ended ``invalid`` is
a failure like any other: never lent for reuse, its products never taken as complete by
the runs after it (pwe/engine/halfmade.py).

The validate's text is part of its members' keys (:mod:`pwe.planning.reuse`, the part
``validate``): a changed validate makes them run again.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pilot.members import INVALID_OUTPUT

from ..base.errors import TemplateError, WorkflowSchemaError
from ..base.source import did_you_mean
from ..workflow.templates import PayloadTemplate, TemplateSyntax


def compiled(nid: str, node: Any, wf: Any, sched: Any, path: Path, line: int | None) -> PayloadTemplate | None:
    """A node's ``validate`` compiled and checked (one line, the file and line of
    ``validate``, for what fails): it runs once after each member, so not under an MPI
    launcher (ranksPerMember 1), and names only properties and the node's parameters."""
    if node.validate is None:
        return None
    return after_member(nid, "validate", node.validate, node, wf, sched, path, line,
                        "would start once per rank under an MPI launcher; check the result in a node of its own, "
                        "or use ranksPerMember 1")


def after_member(nid: str, key: str, text: str, node: Any, wf: Any, sched: Any, path: Path, line: int | None,
                 under_mpi: str) -> PayloadTemplate:
    """A command run once after each member (``key``: ``validate``, or ``check``:
    pwe/planning/plan.py), compiled and checked, one line each (the file and line of
    ``key``): not under an MPI launcher (ranksPerMember 1; ``under_mpi`` says why and what
    to do), a template that compiles, and names only properties and the node's parameters."""
    if (sched.ranksPerMember or 1) > 1:
        raise WorkflowSchemaError(f"node '{nid}': a {key} runs once after each member, which ranksPerMember "
                                  f"{sched.ranksPerMember} {under_mpi}", path, line)
    try:
        template = PayloadTemplate(text)
    except TemplateSyntax as exc:
        raise TemplateError(f"node '{nid}': template error in '{key}': {exc.message}", path, line) from None
    known = set(wf.properties) | set(node.parameters)
    for name in sorted(template.names - known):
        raise TemplateError(f"node '{nid}': '{key}' uses undefined name '{name}'{did_you_mean(name, known)}; "
                            "define it under 'properties' or 'parameters'", path, line)
    return template


def with_validate(cmd: str, validate: str) -> str:
    """One shell command: the member's payload, then (if it exited 0) its validate, each in
    a subshell of its own (an ``exit`` in one ends only it). A validate that fails leaves
    its exit status in ``$PWE_OUTPUTS`` and a line in the member's stderr, and the command
    exits with that status."""
    return (f"(\n{cmd}\n)\nrc=$?\nif [ $rc -ne 0 ]; then exit $rc; fi\n(\n{validate}\n)\nrc=$?\n"
            f'if [ $rc -ne 0 ]; then echo "{INVALID_OUTPUT}=$rc" >> "$PWE_OUTPUTS"; '
            'echo "pwe: the validate exited $rc: the result is not good" >&2; fi\nexit $rc')
