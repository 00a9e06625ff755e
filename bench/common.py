"""What every benchmark script shares: where the source tree is, and the environment that
runs pwe from it the way an installed pwe runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("pwe", "pilot", "hostinfo", "protocols")


def pwe_env(**extra: str) -> dict[str, str]:
    """os.environ with the source tree importable, its bytecode compiled first.

    An installed pwe has its bytecode compiled by pip. A source tree run under
    PYTHONDONTWRITEBYTECODE (set on this machine) would compile every module of the
    engine and the pilot on every start, which no user pays.
    """
    subprocess.run([sys.executable, "-m", "compileall", "-q", *(str(ROOT / d) for d in PACKAGES)], check=True)
    return dict(os.environ, PYTHONPATH=str(ROOT), **extra)
