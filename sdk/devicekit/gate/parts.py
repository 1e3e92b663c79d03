"""Certify's parts as child processes within one deadline (``gate certify
--timeout``, docs/gate.md): ``devicekit conformance``, ``devicekit models``
and the performance set each run in a child in its own session, so that the
deadline, Ctrl-C or SIGTERM can stop it and everything it started, wherever
it is (a kernel that never returns included).

``python -m devicekit.gate.parts performance DEVICE PLUGIN OUT`` is the
performance set's child (``perf.measure`` on a freshly opened target).
"""

import contextlib
import os
import signal
import subprocess
import sys
import time

_GRACE_S = 5.0  # a stopped suite's time to stop its workers and write its partial report


class OutOfTime(Exception):
    """``certify --timeout`` ran out during ``part``."""

    def __init__(self, part):
        super().__init__(part)
        self.part = part


class Deadline:
    def __init__(self, seconds):
        self.start = time.monotonic()
        self.end = None if seconds is None else self.start + seconds

    def left(self):
        return None if self.end is None else max(0.0, self.end - time.monotonic())

    def cap(self, default):
        """``default`` seconds, or what is left if less."""
        return default if self.end is None else max(min(default, self.left()), 0.01)

    def enter(self, part):
        if self.left() == 0.0:
            raise OutOfTime(part)


def _stderr_fd():
    try:
        return sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # a stream without a descriptor (tests)
        return None


def _stop(proc):
    """Stops a child run in its own session: SIGTERM (a suite stops its workers
    and writes its partial report, as on Ctrl-C), then after a grace SIGKILL to
    its whole process group (a suite's workers that outlived it)."""
    with contextlib.suppress(ProcessLookupError):
        proc.send_signal(signal.SIGTERM)
    end = time.monotonic() + _GRACE_S
    if not hasattr(os, "waitid"):  # (reaped before the group goes: its id could be reused)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(_GRACE_S)
    while proc.returncode is None and time.monotonic() < end:
        # exited but not reaped: the group keeps its id until the killpg below
        if os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT):
            break
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def run_child(argv, deadline, part):
    """The exit status of ``python ARGV`` run as a child in its own session,
    its output on our stderr (stdout keeps only the verdict). At the deadline
    (:class:`OutOfTime`) or on Ctrl-C/SIGTERM here it is stopped (:func:`_stop`)."""
    proc = subprocess.Popen([sys.executable, *argv], stdout=_stderr_fd(), stdin=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        try:
            return proc.wait(timeout=deadline.left())
        except subprocess.TimeoutExpired:
            raise OutOfTime(part) from None
    finally:
        if proc.returncode is None:
            _stop(proc)


@contextlib.contextmanager
def probe_limit(deadline):
    """Opening a plugin (probed in a child, DEVICEKIT_PROBE_TIMEOUT) within the deadline."""
    from .._plugins import probe as _probe

    before = os.environ.get(_probe.TIMEOUT_ENV)
    if deadline.end is not None:
        os.environ[_probe.TIMEOUT_ENV] = f"{deadline.cap(_probe.timeout_s()):.3f}"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(_probe.TIMEOUT_ENV, None)
        else:
            os.environ[_probe.TIMEOUT_ENV] = before


def _performance(device, plugin, out):
    """The performance set, in its own process so that the deadline can stop
    a kernel that never returns; writes the section as JSON to ``out``."""
    import json

    from ..conformance.target import open_target
    from . import perf, record

    target = open_target(device or None, plugin or None)
    section = perf.measure(target.device, target.device.plugin.kernels(), record.host_info())
    with open(out, "w") as f:
        json.dump(section, f)


if __name__ == "__main__":
    if sys.argv[1:2] == ["performance"] and len(sys.argv) == 5:
        _performance(*sys.argv[2:5])
    else:
        sys.exit("usage: python -m devicekit.gate.parts performance DEVICE PLUGIN OUT")
