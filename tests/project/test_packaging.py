"""What `pip install .` (not editable) ships: every package of the source tree and the
files its code opens at run time. A package left out of pyproject.toml works from the
source tree and breaks only for users (pwe.service was)."""

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _config():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_every_package_of_the_tree_is_shipped():
    shipped = set(_config()["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts) for top in ("pwe", "pilot", "hostinfo", "protocols")
             for p in (ROOT / top).rglob("__init__.py")}
    assert found - shipped == set(), f"pyproject.toml [tool.setuptools] packages leaves out {found - shipped}"


def test_every_template_and_page_is_package_data():
    data = _config()["package-data"]
    for pkg, sub in (("protocols", "templates"), ("pwe", "pages")):
        files = [p for p in (ROOT / pkg / sub).iterdir() if p.is_file()]
        assert files and any(g == f"{sub}/*" for g in data.get(pkg, [])), (pkg, sub, data)
