"""Runs cases in worker subprocesses, one case at a time per worker.

Each of ``jobs`` slots owns one worker and takes the next case from the shared
list. A worker that dies mid-case (segfault, abort, exit) gives that case the
outcome ``crash`` with its signal and stderr tail, and the slot starts a fresh
worker for the next case. A case that exceeds ``timeout`` s is an ``error``
(its worker is stopped, SIGTERM and then SIGKILL, and replaced). Results are
keyed by case id, so the report's order and content do not depend on
scheduling. Ctrl-C or SIGTERM
stops the run: every worker is killed (``devicekit._util.workers``) and
:class:`Interrupted` carries the cases that finished.
"""

import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time

from .._util import workers as _workers
from .._util.workers import Interrupted  # noqa: F401  (raised by run(); its home is shared)
from .case import CRASH, ERROR, run_case


class _Worker:
    def __init__(self, device, plugin, level, pool, sections=()):
        cmd = [sys.executable, "-m", "devicekit.conformance.worker", "--level", level]
        if device:
            cmd += ["--device", device]
        if plugin:
            cmd += ["--plugin", plugin]
        if sections:  # it builds only these sections' cases (the torch section imports torch)
            cmd += ["--sections", ",".join(sorted(sections))]
        self.stderr = tempfile.TemporaryFile()
        # Its own session: Ctrl-C reaches only the parent, which stops the run
        # and writes a partial report instead of every worker dying mid-case.
        self.proc = _workers.spawn(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=self.stderr)
        self.pool = pool
        if not pool.started(self.proc):
            self.close()
            raise _Stopped
        line = self.proc.stdout.readline()
        if line.strip() != b"ready":
            raise RuntimeError(f"conformance worker failed to start: {self.stderr_tail()}")

    def run(self, case_id, timeout):
        """The worker's JSON answer; None if it died (EOF); "timeout".

        The case's time is the parent's clock from sending the id to the
        answer being ready, so an answer found after the deadline (this
        process was descheduled while the worker finished) is a timeout too,
        and what a timeout means does not depend on the host's load."""
        start = time.monotonic()
        try:
            self.proc.stdin.write(case_id.encode() + b"\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            return None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready or time.monotonic() - start > timeout:
            return "timeout"
        line = self.proc.stdout.readline()
        return json.loads(line) if line else None

    def stderr_tail(self, n=4000):
        self.stderr.seek(0, os.SEEK_END)
        size = self.stderr.tell()
        self.stderr.seek(max(0, size - n))
        return self.stderr.read().decode(errors="replace").strip()

    def death(self):
        """'killed by SIGSEGV' / 'exited with status 3' once the process is gone."""
        rc = self.proc.wait(timeout=30)
        if rc < 0:
            try:
                return f"killed by {signal.Signals(-rc).name}"
            except ValueError:
                return f"killed by signal {-rc}"
        return f"exited with status {rc}"

    def close(self, kill=False, grace=0.0):
        self.pool.finished(self.proc)
        _workers.finish(self.proc, now=kill, grace=grace)
        self.stderr.close()


class _Stopped(Exception):
    """The run stopped while a worker was starting (it is killed)."""


def run(cases, *, device, plugin, level, jobs=1, timeout=120.0, on_result=None,
        stop_on_failure=False):
    """{case id: result dict} for ``cases``; ``on_result(case, result)`` is
    called (under a lock) as each finishes, for progress output. Ctrl-C or
    SIGTERM kills the workers and raises :class:`Interrupted` with the
    results so far."""
    results, lock = {}, threading.Lock()
    pool = _workers.Pool(cases)
    sections = {c.section for c in cases}

    def record(case, result):
        with lock:
            results[case.id] = result
            if on_result:
                on_result(case, result)
            if stop_on_failure and result["outcome"] in ("fail", "error", "crash"):
                pool.halt()  # the other slots finish their current case and stop

    def slot():
        worker = None
        try:
            while (case := pool.take()) is not None:
                if case.not_implemented:  # nothing to run: no worker needed
                    record(case, run_case(case, None))
                    continue
                if worker is None:
                    try:
                        worker = _Worker(device, plugin, level, pool, sections)
                    except _Stopped:
                        break
                    except RuntimeError as e:  # e.g. the plugin fails to initialise again
                        if pool.stop.is_set():
                            break  # (an interrupt killed it while it started)
                        record(case, {"outcome": ERROR, "duration_s": 0.0, "details": {},
                                      "message": str(e)})
                        continue
                start = time.perf_counter()
                answer = worker.run(case.id, timeout)
                if pool.stop.is_set() and not isinstance(answer, dict):
                    break  # (an interrupt killed the worker)
                if isinstance(answer, dict):
                    answer.pop("id", None)
                    record(case, answer)
                    continue
                took = round(time.perf_counter() - start, 6)
                if answer == "timeout":
                    # SIGTERM first: a coverage build writes its counters
                    worker.close(kill=True, grace=_workers.TERM_GRACE_S)
                    record(case, {"outcome": ERROR, "duration_s": took, "details": {},
                                  "message": f"timed out after {timeout:g} s (worker killed)"})
                else:
                    how = worker.death()
                    tail = worker.stderr_tail()
                    worker.close()
                    record(case, {"outcome": CRASH, "duration_s": took,
                                  "message": f"worker process {how} while running "
                                             f"{case.id} (op {case.op or '-'})",
                                  "details": {"signal": how, "stderr_tail": tail}})
                worker = None  # a fresh worker for the next case
        finally:
            if worker is not None:
                worker.close(kill=pool.stop.is_set())

    try:
        pool.run(slot, jobs)
    except KeyboardInterrupt:
        with lock:
            raise Interrupted(dict(results)) from None  # the interrupt itself is no error to show
    return results
