"""The command line: ``pwe`` (main.py) and its command groups, each in a module of its own;
base.py holds what they share. The only room that prints to a terminal."""
