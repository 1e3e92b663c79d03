"""Fresh, offline user environments for the slow end-to-end tests.

A test venv is created without the base interpreter's site-packages (a fresh
machine's base Python has none of DeviceKit's dependencies) and without pip's
network: the distributions it needs (DeviceKit's runtime dependencies, pip,
and whatever else a test names) are exposed from the *test* environment
through a ``.pth`` file naming a folder of symlinks to exactly those
distributions. A ``.pth`` folder comes after the venv's own site-packages on
``sys.path``, so what the user installs there (devicekit from its wheel) wins.

Used by tests/test_plugin_journey.py and tests/test_porting_guide.py; the
DeviceKit wheel they install is built once per session (conftest.py,
``devicekit_wheel``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def run(cmd, timeout=3600, **kwargs):  # bounds a hung command only (conftest.HUNG_S)
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True,
                          timeout=timeout, **kwargs)


def check(cmd, what, **kwargs):
    result = run(cmd, **kwargs)
    assert result.returncode == 0, (f"{what} failed ({result.returncode}):\n$ "
                                    f"{' '.join(map(str, cmd))}\n{result.stdout}{result.stderr}")
    return result


def runtime_requirements(*names: str) -> set[str]:
    """The named distributions' run-time requirements (no extras),
    transitively, as canonical names (the names themselves not included)."""
    from importlib import metadata
    from packaging.requirements import Requirement

    seen: set[str] = set()
    todo = list(names)
    while todo:
        dist = metadata.distribution(todo.pop())
        for line in dist.requires or ():
            req = Requirement(line)
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            key = req.name.lower().replace("_", "-")
            if key not in seen:
                seen.add(key)
                todo.append(key)
    return seen


def expose_distributions(names: set[str], folder: Path, site_packages: Path) -> None:
    """Links each distribution's top-level entries into ``folder`` and names it in a .pth."""
    from importlib import metadata

    folder.mkdir()
    for name in sorted(names):
        dist = metadata.distribution(name)
        base = Path(dist.locate_file(""))
        tops = {Path(f).parts[0] for f in dist.files or () if not str(f).startswith("..")}
        for top in sorted(tops):
            if (base / top).exists() and not (folder / top).exists():
                (folder / top).symlink_to(base / top)
    site_packages.mkdir(parents=True, exist_ok=True)
    (site_packages / "devicekit-test-deps.pth").write_text(f"{folder}\n")


def user_site_packages(venv: Path) -> Path:
    return venv / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"


def make_venv(venv: Path, expose: set[str]) -> Path:
    """A venv (no pip of its own, no base site-packages) that sees ``expose``
    and their run-time requirements; returns its python. A ``pip`` script in
    its bin folder runs the exposed pip with the venv's python, as the pip a
    fresh venv brings would."""
    check([sys.executable, "-m", "venv", "--without-pip", venv], "venv")
    names = set(expose) | runtime_requirements(*expose)
    expose_distributions(names, venv.parent / f"{venv.name}-deps", user_site_packages(venv))
    python = venv / "bin" / "python"
    pip = venv / "bin" / "pip"
    pip.write_text(f"#!{python}\nimport sys\nfrom pip._internal.cli.main import main\n"
                   f"sys.exit(main())\n")
    pip.chmod(0o755)
    return python


def build_devicekit_wheel(dest: Path) -> Path:
    """DeviceKit's wheel from this checkout. No build isolation, and its
    build-dir setting (build/{wheel_tag}) makes this an incremental rebuild."""
    check([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-q",
           "-w", dest, REPO_ROOT], "building the devicekit wheel",
          env={**os.environ, "CMAKE_BUILD_PARALLEL_LEVEL": "2"})
    (wheel,) = dest.glob("devicekit-*.whl")
    return wheel
