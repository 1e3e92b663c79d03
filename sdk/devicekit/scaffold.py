"""``devicekit new NAME``: render a new plugin project from the shipped templates.

The templates live in ``devicekit/templates/plugin`` (``templates/plugin`` in
the source tree). Files ending in ``.jinja`` are rendered with jinja2 and lose
the suffix; every other file is copied byte for byte (C sources stay plain C a
vendor can diff against upstream). Path segments may contain ``{{ name }}``.

Nothing is ever written half-way: the project is rendered into a temporary
folder next to the target (same filesystem) and renamed into place at the end.

Exit codes (also in ``devicekit new --help`` and docs/porting_guide.md):
  0  the project was created
  2  usage error (argparse: missing NAME, unknown option)
  3  NAME is not a valid plugin name
  4  the target folder exists and is not empty (use --force)
  5  the target cannot be written (permissions, a file in the way, read-only disk)
  6  broken devicekit installation: no templates, or an op spec it cannot read
  7  --api names a device API version this devicekit cannot target
  130/143  stopped by Ctrl-C (SIGINT) / SIGTERM: one line; the target is the old
     folder or the whole new project, never half of one
(Older than the codes the other commands share, where 3 is an output location
that cannot be written; kept as they are, scripts rely on them.)
"""

import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

from . import api_target
from ._util import output as _output
from ._op_spec import OpSpecError, base_ops, load_spec, op_count_macro  # noqa: F401  (public here)
from .errors import DeviceKitError

# The plugin name becomes the device type ("acme:0"), a C string, the Python
# package devicekit_NAME and the entry-point name. The header fixes the device
# type to [a-z][a-z0-9_]*; the length cap keeps file and symbol names sane.
NAME_RE = re.compile(r"[a-z][a-z0-9_]{0,31}")
NAME_RULE = ("a lowercase letter, then up to 31 lowercase letters, digits or '_' "
             "(it becomes the device type 'NAME:0', the C plugin name and the "
             "Python package devicekit_NAME)")
# Names a stock installation already uses: a second plugin with the same name
# is refused at load time, so refusing it here saves a vendor a confusing day.
RESERVED_NAMES = {"cpu": "the reference CPU plugin that ships with devicekit"}

TEMPLATE_SUFFIX = ".jinja"


class ScaffoldError(DeviceKitError):
    """Root of ``devicekit new`` failures; ``exit_code`` is what the CLI returns."""

    exit_code = 1


class InvalidNameError(ScaffoldError):
    exit_code = 3


class TargetExistsError(ScaffoldError):
    exit_code = 4


class TargetNotWritableError(ScaffoldError):
    exit_code = 5


class InvalidApiError(ScaffoldError):
    """--api names a version this devicekit cannot scaffold."""

    exit_code = 7


class InstallationError(ScaffoldError):
    """The templates are missing (a missing or unreadable op spec is
    ``OpSpecError``, from the module that reads the spec; same exit code)."""

    exit_code = 6


EXIT_CODES_HELP = """exit codes:
  0  created
  2  usage error
  3  invalid NAME ({rule})
  4  target folder exists and is not empty (pass --force to replace it)
  5  target not writable (permissions, a file in the way, read-only disk)
  6  broken devicekit installation (no templates or unreadable op spec)
  7  invalid --api (a device API version this devicekit cannot target)
  130  stopped by Ctrl-C (SIGINT); 143: stopped by SIGTERM (one line; nothing
       is left half-written: the target is the old folder or the new project)""".format(
    rule="[a-z][a-z0-9_]{0,31}")


def templates_dir() -> Path:
    """The plugin project template: installed copy first, then the source tree."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "templates" / "plugin",
                      here.parent.parent / "templates" / "plugin"):
        if candidate.is_dir():
            return candidate
    raise InstallationError(
        f"no plugin templates found under {here / 'templates'}; reinstall devicekit "
        f"(pip install --force-reinstall devicekit)")


def check_name(name: str) -> None:
    if not NAME_RE.fullmatch(name):
        raise InvalidNameError(f"invalid plugin name {name!r}: expected {NAME_RULE}")
    if name in RESERVED_NAMES:
        raise InvalidNameError(f"plugin name {name!r} is taken by {RESERVED_NAMES[name]}; "
                               f"pick another name")


def _c_string(text: str) -> str:
    """A C string literal for arbitrary text: printable ASCII as is, the rest
    as octal escapes of its UTF-8 bytes (no trigraphs, no hex run-on)."""
    out = []
    for byte in text.encode():
        ch = chr(byte)
        if ch in '"\\?':
            out.append("\\" + ch)
        elif 32 <= byte < 127:
            out.append(ch)
        else:
            out.append(f"\\{byte:03o}")
    return '"' + "".join(out) + '"'


def context(name: str, vendor: str, api=None) -> dict:
    """Template variables. ``api``: the (major, minor) the plugin targets;
    default: the latest this devicekit ships."""
    from ._version import __version__

    major, minor = api if api is not None else api_target.installed_api()
    api_target.check_target((major, minor))
    return {
        "ops": base_ops(major, minor),
        "op_count_macro": op_count_macro(major, minor),
        "name": name,
        "NAME": name.upper(),
        "package": f"devicekit_{name}",
        "dist_name": f"devicekit-{name.replace('_', '-')}",
        "vendor": vendor,
        "api_major": major,
        "api_minor": minor,
        "devicekit_version": __version__,
        "devicekit_requirement": api_target.devicekit_requirement((major, minor)),
    }


def default_target(name: str) -> Path:
    return Path.cwd() / f"devicekit-{name.replace('_', '-')}"


def _render_tree(src: Path, dst: Path, ctx: dict) -> list:
    import jinja2

    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                             autoescape=False, trim_blocks=True)
    env.filters["c_string"] = _c_string
    written = []
    for path in sorted(src.rglob("*")):
        if path.is_dir() or "__pycache__" in path.parts:
            continue
        rel = env.from_string(path.relative_to(src).as_posix()).render(ctx)
        render = rel.endswith(TEMPLATE_SUFFIX)
        rel = rel[: -len(TEMPLATE_SUFFIX)] if render else rel
        out = dst / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        if render:
            out.write_text(env.from_string(path.read_text()).render(ctx))
        else:
            shutil.copyfile(path, out)
        written.append(rel)
    return written


def _check_target(target: Path, force: bool) -> None:
    if target.exists() and not target.is_dir():
        raise TargetNotWritableError(f"cannot create {target}: a file is in the way")
    if target.is_dir() and any(target.iterdir()) and not force:
        raise TargetExistsError(f"{target} exists and is not empty; choose another --dir "
                                f"or pass --force to replace it")


def create(name: str, target=None, vendor: str = "", force: bool = False, api=None) -> Path:
    """Render the plugin project ``name`` into ``target``; returns its path.
    ``api``: the device API (major, minor) it targets (default: the latest)."""
    check_name(name)
    target = Path(target) if target is not None else default_target(name)
    target = target.resolve() if target.exists() else target.absolute()
    _check_target(target, force)
    src = templates_dir()
    try:
        ctx = context(name, vendor or f"{name} vendor", api)
    except api_target.ApiTargetError as e:
        raise InvalidApiError(str(e)) from e
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    except OSError as e:
        raise TargetNotWritableError(f"cannot write next to {target}: "
                                     f"{e.strerror or e}") from e
    old = None
    try:
        _render_tree(src, tmp, ctx)
        # The project carries the header it is compiled against: building it
        # needs no devicekit, and the version it claims is ctx's, on purpose.
        api_target.vendor_headers(tmp)
        # Ctrl-C/SIGTERM wait for the renames: between the two of --force,
        # an interrupt would leave neither folder at the target.
        with _output.held_signals():
            if target.exists():
                # --force (or an empty folder): move the old one aside first, so a
                # failed rename still leaves it where it was.
                old = tmp.with_name(tmp.name + ".old")
                os.rename(target, old)
                try:
                    os.rename(tmp, target)
                except OSError:
                    os.rename(old, target)
                    raise
            else:
                os.rename(tmp, target)
    except OSError as e:
        raise TargetNotWritableError(f"cannot write {target}: {e.strerror or e}") from e
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if old is not None and target.exists():  # (also when a held signal is raised here)
            shutil.rmtree(old, ignore_errors=True)
    return target


def run(args) -> int:
    try:
        api = api_target.parse_version(args.api) if args.api else None
        target = create(args.name, args.dir, args.vendor, args.force, api)
    except api_target.ApiTargetError as e:
        e = InvalidApiError(str(e))
        line = f"devicekit new: error: {e}"
        print(line, file=sys.stderr)
        return e.exit_code
    except (ScaffoldError, OpSpecError) as e:
        red = sys.stderr.isatty()
        line = f"devicekit new: error: {e}"
        print(f"\033[31m{line}\033[0m" if red else line, file=sys.stderr)
        return e.exit_code
    print(f"Created plugin project '{args.name}' in {target}\n"
          f"Next: cd {target} && devicekit dev --run conformance -k runtime   "
          f"(see README.md there)")
    return 0


def add_parser(sub):
    import argparse

    p = sub.add_parser(
        "new", help="create a new plugin project from the templates",
        description="Render a plugin project that builds, loads and passes the runtime "
                    "part of conformance as it is: a host-memory runtime and one "
                    "worked kernel (add, float32).",
        epilog=EXIT_CODES_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("name", metavar="NAME", help=f"plugin name: {NAME_RULE}")
    p.add_argument("--dir", type=Path, default=None,
                   help="where to create the project (default: ./devicekit-NAME)")
    p.add_argument("--vendor", default="", help="vendor name reported by the plugin")
    p.add_argument("--force", action="store_true",
                   help="replace the target folder if it exists and is not empty")
    p.add_argument("--api", default=None, metavar="MAJOR.MINOR",
                   help="device API version the plugin targets and claims (default: the "
                        "latest this devicekit ships; later: devicekit upgrade-api)")
    p.set_defaults(func=run)
