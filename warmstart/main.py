"""The `warmstart` program's entry point.

`warmstart run -- CMD` is part of an app's launch: its start-up is time the user waits.
Loading the click CLI costs ~20 ms before any work (~30 ms after a cache drop), so a plain run
(no global options, no option after `run` but `--json`) goes straight to the run command's body
(commands/run_body.py), with the same defaults, database (WARMSTART_DB or the default) and
error handling; every other command line goes through the CLI (cli.py).
"""

import os
import sys

from .errors import as_user_error

PROG = "warmstart"


def plain_run_command(args):
    """(CMD, as_json) when args is `run [--json] -- CMD...`, or `run [--json] CMD...` with no
    word of CMD that the CLI could take for an option (click would parse run's options even
    after CMD); None otherwise."""
    if args[:1] != ["run"]:
        return None
    as_json = args[1:2] == ["--json"]
    rest = args[2 if as_json else 1:]
    if rest[:1] == ["--"]:
        cmd = rest[1:]
    else:
        cmd = rest
        if any(a.startswith("-") for a in cmd):
            return None
    return (cmd, as_json) if cmd else None


def main():
    plain = plain_run_command(sys.argv[1:])
    if plain is None:
        from .cli import main as cli_main
        cli_main()
        return
    from .commands.run_body import execute
    from .db import connection, open_db
    try:
        cmd, as_json = plain
        status = execute(lambda: open_db(os.environ.get("WARMSTART_DB") or None), cmd, as_json=as_json)
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
