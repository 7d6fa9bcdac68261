"""Install the LD_PRELOAD shim: per user (an environment file to source) or system-wide
(/etc/ld.so.preload). System-wide changes every process on the machine, so uninstall removes
exactly our line and nothing else, and tests use only the per-user form."""

import os
from pathlib import Path
from typing import Optional

from ..errors import WarmstartError
from ..paths import helper_binary, replace_file
from .layout import HookPaths


def shim_path() -> str:
    return str(helper_binary("libwarmstart-preload.so"))


def _rewrite(path: Path, lines) -> None:
    replace_file(path, "".join(line + "\n" for line in lines).encode(), 0o644)


def install(paths: HookPaths, system: bool) -> dict:
    shim = shim_path()
    if system:
        if os.geteuid() != 0:
            raise WarmstartError("a system-wide preload needs root: run as root, or omit --system")
        lines = paths.ld_so_preload.read_text().splitlines() if paths.ld_so_preload.exists() else []
        if shim not in lines:
            paths.ld_so_preload.parent.mkdir(parents=True, exist_ok=True)
            _rewrite(paths.ld_so_preload, lines + [shim])
        return {"preload": "system", "file": str(paths.ld_so_preload), "shim": shim}
    paths.state.mkdir(parents=True, exist_ok=True)
    replace_file(paths.preload_env, (f"export LD_PRELOAD={shim}${{LD_PRELOAD:+:$LD_PRELOAD}}\n"
                                     f"export WARMSTART_INDEX={paths.index}\n").encode(), 0o644)
    return {"preload": "user", "file": str(paths.preload_env), "shim": shim,
            "next_step": f"add `. {paths.preload_env}` to your shell profile (~/.profile)"}


def uninstall(paths: HookPaths) -> Optional[str]:
    """Remove our line from ld.so.preload and the user env file; returns what was removed."""
    removed = []
    if paths.ld_so_preload.exists():
        lines = paths.ld_so_preload.read_text().splitlines()
        keep = [line for line in lines if not line.strip().endswith("/libwarmstart-preload.so")]
        if keep != lines:
            if keep:
                _rewrite(paths.ld_so_preload, keep)
            else:
                paths.ld_so_preload.unlink()
            removed.append(str(paths.ld_so_preload))
    if paths.preload_env.exists():
        paths.preload_env.unlink()
        removed.append(str(paths.preload_env))
    return ", ".join(removed) or None


def status(paths: HookPaths) -> Optional[str]:
    if paths.ld_so_preload.exists() and any(
            line.strip().endswith("/libwarmstart-preload.so") for line in paths.ld_so_preload.read_text().splitlines()):
        return "system"
    if paths.preload_env.exists():
        return "user"
    return None
