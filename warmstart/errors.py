"""The one exception type a user sees. The CLI turns it into a clean message and exit code."""

import errno
import os
from typing import Optional

SQLITE_FULL = 13   # sqlite3.SQLITE_FULL, without importing sqlite3 here
SQLITE_IOERR = 10  # primary code of every SQLITE_IOERR_* (a -shm file that cannot grow, say)


class WarmstartError(Exception):
    """A problem the user can act on; the message names the problem and the fix."""

    exit_code = 1


def _no_space(path) -> bool:
    try:
        st = os.statvfs(os.path.dirname(os.path.abspath(path)))
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < (1 << 20)


def as_user_error(e: BaseException, db_path=None) -> Optional[WarmstartError]:
    """What the user is told of e, as a WarmstartError (None: a bug, shown as a traceback): e
    itself, or a failure of the machine the user can fix: a full file system, met by SQLite (which then rolls back: no half-written rows; it reports a
    full disk as SQLITE_FULL, or as an I/O error when its -shm file cannot grow: then the free
    space of db_path's file system decides) or by a file write."""
    if isinstance(e, WarmstartError):
        return e
    code = getattr(e, "sqlite_errorcode", None)
    if code == SQLITE_FULL or (code is not None and code & 0xFF == SQLITE_IOERR and db_path
                               and _no_space(db_path)):
        return WarmstartError("the file system of the database is full (SQLite: database or disk is full); "
                              "the change was rolled back: free space there, or pass --db PATH on another "
                              "file system, and run the command again")
    if isinstance(e, OSError) and e.errno == errno.ENOSPC:
        where = f" writing {e.filename}" if e.filename else ""
        return WarmstartError(f"no space left on the device{where}: free space there and run the command again")
    return None
