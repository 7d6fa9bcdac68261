"""The Debian packages installed here: who depends on whom, and which files each one owns.

Reads dpkg's own database (/var/lib/dpkg/status, /var/lib/dpkg/info/*.list) so the aged
system image is made of exactly the files this machine's packages installed.
"""

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, List, Optional

DPKG = Path(os.environ.get("WARMSTART_DPKG_DIR", "/var/lib/dpkg"))


@dataclass
class Package:
    name: str
    arch: str
    version: str
    installed_kb: int
    depends: List[List[str]] = field(default_factory=list)   # AND of OR-groups of names
    provides: List[str] = field(default_factory=list)


def _names(field_value: str) -> List[List[str]]:
    groups = []
    for group in field_value.split(","):
        alts = []
        for alt in group.split("|"):
            # "libc6 (>= 2.34)", "python3:any", "foo [amd64]" -> the bare name
            name = re.split(r"[\s(\[]", alt.strip(), 1)[0].split(":")[0]
            if name:
                alts.append(name)
        if alts:
            groups.append(alts)
    return groups


def installed() -> Dict[str, Package]:
    """Installed packages by name (the first architecture seen if a name is multi-arch)."""
    text = (DPKG / "status").read_text(errors="replace")
    pkgs: Dict[str, Package] = {}
    for para in text.split("\n\n"):
        fields, key = {}, None
        for line in para.splitlines():
            if line[:1] in (" ", "\t") and key:
                fields[key] += "\n" + line
            elif ":" in line:
                key, _, value = line.partition(":")
                fields[key] = value.strip()
        if "Package" not in fields or not fields.get("Status", "").endswith(" installed"):
            continue
        deps = _names(fields.get("Pre-Depends", "")) + _names(fields.get("Depends", ""))
        p = Package(fields["Package"], fields.get("Architecture", ""), fields.get("Version", ""),
                    int(fields.get("Installed-Size", "0") or 0), deps,
                    [alts[0] for alts in _names(fields.get("Provides", ""))])
        pkgs.setdefault(p.name, p)
    return pkgs


def closure(roots: Iterable[str], pkgs: Dict[str, Package]) -> List[str]:
    """roots plus everything they depend on (first installed alternative), sorted by name."""
    providers: Dict[str, str] = {}
    for p in sorted(pkgs.values(), key=lambda p: p.name):
        for virtual in p.provides:
            providers.setdefault(virtual, p.name)
    seen, todo = set(), list(roots)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for alts in pkgs[name].depends:
            chosen = next((a for a in alts if a in pkgs), None) or \
                next((providers[a] for a in alts if a in providers), None)
            if chosen and chosen not in seen:
                todo.append(chosen)
    return sorted(seen)


def file_list(pkg: Package) -> List[bytes]:
    """The paths dpkg recorded for pkg, in dpkg's order (parents before children)."""
    for candidate in (f"{pkg.name}:{pkg.arch}.list", f"{pkg.name}.list"):
        path = DPKG / "info" / candidate
        if path.exists():
            return [line for line in path.read_bytes().split(b"\n") if line.startswith(b"/")
                    and line != b"/."]
    return []


def missing(names: Iterable[str], pkgs: Dict[str, Package]) -> List[str]:
    return [n for n in names if n not in pkgs]


def version_of(name: str, pkgs: Dict[str, Package]) -> Optional[str]:
    return pkgs[name].version if name in pkgs else None
