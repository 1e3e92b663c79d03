"""The probe subprocess: ``python -m devicekit._probe_child LIBRARY_PATH``.

Loads the library exactly as the SDK does (dlopen and the library's
constructors, DK_GetApi, the version checks, Plugin_Initialize,
Plugin_GetInfo, Device_Count, then every device's properties) and reports on
its stdout: ``step <call>`` before each plugin call (written unbuffered, so it
is there even if the call kills the process), then one ``result <json>``
line. Whatever the plugin itself prints goes to stderr. devicekit._probe runs
this and reads the report. Nothing in the package imports this module.
"""

import json
import os
import sys

from devicekit._probe import RESULT_PREFIX, STEP_PREFIX

from . import _core
from .errors import DeviceKitError


def _write_all(fd, data):
    while data:
        data = data[os.write(fd, data):]


def _run_child(path):
    # Our report goes to the original stdout; the plugin's own prints (fd 1)
    # go to stderr, so they can neither forge nor corrupt a report line.
    report = os.dup(1)
    os.dup2(2, 1)

    def emit(line):
        _write_all(report, (line + "\n").encode("utf-8", "replace"))

    _core._set_probe_trace_fd(report)
    try:
        plugin = _core.load_plugin(path)
        devices = []
        for d in plugin.devices:
            emit(f"{STEP_PREFIX}Device_GetProperties (device {d.name})")
            try:
                _ = d.properties  # reading it runs Device_GetProperties
                devices.append({"name": d.name, "error": None})
            except DeviceKitError as e:
                devices.append({"name": d.name, "error": str(e)})
        result = {"ok": True, "info": {
            "name": plugin.name, "vendor": plugin.vendor, "version": plugin.version,
            "api_version": plugin.api_version, "devices": devices}}
    except DeviceKitError as e:
        result = {"ok": False, "error_type": type(e).__name__, "error": str(e), "code": e.code}
    except Exception as e:  # a bug of ours must still come back as this plugin's error
        result = {"ok": False, "error_type": "PluginLoadError",
                  "error": f"cannot load plugin '{path}': the probe failed: "
                           f"{type(e).__name__}: {e}"}
    emit(RESULT_PREFIX + json.dumps(result))
    # Skip interpreter teardown: what the plugin does at exit is not what the
    # probe asks, and its threads may still be running.
    os._exit(0)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: python -m devicekit._probe_child LIBRARY_PATH", file=sys.stderr)
        sys.exit(2)
    _run_child(sys.argv[1])
