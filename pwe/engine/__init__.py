"""The engine: its loop (loop.py), which holds its parts: the run's books (ledger.py), the
pilots registry and lanes (handles.py), taking in what pilots say (intake.py), starting and
watching pilots (pilots.py), feeding them (feed.py, tasks.py), pwe pilot requests (pilotctl.py;
the client's side, pilotask.py), setup_per_node (setups.py), and recovering after a crash
(recovery.py); cancelling and starting engines in the background (control.py), and a run staged to a host without shared
file systems (remote.py)."""
