"""The probe subprocess: ``python -m devicekit._plugins.probe_child LIBRARY_PATH``.

Loads the library exactly as the SDK does (dlopen and the library's
constructors, DK_GetApi, the version checks, Plugin_Initialize,
Plugin_GetInfo, Device_Count, then every device's properties) and reports on
its stdout: ``step <call>`` before each plugin call (written unbuffered, so it
is there even if the call kills the process), then one ``result <json>``
line. Whatever the plugin itself prints goes to stderr. devicekit._plugins.probe runs
this and reads the report. Nothing in the package imports this module.

The probe runs in its own session (so that a timeout kills its whole group),
which also means that nothing ends it when the process that started it dies:
a plugin hung in Plugin_Initialize would run forever. Before touching the
plugin it therefore asks to die with its parent (:func:`_die_with_parent`).
"""

import json
import os
import signal
import sys

from devicekit._plugins.probe import PARENT_ENV, RESULT_PREFIX, STEP_PREFIX, timeout_s

from .. import _core
from ..errors import DeviceKitError


def _write_all(fd, data):
    while data:
        data = data[os.write(fd, data):]


_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_ALARM_MARGIN_S = 30  # past the parent's own time limit, which normally ends the probe first


def _die_with_parent():
    """Ends this process when the process that started it dies, however it
    dies (SIGKILL included), and exits now if that has already happened.

    Linux: prctl(PR_SET_PDEATHSIG, SIGKILL) has the kernel kill us when the
    parent goes. The parent may have died before this call (``python -m``
    imports the devicekit package first, ~0.1 s): then we were re-parented
    and getppid() no longer returns the pid it put in DEVICEKIT_PROBE_PARENT,
    and we exit without loading anything. Checked after the prctl, so no
    moment is left uncovered.

    Elsewhere (macOS, the BSDs) there is no parent-death signal. The same
    getppid() check runs at start, and an alarm(2) set to the probe's time
    limit plus a margin ends the process by SIGALRM's default action (it
    works while a plugin call blocks, which a Python thread would not), so an
    orphaned probe lives at most that long instead of forever. On Linux the
    alarm is set as well, as a second line."""
    expected = os.environ.get(PARENT_ENV, "")
    if sys.platform.startswith("linux"):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        # Fails only under a seccomp filter that forbids prctl; the alarm
        # below still bounds us then.
        libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    if expected.isdigit() and os.getppid() != int(expected):
        os._exit(3)  # our parent is gone: nobody reads a report
    if hasattr(signal, "alarm"):
        try:
            limit = timeout_s()
        except ValueError:
            limit = None  # the parent refuses such a limit before it starts a probe
        if limit is not None:
            signal.alarm(min(int(limit) + _ALARM_MARGIN_S, 2**31 - 1))


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
        print("usage: python -m devicekit._plugins.probe_child LIBRARY_PATH", file=sys.stderr)
        sys.exit(2)
    _die_with_parent()
    _run_child(sys.argv[1])
