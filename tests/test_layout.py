"""The layout shows the architecture: the packages of warmstart/ import each other one way (no
cycle), the shared pieces (model.py, db/, formats/, devices.py, ...) import none of the stages, and all
SQL is in db/."""

import ast
import re
from collections import defaultdict

from conftest import REPO

PKG = REPO / "warmstart"
STAGES = {"recorder", "analyzer", "replay", "hook", "speculate", "relocate", "portable", "report", "bench",
          "commands", "emudisk"}


def _imports():
    """(importing package or top-level module, imported one) for every warmstart import, local
    (inside functions) ones included: a lazy import is still a dependency."""
    edges = defaultdict(set)
    for path in PKG.rglob("*.py"):
        rel = path.relative_to(PKG).with_suffix("").parts
        here = rel[0]                       # the package, or the top-level module
        base = ["warmstart", *rel[:-1]]     # what a relative import of level 1 starts from
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    parts = base[:len(base) - (node.level - 1)] + (node.module.split(".") if node.module else [])
                    targets = [parts + [a.name] for a in node.names] if not node.module else [parts]
                else:
                    targets = [node.module.split(".")] if node.module else []
            elif isinstance(node, ast.Import):
                targets = [a.name.split(".") for a in node.names]
            else:
                continue
            for t in targets:
                if t[0] == "warmstart" and len(t) > 1 and t[1] != here:
                    edges[here].add(t[1])
    return edges


def test_packages_import_each_other_one_way():
    edges = _imports()
    state, stack = {}, []

    def visit(v):
        state[v] = "open"
        stack.append(v)
        for w in sorted(edges.get(v, ())):
            if state.get(w) == "open":
                raise AssertionError("import cycle: " + " -> ".join(stack[stack.index(w):] + [w]))
            if w not in state:
                visit(w)
        stack.pop()
        state[v] = "done"
    for v in sorted(edges):
        if v not in state:
            visit(v)


def test_shared_pieces_import_no_stage():
    edges = _imports()
    for shared in ("model", "db", "devices", "fiemap", "fs", "signature", "mountinfo", "paths", "errors", "formats"):
        assert not edges.get(shared, set()) & STAGES, (shared, sorted(edges[shared] & STAGES))


def test_all_sql_is_in_db():
    """Every execute()/executemany()/executescript() call of the package is in warmstart/db/."""
    outside = []
    for path in PKG.rglob("*.py"):
        if path.relative_to(PKG).parts[0] == "db":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                    node.func.attr in ("execute", "executemany", "executescript"):
                outside.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert outside == [], outside


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def test_no_private_name_is_used_across_modules():
    """A module's _names are its own: no `from x import _name` and no `module._name` of another
    warmstart module."""
    bad = []
    for path in PKG.rglob("*.py"):
        rel = path.relative_to(REPO)
        modules = set()   # names bound to warmstart modules in this file
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("warmstart")):
                bad += [f"{rel}:{node.lineno}: from {'.' * node.level}{node.module or ''} import {a.name}"
                        for a in node.names if _is_private(a.name)]
                modules |= {a.asname or a.name for a in node.names}
            elif isinstance(node, ast.Import):
                modules |= {(a.asname or a.name).split(".")[0] for a in node.names if a.name.startswith("warmstart")}
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                    and node.value.id in modules and _is_private(node.attr):
                bad.append(f"{rel}:{node.lineno}: {node.value.id}.{node.attr}")
    assert not bad, "private names used across modules:\n" + "\n".join(bad)


C_DIRS = ("replayer", "replayer/speculate", "launchd-hook", "scripts/hddsim")
C_DEFINITION = re.compile(r"^(?!static\b)[A-Za-z_][\w \t\*]*?\b([A-Za-z_]\w*)\s*\([^;]*$", re.M)


def test_c_files_depend_on_each_other_one_way():
    """Within each C component, a file that calls a function another file defines depends on
    it; those dependencies have no cycle (shared helpers live in a file of their own)."""
    import itertools
    for d in C_DIRS:
        files = sorted(p for p in (REPO / d).glob("*.c") if not p.name.startswith("test_"))
        text = {p.name: re.sub(r"/\*.*?\*/|//[^\n]*", "", p.read_text(), flags=re.S) for p in files}
        defined = {name: f for f, t in text.items() for name in C_DEFINITION.findall(t) if name != "main"}
        deps = {f: {defined[n] for n in set(re.findall(r"\b([A-Za-z_]\w*)\s*\(", t))
                    if n in defined and defined[n] != f} for f, t in text.items()}
        for a, b in itertools.combinations(deps, 2):
            assert not (b in deps[a] and a in deps[b]), f"{d}: {a} and {b} call each other's functions"
        # longer cycles: a depth-first search
        state = {}

        def visit(f, path):
            state[f] = "open"
            for g in deps[f]:
                assert state.get(g) != "open", f"{d}: dependency cycle {' -> '.join(path + [f, g])}"
                if g not in state:
                    visit(g, path + [f])
            state[f] = "done"
        for f in deps:
            if f not in state:
                visit(f, [])
