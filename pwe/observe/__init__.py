"""Reading runs back: results (the Python API's RunResult), what commands show (runview.py,
planview.py, hostview.py, treeview.py), members' output (output.py), the trace, queries over
members, a run's event history and the HTML report. Nothing here changes a run."""
