"""The `warmstart` program's entry point.

`warmstart run -- CMD` is part of an app's launch: its start-up is time the user waits.
Loading the click CLI costs ~20 ms before any work, so a plain run (no options after `run`, no
global options) goes straight to the run command's body (commands/run_body.py), with the same
defaults, database (WARMSTART_DB or the default) and error handling; every other command line,
options included, goes through the CLI (cli.py).
"""

import os
import sys

from .errors import as_user_error

PROG = "warmstart"


def plain_run_command(args):
    """CMD when args is `run -- CMD...`, or `run CMD...` with no word of CMD that the CLI could
    take for an option (click would parse run's options even after CMD); None otherwise."""
    if args[:1] != ["run"]:
        return None
    if args[1:2] == ["--"]:
        cmd = args[2:]
    else:
        cmd = args[1:]
        if any(a.startswith("-") for a in cmd):
            return None
    return cmd or None


def main():
    cmd = plain_run_command(sys.argv[1:])
    if cmd is None:
        from .cli import main as cli_main
        cli_main()
        return
    from .commands.run_body import execute
    from .db import connection, open_db
    try:
        status = execute(lambda: open_db(os.environ.get("WARMSTART_DB") or None), cmd)
    except Exception as e:
        user = as_user_error(e, connection.last_opened)
        if user is None:
            raise
        sys.stderr.write(f"{PROG}: {user}\n")
        sys.exit(user.exit_code)
    except KeyboardInterrupt:
        sys.stderr.write(f"{PROG}: interrupted\n")
        sys.exit(130)
    sys.exit(status)
