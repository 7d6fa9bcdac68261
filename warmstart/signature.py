"""Launch signatures: what tells one app's launches apart, and all of its command line we keep.

`python3 app.py`, `node app.js`, `java -jar x.jar` share their executable with every other
script, so the index entry also carries "needles": the recorded arguments up to and including
the first one that names the program (the script, the -c/-e code, the -m module, the jar).
warmstartd reads the exec's argv from the blocked execve (see docs/hook.md) and requires the
needles to appear in it in order. Other executables match on their identity alone.

The database stores a launch's command line only as far as this signature needs it
(`signature_argv`): argv[0] and the needles, so the arguments a user gave a program (file names,
passwords passed as options) are never written anywhere (docs/security.md).
"""

import os
import re
from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

INTERPRETER = re.compile(rb"^(python[0-9.]*|pypy[0-9.]*|node|nodejs|deno|bun|java|perl[0-9.]*|ruby[0-9.]*|"
                         rb"php[0-9.]*|lua[0-9.]*|Rscript|bash|sh|dash|zsh|ksh|tclsh[0-9.]*|wish[0-9.]*)$")
# options whose next argument names the program (code, module, jar) ...
TAKES_PROGRAM = {b"-c", b"-e", b"-m", b"-jar", b"--eval", b"-E"}
# ... and options whose next argument is a plain value
TAKES_VALUE = {b"-X", b"-W", b"-cp", b"-classpath", b"--class-path", b"-r", b"--require", b"-I"}


def is_interpreter(executable: bytes) -> bool:
    return bool(INTERPRETER.match(os.path.basename(executable)))


def needles(executable: bytes, argv: Sequence[bytes]) -> Tuple[bytes, ...]:
    """The arguments an exec of `executable` must carry to be this app (empty: identity only)."""
    if not is_interpreter(executable):
        return ()
    out = []
    i = 1
    while i < len(argv) and argv[i]:  # an empty argument cannot be a needle (NUL-separated list)
        arg = argv[i]
        out.append(arg)
        if arg in TAKES_PROGRAM or arg in TAKES_VALUE:
            if i + 1 < len(argv) and argv[i + 1]:
                out.append(argv[i + 1])
            if arg in TAKES_PROGRAM:
                break
            i += 2
        elif arg.startswith(b"-"):
            i += 1
        else:
            break  # the script / main class
    return tuple(out)


# ---- launcher wrappers: `env -i VAR=x chroot ROOT CMD` --------------------------------------------
# The executable the kernel opens for such a launch is CMD inside ROOT, not env: the fanotify mark
# and the argv signature must be those of CMD (its argv is what the blocked execve carries).

CHROOT_PATH = b"/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin"


class Wrapper(NamedTuple):
    """`[env [-i] [-u NAME] [NAME=VALUE...]] chroot [--option...] ROOT CMD ...`, read."""
    env: Dict[bytes, bytes]       # env's NAME=VALUE settings
    clear: bool                   # env -i: CMD gets only those
    unset: Tuple[bytes, ...]      # env -u NAME
    chroot_at: int                # index of chroot in argv
    root_at: int                  # index of ROOT; CMD follows


def split_launcher(argv: Sequence[bytes]) -> Optional[Wrapper]:
    """The wrapper around CMD in argv, or None for any other command line (also for an env
    option this does not model). The one reader of these wrappers: signatures, the hook's
    launcher entries and the speculation sandbox all unwrap through it."""
    env: Dict[bytes, bytes] = {}
    clear, unset, i = False, [], 0
    if argv and os.path.basename(argv[0]) == b"env":
        i = 1
        while i < len(argv):
            a = argv[i]
            if a in (b"-i", b"--ignore-environment", b"-"):
                clear = True
                i += 1
            elif a in (b"-u", b"--unset", b"-C", b"--chdir"):
                if a in (b"-u", b"--unset") and i + 1 < len(argv):
                    unset.append(argv[i + 1])
                i += 2   # -C: chroot(1) changes to the new root's / anyway
            elif a.startswith(b"-"):
                return None
            elif b"=" in a:
                k, _, v = a.partition(b"=")
                env[k] = v
                i += 1
            else:
                break
    if i >= len(argv) or os.path.basename(argv[i]) != b"chroot":
        return None
    j = i + 1
    while j < len(argv) and argv[j].startswith(b"--"):
        j += 1
    if j + 1 >= len(argv):
        return None
    return Wrapper(env, clear, tuple(unset), i, j)


def resolve_in_root(root: bytes, path: bytes, limit: int = 40) -> bytes:
    """Resolve `path` as a process chrooted in `root` would (absolute links stay inside it);
    returns the host path. Raises OSError when a component is missing."""
    parts = [p for p in path.split(b"/") if p]
    done = b""
    while parts:
        part = parts.pop(0)
        if part == b".":
            continue
        if part == b"..":
            done = done.rsplit(b"/", 1)[0]
            continue
        host = root + done + b"/" + part
        if os.path.islink(host):
            limit -= 1
            if limit < 0:
                raise OSError(40, "too many levels of symbolic links", host)
            target = os.readlink(host)
            if target.startswith(b"/"):
                done = b""
            parts = [p for p in target.split(b"/") if p] + parts
            continue
        os.lstat(host)
        done += b"/" + part
    return root + (done or b"/")


def unwrap_launcher(argv: Sequence[bytes]):
    """(host path of the executable, argv as exec'd) for `[env ...] chroot ROOT CMD ...`; None for
    any other command. Only these two wrappers are understood: they are what the emulated disk and
    most container-less sandboxes use."""
    w = split_launcher(argv)
    if w is None:
        return None
    j = w.root_at
    path = w.env.get(b"PATH") or CHROOT_PATH
    root = os.path.realpath(argv[j]).rstrip(b"/")
    inner = list(argv[j + 1:])
    cmd = inner[0]
    candidates = [cmd] if b"/" in cmd else [d + b"/" + cmd for d in path.split(b":") if d]
    for c in candidates:
        if not c.startswith(b"/"):
            c = b"/" + c  # chroot's working directory is the new root
        try:
            host = resolve_in_root(root, c)
        except OSError:
            continue
        if os.path.isfile(host) and os.access(host, os.X_OK):
            return host, inner
    return None


WRAPPERS = (b"env", b"chroot")


def is_wrapper(argv: Sequence[bytes]) -> bool:
    return bool(argv) and os.path.basename(argv[0]) in WRAPPERS


def signature_argv(executable: bytes, argv: Sequence[bytes]) -> List[bytes]:
    """The part of a command line the database keeps: argv[0] and the needles. For `[env ...]
    chroot ROOT CMD ...` the wrapper's own words too (its options, PATH=, chroot's options and
    ROOT: the launcher entry and unwrap_launcher need them) but none of env's other assignments,
    then CMD and CMD's needles. A wrapper this module cannot read keeps argv[0] only (the hook
    does not hook it; docs/hook.md). Applying it twice changes nothing."""
    argv = [os.fsencode(a) for a in argv]
    if not argv:
        return []
    w = split_launcher(argv)
    if w is None:
        return argv[:1] if is_wrapper(argv) else [argv[0], *needles(executable, argv)]
    i, j = w.chroot_at, w.root_at
    kept = [w for k, w in enumerate(argv[:j + 1])
            if not (0 < k < i and b"=" in w and not w.startswith((b"-", b"PATH=")))]
    inner = argv[j + 1:]
    return kept + [inner[0], *needles(inner[0], inner)]
