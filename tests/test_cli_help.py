"""Every registered command has --help with worked examples, and docs/usage.md covers it."""

import re

import click
import pytest
from click.testing import CliRunner

from conftest import REPO
from warmstart.cli import cli

USAGE = REPO / "docs" / "usage.md"


def all_commands(group=cli, prefix=()):
    """(path, command) for every command, descending into sub-groups."""
    for name in group.list_commands(None):
        cmd = group.get_command(None, name)
        path = prefix + (name,)
        yield path, cmd
        if isinstance(cmd, click.Group):
            yield from all_commands(cmd, path)


COMMANDS = list(all_commands())


def test_top_level_help_lists_every_command():
    out = CliRunner().invoke(cli, ["--help"]).output
    assert "Examples:" in out
    for name in cli.list_commands(None):
        assert name in out, f"{name} missing from `warmstart --help`"


@pytest.mark.parametrize("path", [p for p, _ in COMMANDS], ids=lambda p: " ".join(p))
def test_command_help_has_examples(path):
    result = CliRunner().invoke(cli, [*path, "--help"])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "Examples:" in out or "Example:" in out, f"`warmstart {' '.join(path)} --help` shows no example"
    # An example must actually call this command, not just be a heading.
    assert re.search(r"^\s+(sudo )?warmstart .*\b" + re.escape(path[-1]) + r"\b", out, re.M), out


@pytest.mark.parametrize("path", [p for p, _ in COMMANDS], ids=lambda p: " ".join(p))
def test_usage_doc_covers_command(path):
    text = USAGE.read_text()
    heading = re.compile(r"^#+ .*`warmstart " + re.escape(" ".join(path)) + r"\b", re.M)
    assert heading.search(text), f"docs/usage.md has no section for `warmstart {' '.join(path)}`"


@pytest.mark.parametrize("path", [p for p, cmd in COMMANDS if not isinstance(cmd, click.Group)],
                         ids=lambda p: " ".join(p))
def test_command_has_json_option(path):
    out = CliRunner().invoke(cli, [*path, "--help"]).output
    assert "--json" in out, f"`warmstart {' '.join(path)}` has no --json"
