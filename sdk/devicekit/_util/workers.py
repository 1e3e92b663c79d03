"""The suites' worker processes and how a run of them stops (conformance, models).

Both suites run their work in worker subprocesses, ``jobs`` at a time, one
thread per slot in the parent. This module holds what they share:

- :func:`spawn` starts a worker in its own session (and process group). A
  terminal's Ctrl-C goes to the foreground process group, so it reaches the
  parent only: no worker dies mid-case from it (which would make every case
  it was running a false ``crash``), and the parent decides what happens.
- :func:`kill` stops a worker with its whole process group, so whatever the
  worker started itself (the models' reference process) goes with it;
  :func:`finish` ends a worker that reads requests on stdin: end of input
  (after a last line, if its protocol has one), a bounded wait, then
  :func:`kill`. ``gate check``'s timing workers end the same way.
- :class:`Pool` hands out units (cases, models) to the slots and, when the
  main thread is interrupted (Ctrl-C, or SIGTERM, which
  ``_output.signal_policy`` turns into the same KeyboardInterrupt), stops
  handing them out, kills every live worker and waits for the slots: no
  worker outlives the run. The suite then raises :class:`Interrupted` with
  what finished and writes its partial report.
"""

import os
import signal
import subprocess
import threading

from . import output as _output


class Interrupted(Exception):
    """Ctrl-C or SIGTERM during a run; ``results`` holds the units that finished
    (and ``infos``, for the models, the model summaries that arrived)."""

    def __init__(self, results, infos=None):
        super().__init__("interrupted")
        self.results, self.infos = results, infos or {}


def spawn(cmd, **popen_args):
    """``subprocess.Popen(cmd)`` in a session of its own (see the module doc)."""
    return subprocess.Popen(cmd, start_new_session=True, **popen_args)


#: Seconds a worker stopped at its case's timeout gets between SIGTERM and
#: SIGKILL. A plain worker dies at SIGTERM at once; a plugin's coverage build
#: writes its counters first (<devicekit/plugin_coverage.h>), so a run's
#: coverage does not depend on which cases timed out.
TERM_GRACE_S = 10.0


def kill(proc, grace=0.0):
    """SIGKILL to ``proc``'s process group (it leads one: :func:`spawn`).
    With ``grace`` > 0, SIGTERM first, and up to ``grace`` seconds for
    ``proc`` to exit before the SIGKILL (which still goes to the group)."""
    if grace > 0:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=grace)
        except (subprocess.TimeoutExpired, OSError):
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):  # gone already (or reaped: pid reused)
        pass
    except OSError:
        proc.kill()


def finish(proc, *, last=None, timeout=30, now=False, grace=0.0):
    """End ``proc``, a worker reading requests on its stdin: write ``last``
    (bytes, e.g. a quit request) if given, close stdin and wait up to
    ``timeout`` seconds for it to exit; :func:`kill` it (its whole group)
    if it does not, or at once with ``now`` (SIGTERM and ``grace`` seconds
    first, see :func:`kill`). Returns its exit status."""
    if now:
        kill(proc, grace)
    else:
        try:
            if last:
                proc.stdin.write(last)
            proc.stdin.close()
        except (OSError, ValueError):  # it died already, or stdin is closed
            pass
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill(proc)
        return proc.wait()


class Pool:
    """``jobs`` slot threads taking ``units`` one at a time (see the module doc).

    A slot calls :meth:`take` for its next unit (None: done or stopping), and
    :meth:`started` / :meth:`finished` around each worker process it owns, so
    an interrupt can kill it; :meth:`started` returns False (and kills the
    process) when the run is already stopping."""

    def __init__(self, units):
        self.stop = threading.Event()
        self._lock = threading.Lock()
        self._units = iter(units)
        self._procs = set()

    def take(self):
        with self._lock:
            return None if self.stop.is_set() else next(self._units, None)

    def started(self, proc):
        with self._lock:
            if not self.stop.is_set():
                self._procs.add(proc)
                return True
        kill(proc)
        return False

    def finished(self, proc):
        with self._lock:
            self._procs.discard(proc)

    def halt(self):
        """No more units; the slots finish what they are doing. (A failure
        stopping the run, not an interrupt: the workers are not killed.)"""
        self.stop.set()

    def run(self, slot, jobs):
        """Runs ``slot()`` in ``jobs`` threads until all return. On
        KeyboardInterrupt kills the workers, waits for the slots (30 s at
        most) and re-raises it."""
        threads = [threading.Thread(target=slot, daemon=True) for _ in range(max(1, jobs))]
        try:
            for t in threads:
                t.start()
            for t in threads:
                while t.is_alive():
                    t.join(0.2)
        except KeyboardInterrupt:
            # A second signal now must not leave a worker behind: it is dropped
            # (the run is stopping already) until every worker is killed.
            with _output.held_signals(redeliver=False):
                with self._lock:
                    self.stop.set()
                    procs = list(self._procs)
                for proc in procs:
                    kill(proc)
            for t in threads:
                if t.ident is not None:
                    t.join(30)
            raise
