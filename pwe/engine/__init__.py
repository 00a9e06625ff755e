"""The engine: its loop (loop.py), the pilots it starts and watches (pilots.py, handles.py,
intake.py, recovery.py, pilotctl.py: one class, PilotWork, in parts), feeding them (feed.py,
tasks.py), cancelling and starting engines in the background (control.py), and a run
staged to a host without shared file systems (remote.py)."""
