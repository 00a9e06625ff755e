"""MkDocs hooks (mkdocs.yml: hooks): the parts of pages generated from the code at build
time (docs/gen/reference.py). A page says where with an HTML comment:

- ``<!-- pwe: workflow-schema -->``: the workflow file's fields, from the JSON Schema;
- ``<!-- pwe: scheduling-fields PROTOCOL -->``: the profile's fields a protocol acts on;
- ``<!-- pwe: settings -->`` and ``<!-- pwe: outputs -->``: the ``PWE_*`` variables pwe
  reads and those it sets, from their one declaration (pilot/settings.py);
- ``<!-- pwe: error-tree -->`` and the troubleshooting page's ``## ErrorClass`` entries:
  the tree of pwe.base.errors, and each class's exit status and meaning under its entry.

An error class without an entry (or an entry naming no class, or one without a fix) stops
the build: a new error cannot ship undocumented."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from mkdocs.exceptions import PluginError

_spec = importlib.util.spec_from_file_location("pwe_docs_reference", Path(__file__).with_name("reference.py"))
reference = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(reference)


def on_page_markdown(markdown, page, config, files):
    if "<!-- pwe: workflow-schema -->" in markdown:
        markdown = markdown.replace("<!-- pwe: workflow-schema -->", reference.workflow_reference())
    if "<!-- pwe: settings -->" in markdown or "<!-- pwe: outputs -->" in markdown:
        markdown = reference.environment(markdown)
    if "<!-- pwe: scheduling-fields" in markdown:
        markdown = reference.expand_markers(markdown)
    if page.file.src_uri == "troubleshooting.md":
        problems = reference.troubleshooting_problems(markdown)
        if problems:
            raise PluginError("troubleshooting: " + "; ".join(problems))
        markdown = reference.troubleshooting(markdown)
    return markdown
