"""The ``devicekit`` command line.

Exit codes, shared by the commands (:data:`EXIT_CODES_HELP`; each command's
``--help`` lists its own): 0 success; 1 the run failed (a case, a model, a
regression); 2 usage error, or a device that cannot be opened; 3 an output
location that cannot be written (checked before any work) or a write that
failed, with every previous file left as it was; 130 Ctrl-C (SIGINT), 143
SIGTERM. ``devicekit devices`` exits 0 even when some plugin failed to load:
listing the failure *is* its job. Every command runs under one signal policy
(``devicekit._util.output``): SIGTERM stops it as Ctrl-C does (the suites write
their partial report), and a closed stdout (``| head``) is not an error.
"""

import argparse
import json
import os
import sys

from . import errors
from ._plugins import registry as _registry
from ._util.text import table

EXIT_USAGE = 2
EXIT_CODES_HELP = """\
exit codes (each command's --help has its own list):
  0    success
  1    the run failed: a case or model failed, a regression, a gate refusal
  2    usage error, or the plugin/device cannot be opened
  3    an output location cannot be written (checked before any work starts),
       or a write failed (one line; every previous file is left as it was)
  130  stopped by Ctrl-C (SIGINT); 143: stopped by SIGTERM
'bench', 'new', 'dev', 'upgrade-api', 'gate', 'report', 'ray', 'torch' and 'trace' number some of
their own failures differently: see their --help.
"""
DEVICES_EXIT_CODES_HELP = """\
exit codes:
  0    listed, also when a plugin failed to load or a device failed to answer
       (listing the failure is the job)
  2    usage error
  130  stopped by Ctrl-C (SIGINT); 143: stopped by SIGTERM
A closed stdout (devicekit devices | head) is not an error.
"""


def _fmt_bytes(n):
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def _device_entry(d):
    """A device's properties, or the error getting them: one device that
    fails is shown as that device's error, never the end of the listing."""
    try:  # "name" is the device's own name (from its properties), "device" ours
        return {"device": d.name, **d.properties, "error": None}
    except errors.DeviceKitError as e:
        return {"device": d.name, "error": str(e), "error_type": type(e).__name__}


def _devices_json(records):
    out = []
    for r in records:
        item = {"name": r.name, "path": r.path, "source": r.source, "loaded": r.loaded,
                "error": r.error, "error_type": r.error_type, "probe": r.probe}
        if r.plugin is not None:
            p = r.plugin
            item.update(vendor=p.vendor, version=p.version, api_version=p.api_version,
                        parts=list(p.parts), devices=[_device_entry(d) for d in r.devices],
                        kernels=p.kernels())
        out.append(item)
    return out


_OPTIONAL_PARTS = ("collectives", "graphs")


def cmd_devices(args):
    # Every section is printed whatever one plugin or device does; the
    # listing itself is the report, so it always exits 0.
    items = _devices_json(_registry.plugins())
    if args.json:
        print(json.dumps(items, indent=2))
        return 0
    loaded = [r for r in items if r["loaded"]]
    failed = [r for r in items if not r["loaded"]]
    print("Plugins")
    rows = [(r["name"], r["version"], r["api_version"], r["vendor"], r["source"], r["path"])
            for r in loaded]
    print(table(rows, ["plugin", "version", "api", "vendor", "source", "library"]) if rows
          else "(no plugin loaded)")
    if loaded:
        # The optional parts of the device API (since 1.5); older plugins
        # cannot have them, and a part a plugin lacks is reported absent.
        rows = [(r["name"], *(("yes" if part in r["parts"] else "absent")
                              for part in _OPTIONAL_PARTS)) for r in loaded]
        print("\nOptional parts")
        print(table(rows, ["plugin", *_OPTIONAL_PARTS]))
    rows, device_errors = [], []
    for r in loaded:
        implemented = sum(k["implemented"] for k in r["kernels"])
        for d in r["devices"]:
            if d["error"] is None:
                rows.append((d["device"], d["name"], _fmt_bytes(d["total_memory"]),
                             len(d["dtypes"]), implemented))
            else:
                rows.append((d["device"], "(error, see 'Device errors')", "-", "-", implemented))
                device_errors.append(d)
    print("\nDevices")
    print(table(rows, ["device", "name", "memory", "dtypes", "kernels"]) if rows
          else "(loaded plugins report no devices)")
    print(f"\nDevice errors ({len(device_errors)})")
    for d in device_errors:
        print(f"- {d['device']} [{d['error_type']}]")
        print(f"    {d['error']}")
    print(f"\nLoad errors ({len(failed)})")
    for r in failed:
        print(f"- {r['name']} [{r['error_type']}] from {r['source']}: {r['path'] or '-'}")
        print(f"    {r['error']}")
    if not items:
        print(f"\n(searched entry-point group '{_registry.ENTRY_POINT_GROUP}' and "
              f"{_registry.PATH_ENV}={os.environ.get(_registry.PATH_ENV, '')!r})")
    return 0


def _package_dir(*parts):
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), *parts)


def main(argv=None):
    from . import API_VERSION
    from ._version import __version__

    parser = argparse.ArgumentParser(
        prog="devicekit", description="DeviceKit: hardware-vendor plugin SDK",
        epilog=EXIT_CODES_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version",
                        version=f"devicekit {__version__} (device API {API_VERSION})")
    parser.add_argument("--include-dir", action="store_true",
                        help="print the folder holding devicekit/device_api.h and exit")
    parser.add_argument("--cmake-dir", action="store_true",
                        help="print the folder for CMake's find_package(devicekit) and exit")
    sub = parser.add_subparsers(dest="command")
    p = sub.add_parser("devices", help="list plugins, their devices and load errors",
                       description="List the plugins found, their devices and every load or "
                                   "device error.",
                       epilog=DEVICES_EXIT_CODES_HELP,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_devices)
    # Each further command lives in its own module and registers itself with
    # add_parser(subparsers) -> sets func; run(args) returns the exit code.
    from .conformance import cli as conformance_cli
    conformance_cli.add_parser(sub)
    from . import scaffold
    scaffold.add_parser(sub)
    from . import api_target
    api_target.add_parser(sub)
    from . import dev
    dev.add_parser(sub)
    from . import bench
    bench.add_parser(sub)
    from .models import cli as models_cli
    models_cli.add_parser(sub)
    from .gate import cli as gate_cli
    gate_cli.add_parser(sub)
    from .scale import cli as scale_cli
    scale_cli.add_parser(sub)
    from . import torch_cli
    torch_cli.add_parser(sub)
    from . import trace_cli
    trace_cli.add_parser(sub)

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
    from ._util import output as _output

    with _output.signal_policy(), _output.pipe_safe_stdout():
        try:
            return args.func(args)
        except _output.OutputError as e:
            print(f"devicekit: error: {e}", file=sys.stderr)
            return _output.EXIT_OUTPUT
        except errors.DeviceKitError as e:
            print(f"devicekit: error: {e}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:  # a command that has no partial result to write
            print(f"devicekit {args.command}: stopped by {_output.interrupt_name()}",
                  file=sys.stderr)
            return _output.interrupt_exit_code()
