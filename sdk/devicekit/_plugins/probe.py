"""Probe a plugin library in a short-lived subprocess before it enters this one.

The subprocess, ``python -m devicekit._plugins.probe_child PATH``, loads PATH exactly
as the SDK does and reports each step (see that module).

:func:`probe` runs it with a time limit and turns what happened into a
:class:`ProbeResult`. A plugin that crashes (the signal is named), hangs (the
time limit, ``DEVICEKIT_PROBE_TIMEOUT`` seconds, is named) or exits the
process while loading becomes that plugin's load error, with the call it was
in; it never reaches the user's process. Results are cached by
``devicekit._plugins.probe_cache``, so this runs once per library, not per start-up.
"""

import json
import math
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Optional

from .. import errors


TIMEOUT_ENV = "DEVICEKIT_PROBE_TIMEOUT"
# The pid of the process that started the probe, for the child's check that
# it still has that parent (see _probe_child._die_with_parent).
PARENT_ENV = "DEVICEKIT_PROBE_PARENT"
# Generous: a real driver's initialisation (device enumeration, firmware) can
# take seconds; only a plugin that never returns should reach it.
DEFAULT_TIMEOUT_S = 60.0

# The child's report lines (see _probe_child).
STEP_PREFIX = "step "
RESULT_PREFIX = "result "

_STDERR_TAIL_LINES = 6
_STDERR_LINE_CHARS = 300

# How a crash report names where the plugin was.
_STEP_DESCRIPTIONS = {
    "dlopen": "dlopen (the library's constructors or the libraries it depends on)",
}


@dataclass
class ProbeResult:
    """What the probe found. ``ok``: the library loads; ``info`` then holds
    name, vendor, version, api_version and per-device ``{name, error}``.
    Otherwise ``error_type`` (a devicekit.errors class name) and ``error``."""

    ok: bool
    info: dict = field(default_factory=dict)
    error_type: Optional[str] = None
    error: Optional[str] = None
    code: Optional[str] = None

    def exception(self):
        cls = getattr(errors, self.error_type or "", None)
        if not (isinstance(cls, type) and issubclass(cls, errors.DeviceKitError)):
            cls = errors.PluginLoadError
        return cls(self.error, code=self.code)


def timeout_s():
    """The probe's time limit in seconds, from DEVICEKIT_PROBE_TIMEOUT."""
    raw = os.environ.get(TIMEOUT_ENV, "").strip()
    if not raw:
        return DEFAULT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"{TIMEOUT_ENV}={raw!r} is not a number of seconds > 0")
    return value


def _failure(path, why):
    return ProbeResult(False, error_type="PluginLoadError",
                       error=f"cannot load plugin '{path}': {why}")


def _where(step):
    if step is None:
        return "before it reached the plugin (the probe process itself failed to start)"
    return "in " + _STEP_DESCRIPTIONS.get(step, step)


def _stderr_note(stderr):
    lines = [ln.strip() for ln in stderr.decode("utf-8", "replace").splitlines() if ln.strip()]
    if not lines:
        return ""
    tail = [ln[:_STDERR_LINE_CHARS] for ln in lines[-_STDERR_TAIL_LINES:]]
    return "; its stderr ended with: " + " | ".join(tail)


def _child_env():
    """The probe must import this very devicekit, even when it was put on
    sys.path by hand rather than installed."""
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    env[PARENT_ENV] = str(os.getpid())
    return env


def _kill_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def probe(path):
    """Probe the library at ``path`` (absolute) in a subprocess; never raises
    for anything the plugin does."""
    try:
        limit = timeout_s()
    except ValueError as e:
        return _failure(path, f"it cannot be probed: {e}")
    # A new session: on timeout the whole process group goes, including any
    # process the plugin started. Being in its own session, the child gets
    # no SIGHUP/SIGINT when this process dies, so it arranges its own death
    # with this process (_probe_child._die_with_parent: Linux's parent-death
    # signal). That signal follows the *thread* that started the child;
    # this function waits for its child on that same thread, which
    # therefore outlives it (parallel probes run one per pool thread).
    try:
        proc = subprocess.Popen([sys.executable, "-m", "devicekit._plugins.probe_child", path],
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=_child_env(), start_new_session=True)
    except OSError as e:
        return _failure(path, f"the probe process ({sys.executable!r} -m devicekit._plugins.probe_child) "
                              f"could not be started: {e}")
    timed_out = False
    try:
        out, err = proc.communicate(timeout=limit)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc)
        try:
            out, err = proc.communicate(timeout=5)
        except subprocess.TimeoutExpired:  # a grandchild left its own session
            proc.kill()
            out, err = b"", b""
    except BaseException:  # e.g. Ctrl-C: its own session would not get the SIGINT
        _kill_group(proc)
        proc.wait()
        raise
    step, result = None, None
    for line in out.decode("utf-8", "replace").splitlines():
        if line.startswith(STEP_PREFIX):
            step = line[len(STEP_PREFIX):]
        elif line.startswith(RESULT_PREFIX):
            result = json.loads(line[len(RESULT_PREFIX):])
    rc = proc.returncode
    if timed_out:
        return _failure(path, f"the probe did not finish within {limit:g} s (stuck {_where(step)}) "
                              f"and was killed; if the plugin is only slow to start, allow it "
                              f"longer with {TIMEOUT_ENV}=SECONDS" + _stderr_note(err))
    if rc is not None and rc < 0:
        try:
            name = signal.Signals(-rc).name
        except ValueError:
            name = "an unknown signal"
        return _failure(path, f"it crashed the probe process with {name} (signal {-rc}) "
                              f"{_where(step)}; it was not loaded into this process"
                              + _stderr_note(err))
    if result is None or rc != 0:
        return _failure(path, f"it ended the probe process with exit code {rc} {_where(step)} "
                              f"(did the plugin call exit()?); it was not loaded into this "
                              f"process" + _stderr_note(err))
    if result.get("ok"):
        return ProbeResult(True, info=result["info"])
    return ProbeResult(False, error_type=result.get("error_type"), error=result.get("error"),
                       code=result.get("code"))
