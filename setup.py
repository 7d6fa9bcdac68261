"""`pip install .` builds the C helpers (`make helpers`) into the package's libexec/ and copies the
docs the installed package points to (the units' Documentation=) into its docs/; an editable
install (`pip install -e .`, what `make build` does) leaves both to the checkout's build/ and docs/.
"""

import shutil
import subprocess
from pathlib import Path

from setuptools import Distribution, find_packages, setup
from setuptools.command.build_py import build_py

SOURCE = Path(__file__).resolve().parent


class BuildWithHelpers(build_py):
    """build_py, then `make helpers` into a build directory of its own, copied to
    warmstart/libexec/ of the build; and docs/*.md to warmstart/docs/."""

    def run(self):
        super().run()
        if self.editable_mode:
            return
        objdir = Path(self.get_finalized_command("build").build_temp).resolve() / "libexec"
        objdir.mkdir(parents=True, exist_ok=True)
        try:
            subprocess.run(["make", "--no-print-directory", "-C", str(SOURCE), "helpers", f"BUILD={objdir}"],
                           check=True)
        except (OSError, subprocess.CalledProcessError) as e:
            raise SystemExit(f"building warmstart's C helpers failed ({e}): they need gcc, make, "
                             f"liburing-dev, libaio-dev and libseccomp-dev "
                             f"(scripts/install-deps installs them)")
        package = Path(self.build_lib) / "warmstart"
        libexec = package / "libexec"
        libexec.mkdir(parents=True, exist_ok=True)
        for f in objdir.iterdir():
            if f.is_file():
                shutil.copy2(f, libexec / f.name)
        docs = package / "docs"
        docs.mkdir(parents=True, exist_ok=True)
        for f in (SOURCE / "docs").glob("*.md"):
            shutil.copy2(f, docs / f.name)


class PlatformDistribution(Distribution):
    """The wheel holds executables for this machine: tag it for the platform, not py3-none-any."""

    def has_ext_modules(self):
        return True


setup(
    name="warmstart",
    version="0.1.0",
    description="Application-launch prefetcher: record a cold launch once, prefetch it on every later launch",
    packages=find_packages(include=["warmstart", "warmstart.*"]),
    package_data={"warmstart.hook": ["units/*.service"]},
    python_requires=">=3.11",   # tomllib (warmstart/hook/config.py)
    install_requires=["click>=8", "numpy", "matplotlib>=3.5", "pyelftools>=0.29"],
    extras_require={"test": ["pytest", "hypothesis"]},
    entry_points={"console_scripts": ["warmstart = warmstart.main:main"]},
    cmdclass={"build_py": BuildWithHelpers},
    distclass=PlatformDistribution,
)
