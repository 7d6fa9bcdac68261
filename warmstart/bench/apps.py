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
from typing import Callable, Dict, List, Optional, Sequence

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

# Modules from CPAN (Debian's lib*-perl packages and perl's own dual-life modules): ~120 .pm
# and .so files found through @INC.
PERL_MODULES = ("JSON", "Algorithm::Diff", "Dpkg::Control", "Dpkg::Version", "POSIX", "Data::Dumper",
                "Storable", "Encode", "File::Find", "Getopt::Long", "Time::Local", "HTTP::Tiny",
                "IO::Socket::INET", "File::Temp", "Pod::Usage")

HELLO_PY = """import os
import sys


class Greeter:
    def __init__(self, name):
        self.name = name

    def greet(self):
        return f"hello, {self.name} from {os.getcwd()}"


if __name__ == "__main__":
    print(Greeter(sys.argv[1] if len(sys.argv) > 1 else "world").greet())
"""

# The CPU-heavy launches (issue 25): their CPU between reads is most of their warm launch, so a
# prefetcher has CPU to hide later fetches behind. pycompile imports standard-library packages one
# by one and, between imports, compiles each one's source (read from the disk) three times.
PYCOMPILE = """\"\"\"Import standard-library packages one by one; compile each one's source between imports.\"\"\"
import importlib

PACKAGES = ("json", "email", "xml.dom.minidom", "http.client", "asyncio", "unittest", "logging.handlers",
            "argparse", "tarfile", "decimal", "pydoc", "difflib")
consts = 0
for name in PACKAGES:
    mod = importlib.import_module(name)
    path = getattr(mod, "__file__", None) or ""
    if not path.endswith(".py"):
        continue
    with open(path, encoding="utf-8") as f:
        source = f.read()
    for _ in range(3):
        consts += len(compile(source, path, "exec").co_consts)
print(f"compiled {len(PACKAGES)} packages: {consts} constants")
"""
# perlpod: perl's diagnostics manual (perldiag.pod, 300 KB, in perl-modules) rendered as text and
# as a man page by the Pod::Text and Pod::Man it loads: a tool parsing a real input.
PERLPOD = ("my ($f) = glob '/usr/share/perl/5*/pod/perldiag.pod'; my ($t, $m) = ('', '');"
           " my $p = Pod::Text->new(width => 76); $p->output_string(\\$t); $p->parse_file($f);"
           " $p = Pod::Man->new(center => 'bench', release => 'perl', date => '2015-06-01');"
           " $p->output_string(\\$m); $p->parse_file($f);"
           " printf qq(perldiag: %d text lines, %d man lines\\n), ($t =~ tr/\\n//), ($m =~ tr/\\n//)")

SYNTH_FILES = 4
SYNTH_FILE_MB = 8
# The git app's repository: loose objects (as between two `git gc`s), deterministic history.
REPO_DIRS, REPO_FILES_PER_DIR, REPO_COMMITS = 30, 12, 25


@dataclass
class App:
    name: str
    argv: List[str]                      # as run inside the chroot (or on the host for --disk real)
    until: str = "exit"
    builtin: bool = True
    setup_files: Dict[str, bytes] = field(default_factory=dict)   # path under FILES_DIR -> content
    setup: Optional[Callable[[Path], None]] = None   # builds more under FILES_DIR (as seen from the host)


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


def make_repo(target: Path) -> None:
    """A git repository with a deterministic history under target/repo (same seed, same commit
    ids), built once: REPO_COMMITS commits over REPO_DIRS x REPO_FILES_PER_DIR text files, each
    commit changing a few files in a few directories, objects left loose."""
    repo = target / "repo"
    done = repo / ".git" / "warmstart-bench-complete"
    if done.exists():
        return
    if repo.exists():
        shutil.rmtree(repo)   # an interrupted build
    repo.mkdir(parents=True)
    rng = random.Random(1989)
    words = ["alpha", "beta", "gamma", "delta", "seek", "block", "sector", "cache", "page", "launch",
             "prefetch", "schedule", "segment", "replay", "record", "inode", "extent", "journal"]
    def text(lines):
        return "".join(" ".join(rng.choice(words) for _ in range(rng.randint(3, 12))) + "\n"
                       for _ in range(lines))
    def git(*args, date=0):
        stamp = f"{1_400_000_000 + date * 86_400} +0000"
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(repo), "LC_ALL": "C",
               "GIT_CONFIG_NOSYSTEM": "1", "GIT_AUTHOR_NAME": "Bench", "GIT_AUTHOR_EMAIL": "bench@example.org",
               "GIT_COMMITTER_NAME": "Bench", "GIT_COMMITTER_EMAIL": "bench@example.org",
               "GIT_AUTHOR_DATE": stamp, "GIT_COMMITTER_DATE": stamp}
        r = subprocess.run(["git", "-c", "gc.auto=0", "-c", "init.defaultBranch=main", "-C", str(repo), *args],
                           env=env, capture_output=True)
        if r.returncode != 0:
            raise WarmstartError(f"building the bench's git repository failed (git {args[0]}): "
                                 f"{r.stderr.decode(errors='replace').strip()[:200]}")
    git("init", "-q")
    paths = [Path(f"src/mod{d:02d}/file{f:02d}.txt") for d in range(REPO_DIRS) for f in range(REPO_FILES_PER_DIR)]
    for i in range(REPO_COMMITS):
        changed = paths if i == 0 else rng.sample(paths, 15)
        for rel in changed:
            (repo / rel).parent.mkdir(parents=True, exist_ok=True)
            (repo / rel).write_text(text(rng.randint(20, 120)))
        git("add", "-A")
        git("commit", "-q", "-m", f"change {i}: {rng.choice(words)} {rng.choice(words)}", date=i)
    done.touch()


def catalogue(files_dir: str = FILES_DIR) -> Dict[str, App]:
    imports = ", ".join(PY_MODULES)
    return {
        "python": App("python", ["python3", "-c", f"import {imports}; print('imported {len(PY_MODULES)}')"]),
        "gcc": App("gcc", ["gcc", "-O2", "-c", f"{files_dir}/hello.c", "-o", "/tmp/warmstart-bench-hello.o"],
                   setup_files={"hello.c": HELLO_C.encode()}),
        "node": App("node", ["node", "-e", "require('http'); require('crypto'); require('zlib');"
                             " require('url'); console.log('node up')"]),
        "synth": App("synth", [f"{files_dir}/synthlaunch"] + synth_plan(files_dir)),
        "perl": App("perl", ["perl", *(f"-M{m}" for m in PERL_MODULES),
                             "-e", f"print qq(loaded {len(PERL_MODULES)} modules\\n)"]),
        # history with diffstats: commits, trees and hundreds of loose blobs in .git/objects
        "git": App("git", ["git", "--no-pager", "-C", f"{files_dir}/repo", "log", "--stat", "-n", str(REPO_COMMITS),
                           "--format=%h %ad %s", "--date=short"], setup=make_repo),
        # vim as a user's vimrc starts it: plugins, syntax, filetype plugins and indent for two files
        "vim": App("vim", ["vim", "-X", "-Es", "-N", "-n", "-i", "NONE", "-u", "DEFAULTS",
                           "-c", "runtime! plugin/**/*.vim", "-c", "syntax on", "-c", "filetype plugin indent on",
                           "-c", f"edit {files_dir}/hello.c", "-c", f"edit {files_dir}/hello.py",
                           "-c", "call writefile([&filetype, b:current_syntax, line('$')], '/dev/stdout')",
                           "-c", "qa!"],
                   setup_files={"hello.c": HELLO_C.encode(), "hello.py": HELLO_PY.encode()}),
        "pycompile": App("pycompile", ["python3", f"{files_dir}/pycompile.py"],
                         setup_files={"pycompile.py": PYCOMPILE.encode()}),
        "perlpod": App("perlpod", ["perl", "-MPod::Text", "-MPod::Man", "-e", PERLPOD]),
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
        if app.setup is not None:
            app.setup(target)
        if app.name == "synth" and app.builtin:
            shutil.copy2(helper_binary("synthlaunch"), target / "synthlaunch")
            rng = random.Random(7)
            for i in range(SYNTH_FILES):
                p = target / f"data{i}.bin"
                if not p.exists() or p.stat().st_size != SYNTH_FILE_MB << 20:
                    p.write_bytes(rng.randbytes(SYNTH_FILE_MB << 20))
    subprocess.run(["sync", "-f", str(target)], check=False)
    os.sync()
