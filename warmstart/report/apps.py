"""The bench's application catalogue, and how each app is put onto the disk under test.

On an emulated disk the whole tree an app touches (interpreter, libraries, compiler, data) has
to be on that disk, so apps run chrooted in the system image mounted from it (EmuDisk.chroot_argv);
the few files an app needs beyond the image (the synthetic program, its data, a C file) are
copied in first, under FILES_DIR. On the real disk the same commands run on the host, with
those files in a host directory.
"""

import os
import random
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Sequence

from ..errors import WarmstartError
from ..paths import helper_binary

FILES_DIR = "/opt/warmstart-bench"  # inside the chroot (on the emulated disk, not its tmpfs /tmp)

# A dozen heavy standard-library imports: hundreds of small .py/.pyc and .so reads all over /usr/lib.
PY_MODULES = ("asyncio", "email.mime.multipart", "http.client", "xml.etree.ElementTree", "decimal",
              "unittest", "logging.handlers", "concurrent.futures", "urllib.request", "tarfile",
              "sqlite3", "argparse", "json", "csv", "multiprocessing")

HELLO_C = """#include <stdio.h>
#include <stdlib.h>
#include <string.h>
struct item { char name[32]; int count; };
int main(int argc, char **argv)
{
\tstruct item it = { "hello", argc };
\tprintf("%s %d %zu\\n", it.name, it.count, strlen(argv[0]));
\treturn EXIT_SUCCESS;
}
"""

SYNTH_FILES = 4
SYNTH_FILE_MB = 8


@dataclass
class App:
    name: str
    argv: List[str]                      # as run inside the chroot (or on the host for --disk real)
    until: str = "exit"
    builtin: bool = True
    setup_files: Dict[str, bytes] = field(default_factory=dict)   # path under FILES_DIR -> content


def synth_plan(files_dir: str) -> List[str]:
    """A fixed launch plan: reads scattered over four files with CPU bursts between them, so it
    has the paper's shape (I/O-bound on an HDD, with CPU to overlap); same seed, same plan."""
    rng = random.Random(2015)
    steps = []
    for i in range(48):
        f = rng.randrange(SYNTH_FILES)
        off = rng.randrange(0, SYNTH_FILE_MB * 256) * 4096
        steps.append(f"read:{files_dir}/data{f}.bin:{off}:{rng.choice((4096, 16384, 65536))}")
        if i % 4 == 3:
            steps.append(f"cpu:{rng.choice((5, 10, 20))}")
    steps.append("print:synthlaunch done")
    return steps


def catalogue(files_dir: str = FILES_DIR) -> Dict[str, App]:
    imports = ", ".join(PY_MODULES)
    return {
        "python": App("python", ["python3", "-c", f"import {imports}; print('imported {len(PY_MODULES)}')"]),
        "gcc": App("gcc", ["gcc", "-O2", "-c", f"{files_dir}/hello.c", "-o", "/tmp/warmstart-bench-hello.o"],
                   setup_files={"hello.c": HELLO_C.encode()}),
        "node": App("node", ["node", "-e", "require('http'); require('crypto'); require('zlib');"
                             " require('url'); console.log('node up')"]),
        "synth": App("synth", [f"{files_dir}/synthlaunch"] + synth_plan(files_dir)),
    }


def parse_app(spec: str) -> App:
    """--app NAME=COMMAND (COMMAND split like a shell would)."""
    import shlex
    name, sep, command = spec.partition("=")
    if not sep or not name or not command.strip():
        raise WarmstartError(f"bad --app {spec!r}: use NAME=COMMAND, e.g. --app ls='ls -l /usr/bin'")
    if not name.replace("-", "").replace("_", "").isalnum():
        raise WarmstartError(f"bad app name {name!r}: use letters, digits, - and _")
    return App(name, shlex.split(command), builtin=False)


def select(names: Sequence[str], extra: Sequence[str]) -> List[App]:
    """The built-in apps named (all when none) plus the --app ones, in a fixed order."""
    cat = catalogue()
    unknown = [n for n in names if n not in cat]
    if unknown:
        raise WarmstartError(f"unknown bench app {', '.join(unknown)}: built-in apps are "
                             f"{', '.join(cat)}; add others with --app NAME=COMMAND")
    chosen = [cat[n] for n in (names or list(cat))]
    for spec in extra:
        app = parse_app(spec)
        if any(a.name == app.name for a in chosen):
            raise WarmstartError(f"--app {app.name} clashes with an app of that name: rename it")
        chosen.append(app)
    return chosen


def install_files(apps: Sequence[App], target: Path) -> None:
    """Copy what the apps need beyond the system image into target (the files dir as seen from
    the host), then flush it so the first cold launch reads it from the disk, not dirty cache."""
    target.mkdir(parents=True, exist_ok=True)
    for app in apps:
        for rel, content in app.setup_files.items():
            (target / rel).write_bytes(content)
        if app.name == "synth" and app.builtin:
            shutil.copy2(helper_binary("synthlaunch"), target / "synthlaunch")
            rng = random.Random(7)
            for i in range(SYNTH_FILES):
                p = target / f"data{i}.bin"
                if not p.exists() or p.stat().st_size != SYNTH_FILE_MB << 20:
                    p.write_bytes(rng.randbytes(SYNTH_FILE_MB << 20))
    subprocess.run(["sync", "-f", str(target)], check=False)
    os.sync()
