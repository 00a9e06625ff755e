#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs what the tests need, starts the
# real test services (SLURM + munge, qsub, SSH nodes: tests/services/setup.sh), then pytest.
# Usage: bash tests/run.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/pip install --quiet --disable-pip-version-check -e '.[test]'
if [ "$(id -u)" = 0 ]; then
    if ! bash tests/services/setup.sh; then
        if [ -n "${CI:-}" ]; then
            echo "run.sh: the test services did not start (output above); under CI that is a failure" >&2
            exit 1
        fi
        echo "run.sh: some test services did not start (output above); their tests will be skipped" >&2
    fi
else
    echo "run.sh: not root: the service tests (SLURM, PBS, SSH nodes) will be skipped"
fi
exec .venv/bin/python -m pytest "$@"
