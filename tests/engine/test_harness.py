"""The harness that hunts (tests/harness.py), a bounded number of its sequences: real
`pwe` processes through random runs, kills, edits, resumes, retries, halts, cancels and
second runs, each step checked from the members' own ledger. bench/soak.py runs it for
longer and writes what it found; each defect found becomes an ordinary test."""

from hypothesis import HealthCheck, settings

from harness import Hunt

Hunt.TestCase.settings = settings(max_examples=3, stateful_step_count=7, deadline=None, derandomize=True, database=None,
                                  suppress_health_check=list(HealthCheck), print_blob=True)
TestHunt = Hunt.TestCase
