"""The `warmstart` command: parses options, calls the library, prints. No logic lives here."""

import importlib
import json
import sys

import click

from .db import connection, open_db
from .errors import as_user_error


class Context:
    """What every command gets: the database path, opened on first use."""

    def __init__(self, db_path):
        self.db_path = db_path
        self._conn = None

    @property
    def db(self):
        if self._conn is None:
            self._conn = open_db(self.db_path)
        return self._conn


def json_option(f):
    """The shared --json flag: print one JSON document instead of text."""
    return click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")(f)


def emit(obj, as_json, text=None):
    """Print obj as JSON, or text (a string or a callable returning one) for people."""
    if as_json:
        click.echo(json.dumps(obj, indent=2, sort_keys=True, default=str))
    elif text is not None:
        click.echo(text() if callable(text) else text)


# Subcommands, one module each (warmstart/commands/); the table is the CLI's table of contents.
# name -> (module in warmstart/commands/, attribute). A command's module, and whatever it imports,
# is loaded only when that command runs: `warmstart run` is part of a launch and must start fast.
COMMANDS = {
    "record": ("record", "record"),
    "recordings": ("recordings", "recordings"),
    "forget": ("forget", "forget"),
    "analyze": ("analyze", "analyze"),
    "profile-disk": ("profile_disk", "profile_disk"),
    "show": ("show", "show"),
    "run": ("run", "run"),
    "hook": ("hook", "hook"),
    "export": ("export", "export"),
    "import": ("import_", "import_"),
    "fallback": ("speculate", "fallback"),
    "relocate": ("relocate", "relocate"),
    "bench": ("bench", "bench"),
    "report": ("report", "report"),
    "db-info": ("dbinfo", "db_info"),
}


class LazyGroup(click.Group):
    """A group whose commands are imported on first use (see COMMANDS)."""

    def list_commands(self, ctx):
        return sorted(COMMANDS)

    def get_command(self, ctx, name):
        if name not in COMMANDS:
            return None
        module, attr = COMMANDS[name]
        return getattr(importlib.import_module(f"{__package__}.commands.{module}"), attr)


@click.group(name="warmstart", cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--db", "db_path", envvar="WARMSTART_DB", type=click.Path(dir_okay=False),
              help="SQLite database (default /var/lib/warmstart/warmstart.db as root, "
                   "$XDG_DATA_HOME/warmstart/warmstart.db otherwise; env WARMSTART_DB).")
@click.version_option(package_name="warmstart")
@click.pass_context
def cli(ctx, db_path):
    """Record an application's cold launch once; prefetch it on every later launch.

    \b
    Examples:
      warmstart record --name pyimport -- python3 -c 'import json, email, asyncio'
      warmstart analyze pyimport
      warmstart run -- python3 -c 'import json, email, asyncio'
    """
    ctx.obj = Context(db_path)


def run_click(group, prog: str) -> None:
    """Run a click group as a program: user errors become one line on stderr, never a traceback."""
    try:
        group.main(standalone_mode=False, prog_name=prog)
    except click.exceptions.Abort:
        click.echo(f"{prog}: interrupted", err=True)
        sys.exit(130)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except Exception as e:
        user = as_user_error(e, connection.last_opened)
        if user is None:
            raise
        click.echo(f"{prog}: {user}", err=True)
        sys.exit(user.exit_code)


def main():
    run_click(cli, "warmstart")


if __name__ == "__main__":
    main()
