"""``devicekit dev [PATH] --run CMD...``: rebuild a plugin in place, then test that build.

The edit-build-test loop of a plugin project made by ``devicekit new``:

1. configure (once) and build the project with CMake into ``PATH/build/dev``
   (incremental: only what changed recompiles);
2. print the library it built, its sha256 and its build time, so what is
   tested is never in doubt, and, when the same plugin is also installed (an
   entry point of that name), the installed library it shadows (path, sha256,
   build time);
3. run CMD with ``DEVICEKIT_PLUGIN_OVERRIDE`` naming that library, so
   discovery loads the fresh build, ahead of any installed copy, without
   installing anything (the installed copy is not loaded; ``devicekit
   devices`` lists it as shadowed). A devicekit command (``conformance``,
   ``devices``, ``bench``) runs as ``python -m devicekit CMD``, with
   ``--device NAME:0`` added to conformance and bench when no device or
   plugin was given; anything else (``python -m pytest tests``) runs as is.

Exit codes: 0 built (and CMD passed); 2 usage; 3 PATH is not a plugin
project; 4 the build failed; otherwise CMD's own exit status.
"""

import argparse
import datetime
import hashlib
import os
import re
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from ._plugins.registry import ENTRY_POINT_GROUP, OVERRIDE_ENV
from .errors import DeviceKitError

DEVICEKIT_COMMANDS = {"conformance", "devices", "bench"}
NEEDS_DEVICE = {"conformance", "bench"}


class DevError(DeviceKitError):
    exit_code = 1


class NotAProjectError(DevError):
    exit_code = 3


class BuildError(DevError):
    exit_code = 4


def plugin_name(project: Path) -> str:
    """PLUGIN_NAME from src/plugin_info.h (what devicekit new wrote)."""
    info = project / "src" / "plugin_info.h"
    if not (project / "CMakeLists.txt").is_file() or not info.is_file():
        raise NotAProjectError(f"{project} is not a plugin project: expected CMakeLists.txt and "
                               f"src/plugin_info.h (a project made by devicekit new)")
    m = re.search(r'^#define PLUGIN_NAME "([a-z][a-z0-9_]*)"', info.read_text(), re.M)
    if not m:
        raise NotAProjectError(f"{info} has no #define PLUGIN_NAME \"...\"")
    return m[1]


def installed_copies(name: str) -> list:
    """Entry points of the plugin group named ``name``: installed copies."""
    try:
        eps = metadata.entry_points(group=ENTRY_POINT_GROUP)
    except TypeError:  # Python < 3.10
        eps = metadata.entry_points().get(ENTRY_POINT_GROUP, [])
    return [ep for ep in eps if ep.name == name]


def _cmake() -> str:
    cmake = shutil.which("cmake")
    if cmake is None:
        raise BuildError("cmake is not on PATH; devicekit dev builds with CMake "
                         "(pip install cmake, or your system's package)")
    return cmake


def build(project: Path, build_dir: Path, build_type: str, jobs: int) -> None:
    """Configure once, then build incrementally; the tool output goes to stderr."""
    cmake = _cmake()
    steps = []
    if not (build_dir / "CMakeCache.txt").is_file():
        steps.append([cmake, "-S", str(project), "-B", str(build_dir),
                      f"-DCMAKE_BUILD_TYPE={build_type}"])
    steps.append([cmake, "--build", str(build_dir), "--parallel", str(jobs)])
    for cmd in steps:
        # Through sys.stderr (not the inherited fd) so output stays in order
        # with ours and callers that replace sys.stderr see it.
        result = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, errors="replace")
        sys.stderr.write(result.stdout)
        if result.returncode != 0:
            raise BuildError(f"'{' '.join(cmd)}' failed with exit code {result.returncode} "
                             f"(its output is above)")


def built_library(build_dir: Path, name: str) -> Path:
    for suffix in (".so", ".dylib", ".dll"):
        lib = build_dir / f"libdevicekit_{name}{suffix}"
        if lib.is_file():
            return lib
    raise BuildError(f"the build succeeded but {build_dir} holds no libdevicekit_{name}.so; "
                     f"is OUTPUT_NAME in CMakeLists.txt still devicekit_{name}?")


def describe(lib: Path) -> str:
    digest = hashlib.sha256(lib.read_bytes()).hexdigest()
    built = datetime.datetime.fromtimestamp(lib.stat().st_mtime).isoformat(" ", "seconds")
    return f"{lib} (sha256 {digest[:16]}, built {built})"


def describe_installed(ep) -> str:
    """An installed copy: its distribution and library, or why the library
    could not be found (the override applies either way)."""
    dist = getattr(ep, "dist", None)
    who = (f"{dist.metadata['Name']} {dist.version}" if dist is not None
           else f"entry point '{ep.name}'")
    try:
        target = ep.load()
        lib = Path(os.fspath(target() if callable(target) else target)).resolve()
        return f"{who}: {describe(lib)}"
    except Exception as e:  # a broken install must not stop the dev loop
        return f"{who} ('{ep.value}': library not found: {type(e).__name__}: {e})"


def command_for(run: list, name: str) -> list:
    """The argv that runs ``run`` against the fresh build."""
    if not run:
        return []
    if run[0] in DEVICEKIT_COMMANDS:
        args = list(run)
        if args[0] in NEEDS_DEVICE and not any(a.split("=")[0] in ("--device", "--plugin")
                                               for a in args[1:]):
            args[1:1] = ["--device", f"{name}:0"]
        return [sys.executable, "-m", "devicekit", *args]
    return list(run)


def run(args) -> int:
    project = Path(args.path).resolve()
    try:
        name = plugin_name(project)
        build_dir = Path(args.build_dir) if args.build_dir else project / "build" / "dev"
        build(project, build_dir, args.build_type, args.jobs)
        lib = built_library(build_dir, name)
    except DevError as e:
        print(f"devicekit dev: error: {e}", file=sys.stderr)
        return e.exit_code
    print(f"devicekit dev: {name} -> {describe(lib)}", file=sys.stderr)
    for ep in installed_copies(name):
        # Visible on every run: the installed binary is not what is tested.
        print(f"devicekit dev: it shadows the installed {describe_installed(ep)}",
              file=sys.stderr)
    env = dict(os.environ)
    env[OVERRIDE_ENV] = os.pathsep.join([str(lib), *filter(None, [env.get(OVERRIDE_ENV)])])
    cmd = command_for(args.run, name)
    if not cmd:
        print(f"devicekit dev: built. To use it: export {OVERRIDE_ENV}={env[OVERRIDE_ENV]}",
              file=sys.stderr)
        return 0
    print(f"devicekit dev: {OVERRIDE_ENV}={env[OVERRIDE_ENV]} {' '.join(cmd)}",
          file=sys.stderr)
    sys.stderr.flush()
    try:
        return subprocess.run(cmd, env=env).returncode
    except FileNotFoundError:
        print(f"devicekit dev: error: {cmd[0]!r} not found on PATH", file=sys.stderr)
        return 127


def add_parser(sub):
    p = sub.add_parser(
        "dev", help="rebuild a plugin project in place and run a command against that build",
        description="Build the plugin project at PATH with CMake into PATH/build/dev "
                    "(incremental), print the library's path, sha256 and build time (and "
                    "those of an installed copy it shadows), then run CMD with "
                    "DEVICEKIT_PLUGIN_OVERRIDE pointing at it, so it takes precedence over "
                    "any installed copy: no reinstall, never a stale binary. CMD "
                    "'conformance', 'devices' or 'bench' is a devicekit command (--device "
                    "NAME:0 added when missing); anything else runs as is.",
        epilog="examples:\n  devicekit dev --run conformance -k add\n"
               "  devicekit dev path/to/plugin --run python -m pytest tests\n\n"
               "exit codes: 0 ok; 2 usage; 3 not a plugin project; 4 build failed;\n"
               "  else CMD's exit status",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("path", nargs="?", default=".", help="the plugin project (default: .)")
    p.add_argument("--build-dir", default=None, help="default: PATH/build/dev")
    p.add_argument("--build-type", default="Release", help="CMAKE_BUILD_TYPE (default Release)")
    p.add_argument("--jobs", "-j", type=int, default=os.cpu_count() or 1,
                   help="parallel compile jobs (default: all cores)")
    p.add_argument("--run", nargs=argparse.REMAINDER, default=[], metavar="CMD",
                   help="the command to run against the fresh build; everything after "
                        "--run belongs to it")
    p.set_defaults(func=run)
