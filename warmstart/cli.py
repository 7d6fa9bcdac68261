"""The `warmstart` command: parses options, calls the library, prints. No logic lives here."""

import json
import sys

import click

from .db import open_db
from .errors import WarmstartError


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


@click.group(name="warmstart", context_settings={"help_option_names": ["-h", "--help"]})
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


# Subcommands, one module each (warmstart/commands/); the list is the CLI's table of contents.
# --- commands: each helper adds its own line here ---
from .commands.export import export; cli.add_command(export)  # noqa: E402
from .commands.import_ import import_; cli.add_command(import_)  # noqa: E402
from .commands.speculate import fallback; cli.add_command(fallback)  # noqa: E402
from .commands.record import record; cli.add_command(record)  # noqa: E402
from .commands.recordings import recordings; cli.add_command(recordings)  # noqa: E402
from .commands.analyze import analyze; cli.add_command(analyze)  # noqa: E402
from .commands.profile_disk import profile_disk; cli.add_command(profile_disk)  # noqa: E402
from .commands.show import show; cli.add_command(show)  # noqa: E402
from .commands.bench import bench; cli.add_command(bench)  # noqa: E402
from .commands.hook import hook; cli.add_command(hook)  # noqa: E402
from .commands.relocate import relocate; cli.add_command(relocate)  # noqa: E402
from .commands.run import run; cli.add_command(run)  # noqa: E402
from .commands.report import report; cli.add_command(report)  # noqa: E402
from .commands.dbinfo import db_info; cli.add_command(db_info)  # noqa: E402


def run_click(group, prog: str) -> None:
    """Run a click group as a program: user errors become one line on stderr, never a traceback."""
    try:
        group.main(standalone_mode=False, prog_name=prog)
    except WarmstartError as e:
        click.echo(f"{prog}: {e}", err=True)
        sys.exit(e.exit_code)
    except click.exceptions.Abort:
        click.echo(f"{prog}: interrupted", err=True)
        sys.exit(130)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)


def main():
    run_click(cli, "warmstart")


if __name__ == "__main__":
    main()
