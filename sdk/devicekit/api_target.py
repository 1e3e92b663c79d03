"""Which device API version a plugin project targets, and ``devicekit upgrade-api``.

A plugin project carries the header of the device API it is written against
(``include/devicekit/``, copied by ``devicekit new``), and says which version
it claims in ``src/plugin_info.h`` (``PLUGIN_API_MAJOR`` / ``PLUGIN_API_MINOR``).
Building it needs a compiler and CMake, never an installed DeviceKit, so the
version a binary claims is a choice the vendor made, not an accident of
whichever DeviceKit happened to be in the build environment.

The wheel's ``devicekit`` requirement follows from that version through
FIRST_DEVICEKIT below: the first DeviceKit release whose loader accepts a
plugin of that API version (device API rule 3: same major, minor <= its own).
"""

import re
import sys
from pathlib import Path

from . import _op_facts
from ._util import output as _output
from ._op_spec import base_ops, op_count_macro
from .errors import DeviceKitError

# Device API (major, minor) -> the first DeviceKit release (major, minor) that
# loads plugins of that version: the row is the DeviceKit version that ships the
# header. Generated from the spec's "versions" (first_devicekit), so a minor bump
# adds its row there (tests/test_scaffold.py fails if a minor has none).
FIRST_DEVICEKIT = _op_facts.FIRST_DEVICEKIT

# What a project vendors: the device API (device_api.h and its generated op
# part, device_api_ops.h), the plugin helpers (plugin_helpers.h and the parts
# it includes) and the shared plugin runtime (plugin_runtime.h, its C++ part
# plugin_runtime.hpp, plugin_half.h, plugin_philox.h) and plugin_coverage.h
# (a coverage build's counters kept when a worker is stopped).
HEADERS = ("device_api.h", "device_api_ops.h", "plugin_helpers.h", "plugin_helpers_ops.h",
           "plugin_errors.h", "plugin_views.h", "plugin_check_call.h", "plugin_runtime.h",
           "plugin_runtime.hpp", "plugin_half.h", "plugin_philox.h", "plugin_coverage.h")


class ApiTargetError(DeviceKitError):
    """A bad --api value, or a project upgrade-api cannot read or change."""

    exit_code = 7


def parse_version(text: str) -> tuple:
    m = re.fullmatch(r"(\d+)\.(\d+)", text.strip())
    if not m:
        raise ApiTargetError(f"device API version {text!r} is not MAJOR.MINOR (e.g. 1.2)")
    return int(m[1]), int(m[2])


def installed_api() -> tuple:
    from . import _core

    return _core.API_MAJOR, _core.API_MINOR


def check_target(target: tuple) -> None:
    """A version this DeviceKit can scaffold: its own major, a minor it has."""
    major, minor = installed_api()
    if target[0] != major or target[1] > minor:
        raise ApiTargetError(
            f"device API {target[0]}.{target[1]} is not available: this devicekit ships the "
            f"header of device API {major}.{minor} and scaffolds {major}.0 .. {major}.{minor}. "
            f"Hint: install a newer devicekit for a newer minor.")
    if target not in FIRST_DEVICEKIT:
        raise ApiTargetError(f"device API {target[0]}.{target[1]} has no row in "
                             f"devicekit.api_target.FIRST_DEVICEKIT; this is a devicekit bug")


def devicekit_requirement(target: tuple) -> str:
    """``devicekit>=FIRST,<NEXT_MAJOR`` for a plugin claiming API ``target``.

    Lower bound: the first DeviceKit that loads this API version (older ones
    refuse the plugin at load). Upper bound: that DeviceKit's next major, the
    only place the device API major may change.
    """
    major, minor = FIRST_DEVICEKIT[target]
    return f"devicekit>={major}.{minor},<{major + 1}"


def header_dir() -> Path:
    """The folder holding devicekit/device_api.h: installed copy, then source tree."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "include", here.parent.parent / "device_api" / "include"):
        if (candidate / "devicekit" / "device_api.h").is_file():
            return candidate
    raise ApiTargetError(f"device API header not found under {here / 'include'}; "
                         f"reinstall devicekit")


def header_files(project: Path) -> dict:
    """{path under ``project/include/devicekit/``: bytes} of this DeviceKit's headers."""
    src = header_dir() / "devicekit"
    return {str(project / "include" / "devicekit" / name): (src / name).read_bytes()
            for name in HEADERS}


def vendor_headers(project: Path) -> None:
    """Copies this DeviceKit's headers into ``project/include/devicekit/`` (all or none)."""
    _output.write_files(header_files(project))


# ---- devicekit upgrade-api ----------------------------------------------------

_INFO = "src/plugin_info.h"


def project_api(project: Path) -> tuple:
    """(major, minor) a project claims, from src/plugin_info.h."""
    path = project / _INFO
    try:
        text = path.read_text()
    except OSError as e:
        raise ApiTargetError(f"cannot read {path}: {e.strerror or e}. Hint: pass the plugin "
                             f"project folder (the one with pyproject.toml)") from e
    found = dict(re.findall(r"^#define (PLUGIN_API_MAJOR|PLUGIN_API_MINOR) (\d+)", text, re.M))
    if len(found) != 2:
        raise ApiTargetError(f"{path} defines no PLUGIN_API_MAJOR / PLUGIN_API_MINOR; "
                             f"expected a project made by devicekit new")
    return int(found["PLUGIN_API_MAJOR"]), int(found["PLUGIN_API_MINOR"])


class ApiTargetWriteError(ApiTargetError):
    """The project's files could not be written; none of them was changed."""

    exit_code = _output.EXIT_OUTPUT


def _sub(path: Path, text: str, pattern: str, repl: str, what: str) -> str:
    new, n = re.subn(pattern, repl, text, flags=re.M)
    if n == 0:
        raise ApiTargetError(f"{path}: cannot find {what} to update; edit it by hand "
                             f"(docs/porting_guide.md, 'Moving to a newer device API')")
    return new


def upgrade(project: Path, target: tuple) -> tuple:
    """Moves ``project`` from the API it claims to ``target``; returns the old version.

    Replaces the vendored headers, bumps the claim in src/plugin_info.h (and its
    op count), appends a not-implemented row to src/ops.def for every base op
    the new minor added, and raises the devicekit requirement in pyproject.toml.
    Refuses a downgrade or a major change (those are not a mechanical edit).
    Every file is changed, or none (one ``_output.write_files`` set): a project
    is never left half upgraded.
    """
    old = project_api(project)
    check_target(target)
    if target[0] != old[0] or target[1] < old[1]:
        raise ApiTargetError(f"{project} targets device API {old[0]}.{old[1]}; upgrade-api "
                             f"moves to a newer minor of the same major, not to "
                             f"{target[0]}.{target[1]}")
    if target == old:
        return old
    ops_def = project / "src" / "ops.def"
    new_ops = [op for op in base_ops(*target) if parse_version(op["since"]) > old]
    rows = "".join(f"\n/* {op['signature']}; since {op['since']} */\n"
                   f"PLUGIN_NO_KERNEL({op['id']})\n" for op in new_ops)
    info, pyproject = project / _INFO, project / "pyproject.toml"
    try:
        text = ops_def.read_text()
        files = {str(ops_def): text.rstrip("\n") + "\n" + rows if rows else text}
        info_text = _sub(info, info.read_text(), r"^#define PLUGIN_API_MINOR \d+",
                         f"#define PLUGIN_API_MINOR {target[1]}", "PLUGIN_API_MINOR")
        files[str(info)] = _sub(info, info_text, r"^#define PLUGIN_NUM_OPS \w+",
                                f"#define PLUGIN_NUM_OPS {op_count_macro(*target)}",
                                "PLUGIN_NUM_OPS")
        files[str(pyproject)] = _sub(pyproject, pyproject.read_text(), r'"devicekit>=[^"]*"',
                                     f'"{devicekit_requirement(target)}"',
                                     "the devicekit requirement")
    except OSError as e:
        raise ApiTargetError(f"cannot read {e.filename}: {e.strerror or e}") from e
    files.update(header_files(project))
    try:
        _output.write_files(files)
    except _output.OutputError as e:
        raise ApiTargetWriteError(str(e)) from e
    return old


def run(args) -> int:
    project = Path(args.path)
    try:
        target = parse_version(args.api) if args.api else installed_api()
        old = upgrade(project, target)
    except ApiTargetError as e:
        print(f"devicekit upgrade-api: error: {e}", file=sys.stderr)
        return e.exit_code
    if old == target:
        print(f"{project} already targets device API {target[0]}.{target[1]}; nothing to do")
    else:
        print(f"{project}: device API {old[0]}.{old[1]} -> {target[0]}.{target[1]}; "
              f"requirement now {devicekit_requirement(target)!r}. New base ops are "
              f"PLUGIN_NO_KERNEL rows at the end of src/ops.def. Rebuild and rerun "
              f"conformance: devicekit dev --run conformance")
    return 0


def add_parser(sub):
    p = sub.add_parser(
        "upgrade-api", help="move a plugin project to a newer device API minor, on purpose",
        description="Replace the project's vendored device API headers with this devicekit's, "
                    "bump the version the plugin claims (src/plugin_info.h), add the new base "
                    "ops to src/ops.def as not implemented, and raise the devicekit "
                    "requirement in pyproject.toml, all at once. Exit 7 on a bad version or "
                    "project, 3 when the project cannot be written (nothing is changed), "
                    "130/143 on Ctrl-C/SIGTERM.")
    p.add_argument("path", nargs="?", default=".", help="the plugin project (default: .)")
    p.add_argument("--api", default=None, metavar="MAJOR.MINOR",
                   help="the version to move to (default: this devicekit's, the latest)")
    p.set_defaults(func=run)
