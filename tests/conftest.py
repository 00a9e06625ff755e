import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


@pytest.fixture
def write(tmp_path):
    """write(text, name='wf.yaml') -> Path of a file holding text (str or bytes)."""

    def _write(text, name="wf.yaml"):
        p = tmp_path / name
        if isinstance(text, bytes):
            p.write_bytes(text)
        else:
            p.write_text(text)
        return p

    return _write


def run_cli(*args, cwd=None, timeout=120, env=None):
    """Run the real console entry point in a subprocess: exit status, stdout, stderr.

    Works from any ``cwd`` (e.g. tmp_path, so that ./pwe-runs lands there): the source
    tree is put on PYTHONPATH. ``env`` adds variables to the inherited environment."""
    import os
    import subprocess

    full = dict(os.environ)
    full["PYTHONPATH"] = str(ROOT) + (os.pathsep + full["PYTHONPATH"] if full.get("PYTHONPATH") else "")
    full.update(env or {})
    proc = subprocess.run([sys.executable, "-m", "pwe", *map(str, args)], capture_output=True, text=True, cwd=cwd,
                          timeout=timeout, env=full, stdin=subprocess.DEVNULL)
    return proc.returncode, proc.stdout, proc.stderr
