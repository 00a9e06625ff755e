"""A run's state, on disk and in memory: the run directory (rundir.py), its locks (locks.py),
making or reading back a run (runs.py), the journal (journal.py), the one apply() of its
records (state.py), the checkpoint (checkpoint.py), the ready queues (readyqueue.py,
pressure.py), edge events (notify.py) and the service's directory, where runs are also
found (service_store.py)."""
