"""Every option shared by two commands is defined once, in ``cli/options.py``, with one meaning:
walks every parser of ``fabricwatch`` and its subcommands."""

from __future__ import annotations

import argparse
from collections import defaultdict

from fabricwatch.cli import options
from fabricwatch.cli.main import parser
from fabricwatch.streams.metrics_server import WEB_PORTS


def _uses() -> dict[str, list[tuple[str, argparse.Action]]]:
    """Option string -> (command, action) of every command that has it."""
    found: dict[str, list[tuple[str, argparse.Action]]] = defaultdict(list)

    def walk(p: argparse.ArgumentParser, command: str) -> None:
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, f"{command} {name}".strip())
            for flag in action.option_strings:
                if flag not in ("-h", "--help", "--version"):
                    found[flag].append((command, action))

    walk(parser(), "")
    return found


def test_an_option_of_two_commands_has_one_definition():
    wrong = []
    for flag, uses in sorted(_uses().items()):
        if len(uses) < 2:
            continue
        definitions = {getattr(action, "definition", None) for _, action in uses}
        if len(definitions) != 1 or None in definitions:
            where = ", ".join(
                f"{c or 'fabricwatch'} ({getattr(a, 'definition', 'its own')})" for c, a in uses
            )
            wrong.append(f"{flag}: {where}")
    assert not wrong, "options defined more than once:\n" + "\n".join(wrong)


def test_daemons_have_distinct_default_ports_and_use_the_table():
    ports = list(WEB_PORTS.values())
    assert len(set(ports)) == len(ports)
    uses = dict(_uses()["--web-port"])
    assert set(uses) == set(WEB_PORTS)
    assert uses["worker"].default == WEB_PORTS["worker"]
    for daemon, action in uses.items():
        assert str(WEB_PORTS[daemon]) in action.help, daemon


def test_a_required_config_does_not_claim_a_default():
    uses = dict(_uses()["--config"])
    assert uses["alert"].required and "default" not in uses["alert"].help
    assert "built-in defaults" in uses["replay"].help


def test_only_the_options_module_tags_definitions():
    """The tag is what the test above trusts: a command module that tagged its own action could
    pass a second meaning off as the shared one."""
    from pathlib import Path

    cli = Path(options.__file__).parent
    tagging = [
        p.name for p in cli.glob("*.py") if p != Path(options.__file__) and "_defined(" in p.read_text()
    ]
    assert not tagging
