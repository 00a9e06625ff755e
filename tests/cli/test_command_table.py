"""The table of ``pwe``'s commands (pwe.cli.main.COMMANDS) and the commands themselves
never drift apart: ``pwe --help`` lists them from the table without importing them
(pwe.cli.base.LazyGroup), and says of each what the command itself would."""

from __future__ import annotations

import importlib
import json
import os
import pkgutil
import subprocess
import sys

import click
import pytest

import pwe.cli
from helpers import ROOT
from pwe.cli.main import COMMANDS, cli


def _reachable(command: click.Command) -> list[click.Command]:
    """``command`` and every command of its groups, however deep."""
    out = [command]
    for sub in getattr(command, "commands", {}).values():
        out += _reachable(sub)
    return out


def test_every_entry_is_the_command_it_names():
    for name, listed in COMMANDS.items():
        module, _, attr = listed.where.partition(":")
        command = getattr(importlib.import_module(module), attr)
        assert isinstance(command, click.Command), listed.where
        assert command.name == name, (name, command.name)
        assert command.hidden == listed.hidden, name
        assert cli.commands[name] is command


def test_every_command_of_the_cli_modules_is_in_the_table():
    """A command defined in a module of pwe.cli and in no group is a top-level command:
    the table must list it (else `pwe` would not know it)."""
    listed = {id(c) for name in COMMANDS for c in _reachable(cli.commands[name])}
    stray = []
    for info in pkgutil.iter_modules(pwe.cli.__path__):
        module = importlib.import_module(f"pwe.cli.{info.name}")
        for attr, value in vars(module).items():
            if isinstance(value, click.Command) and value is not cli and id(value) not in listed:
                stray.append(f"pwe.cli.{info.name}:{attr}")
    assert not stray, f"commands missing from pwe.cli.main.COMMANDS: {stray}"


@pytest.mark.parametrize("limit", [10, 30, 45, 60, 74, 120, 300])
def test_each_line_of_the_listing_is_what_the_command_would_say(limit):
    for name, listed in COMMANDS.items():
        said = click.Command(name, help=listed.short).get_short_help_str(limit)
        assert said == cli.commands[name].get_short_help_str(limit), (name, limit)


_BOTH = """
import json, sys
import click
from pwe.cli.main import COMMANDS, cli
ctx = click.Context(cli, info_name="pwe")
lazy = cli.get_help(ctx)
imported = sorted(m for m in sys.modules if m.startswith("pwe.cli."))
for name in COMMANDS:
    cli.commands[name]
print(json.dumps([lazy, cli.get_help(click.Context(cli, info_name="pwe")), imported]))
"""


@pytest.mark.parametrize("columns", ["40", "80", "200"])
def test_the_help_from_the_table_is_the_help_from_the_commands(columns):
    proc = subprocess.run([sys.executable, "-c", _BOTH], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS=columns))
    assert proc.returncode == 0, proc.stderr
    lazy, loaded, imported = json.loads(proc.stdout)
    assert imported == ["pwe.cli.base", "pwe.cli.main"], imported  # (the listing imported no command)
    assert lazy == loaded
    assert "Commands:" in lazy and "_engine" not in lazy and "  status " in lazy
