"""Every subcommand's help says what it is for and what each option does, with its default: a
new user should not need the source to use the command line."""

from __future__ import annotations

import argparse

import pytest

from fabricwatch import __version__
from fabricwatch.cli.main import COMMANDS, parser


def _commands(p: argparse.ArgumentParser, prefix: str = "") -> list[tuple[str, argparse.ArgumentParser]]:
    out = []
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out.append((f"{prefix}{name}", sub))
                out += _commands(sub, f"{prefix}{name} ")
    return out


def test_every_subcommand_is_described_and_every_option_helped_with_its_default():
    top = parser()
    assert "``" not in (top.description or "") and len(top.description or "") > 80
    commands = _commands(top)
    assert {name.split()[0] for name, _ in commands} == set(COMMANDS)
    missing = []
    for name, sub in commands:
        if not sub.description:
            missing.append(f"{name}: no description")
        for action in sub._actions:
            if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
                continue
            flag = "/".join(action.option_strings) or action.dest
            if not action.help:
                missing.append(f"{name} {flag}: no help")
                continue
            takes_value = action.nargs != 0 and action.option_strings
            if (
                takes_value
                and action.default not in (None, argparse.SUPPRESS)
                and "default" not in action.help
            ):
                missing.append(f"{name} {flag}: default {action.default!r} not shown")
    assert not missing, "\n".join(missing)


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        parser().parse_args(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.strip() == f"fabricwatch {__version__}"
