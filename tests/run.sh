#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs what the tests need, starts the
# real test services and clusters (SLURM + munge, qsub, SSH nodes, Redis:
# tests/services/setup.sh; a four-node SLURM and a Grid Engine cell: tests/cluster/up.sh,
# which runs setup.sh first), lints
# (ruff, and import-linter's layer contracts from pyproject.toml), then pytest.
# Usage: bash tests/run.sh [pytest args]
#        bash tests/run.sh --quick [pytest args]
# The whole suite runs in two passes (below): the tests that need no service on every core,
# then the real ones one at a time; given -m, one pass of what it selects.
# --quick is the inner loop: the tests marked neither `real` (they need a test service) nor
# `slow` (tests/slow.txt), in parallel on every core (pytest-xdist); it starts no service.
# docs/development.md says which to run when.
set -euo pipefail
cd "$(dirname "$0")/.."
quick=
if [ "${1:-}" = "--quick" ]; then
    quick=1
    shift
fi
python3 -m venv .venv
.venv/bin/pip install --quiet --disable-pip-version-check -e '.[test,web,docs,tui]'
echo "run.sh: ruff check"
.venv/bin/ruff check .
echo "run.sh: lint-imports (the layers: the rooms of pwe over hostinfo over protocols over pwe.base over pilot)"
layers=$(.venv/bin/lint-imports --no-cache) || { echo "$layers"; exit 1; }
echo "$layers" | grep -E " KEPT| BROKEN"
if [ -n "$quick" ]; then
    echo "run.sh: --quick: the tests neither real nor slow, on $(nproc) cores; no test service is started"
    exec .venv/bin/python -m pytest -m "not real and not slow" -n auto --durations=15 "$@"
fi
if [ "$(id -u)" = 0 ]; then
    if ! bash tests/cluster/up.sh; then
        if [ -n "${CI:-}" ]; then
            echo "run.sh: the test services did not start (output above); under CI that is a failure" >&2
            exit 1
        fi
        echo "run.sh: some test services did not start (output above); their tests will be skipped" >&2
    fi
else
    echo "run.sh: not root: the service tests (SLURM, PBS, SSH nodes) will be skipped"
fi
for a in "$@"; do
    if [ "$a" = -m ]; then  # (a selection of the caller's own: one pass, as asked)
        exec .venv/bin/python -m pytest "$@"
    fi
done
# Two passes: the tests that need no service side by side on every core (the quick tier's
# set runs so in every inner loop, and the slow ones so whenever tests/slow_list.py measures
# them), then the real ones one at a time (they share the machine's test services and
# clusters).
# Exit status 5 (no test collected: a caller's selection that one pass does not hold) is
# no failure unless neither pass collected a test.
set +e
.venv/bin/python -m pytest -m "not real" -n auto "$@"
first=$?
echo "run.sh: the real tests, one at a time"
.venv/bin/python -m pytest -m real "$@"
second=$?
set -e
for rc in "$first" "$second"; do
    if [ "$rc" != 0 ] && [ "$rc" != 5 ]; then
        exit "$rc"
    fi
done
if [ "$first" = 5 ] && [ "$second" = 5 ]; then
    exit 5
fi
exit 0
