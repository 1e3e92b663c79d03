"""The ``devicekit`` command line.

Exit codes: 0 success; 2 usage error. ``devicekit devices`` exits 0 even when
some plugin failed to load: listing the failure *is* its job.
"""

import argparse
import json
import os
import sys

from . import _registry, errors

EXIT_USAGE = 2


def _fmt_bytes(n):
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def _table(rows, headers):
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows)]
    line = lambda r: "  ".join(str(x).ljust(w) for x, w in zip(r, widths)).rstrip()
    return "\n".join([line(headers), line(["-" * w for w in widths]), *map(line, rows)])


def _devices_json(records):
    out = []
    for r in records:
        item = {"name": r.name, "path": r.path, "source": r.source, "loaded": r.loaded,
                "error": r.error, "error_type": r.error_type}
        if r.plugin is not None:
            p = r.plugin
            item.update(vendor=p.vendor, version=p.version, api_version=p.api_version,
                        devices=[{"name": d.name, **d.properties} for d in r.devices],
                        kernels=p.kernels())
        out.append(item)
    return out


def cmd_devices(args):
    records = _registry.plugins()
    if args.json:
        print(json.dumps(_devices_json(records), indent=2))
        return 0
    loaded = [r for r in records if r.loaded]
    failed = [r for r in records if not r.loaded]
    if loaded:
        rows = [(r.name, r.plugin.version, r.plugin.api_version, r.plugin.vendor, r.source, r.path)
                for r in loaded]
        print("Plugins")
        print(_table(rows, ["plugin", "version", "api", "vendor", "source", "library"]))
        rows = []
        for r in loaded:
            for d in r.devices:
                p = d.properties
                rows.append((d.name, p["name"], _fmt_bytes(p["total_memory"]), len(p["dtypes"]),
                             sum(k["implemented"] for k in r.plugin.kernels())))
        print("\nDevices")
        print(_table(rows, ["device", "name", "memory", "dtypes", "kernels"]) if rows
              else "(loaded plugins report no devices)")
    else:
        print("No plugin loaded.")
    if failed:
        print(f"\nLoad errors ({len(failed)})")
        for r in failed:
            print(f"- {r.name} [{r.error_type}] from {r.source}: {r.path or '-'}")
            print(f"    {r.error}")
    if not records:
        print(f"(searched entry-point group '{_registry.ENTRY_POINT_GROUP}' and "
              f"{_registry.PATH_ENV}={os.environ.get(_registry.PATH_ENV, '')!r})")
    return 0


def _package_dir(*parts):
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), *parts)


def main(argv=None):
    from . import __version__, API_VERSION

    parser = argparse.ArgumentParser(
        prog="devicekit", description="DeviceKit: hardware-vendor plugin SDK")
    parser.add_argument("--version", action="version",
                        version=f"devicekit {__version__} (device API {API_VERSION})")
    parser.add_argument("--include-dir", action="store_true",
                        help="print the folder holding devicekit/device_api.h and exit")
    parser.add_argument("--cmake-dir", action="store_true",
                        help="print the folder for CMake's find_package(devicekit) and exit")
    sub = parser.add_subparsers(dest="command")
    p = sub.add_parser("devices", help="list plugins, their devices and load errors")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_devices)
    # Each further command lives in its own module and registers itself with
    # add_parser(subparsers) -> sets func; run(args) returns the exit code.
    from .conformance import cli as conformance_cli
    conformance_cli.add_parser(sub)
    from . import scaffold
    scaffold.add_parser(sub)
    from .models import cli as models_cli
    models_cli.add_parser(sub)
    from .gate import cli as gate_cli
    gate_cli.add_parser(sub)

    args = parser.parse_args(argv)
    if args.include_dir:
        print(_package_dir("include"))
        return 0
    if args.cmake_dir:
        print(_package_dir("cmake"))
        return 0
    if not getattr(args, "func", None):
        parser.print_usage(sys.stderr)
        print("devicekit: error: a command is required (try 'devicekit devices')", file=sys.stderr)
        return EXIT_USAGE
    try:
        return args.func(args)
    except errors.DeviceKitError as e:
        print(f"devicekit: error: {e}", file=sys.stderr)
        return 1
