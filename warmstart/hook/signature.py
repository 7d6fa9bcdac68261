"""Launch signatures: how an interpreter-run app is told apart from other uses of its interpreter.

`python3 app.py`, `node app.js`, `java -jar x.jar` share their executable with every other
script, so the index entry also carries "needles": the recorded arguments up to and including
the first one that names the program (the script, the -c/-e code, the -m module, the jar).
warmstartd reads the exec's argv from the blocked execve (see docs/hook.md) and requires the
needles to appear in it in order. Other executables match on their identity alone.
"""

import os
import re
from typing import Sequence, Tuple

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
