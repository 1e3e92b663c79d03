"""Runs each model in its own worker subprocess, ``jobs`` at a time.

A worker that dies (segfault, abort, exit) gives every case of its model
that had not answered the outcome ``crash``, naming the signal, the dtype it
was running and its stderr tail; the other models go on. A model that takes
longer than ``timeout`` seconds is killed and its unanswered cases are
``error``. Results are keyed by case id, so the report does not depend on
scheduling. Ctrl-C or SIGTERM stops the run as it stops conformance
(``devicekit._util.workers``): the running workers are killed with their reference
processes, no further model starts, and :class:`~devicekit._util.workers.Interrupted`
carries the cases that answered; a case that never answered is left out,
not counted as a crash.
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
from ..conformance.case import CRASH, ERROR


def _death(proc):
    rc = proc.wait()
    if rc < 0:
        try:
            return f"killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"killed by signal {-rc}"
    return f"exited with status {rc}"


def _tail(f, n=4000):
    f.seek(0, os.SEEK_END)
    size = f.tell()
    f.seek(max(0, size - n))
    return f.read().decode(errors="replace").strip()


def run_model(model, case_ids, *, device, plugin, dtypes, steps, timeout, record,
              padding_threshold=None, pool=None):
    """Runs one worker; ``record(case_id, result)`` for each case; returns the
    model info, or None when ``pool`` stopped (an interrupt: the worker is
    killed and the cases that did not answer get no result)."""
    pool = pool or _workers.Pool(())
    cmd = [sys.executable, "-m", "devicekit.models.worker", "--model", model,
           "--dtypes", ",".join(dtypes), "--steps", str(steps)]
    if device:
        cmd += ["--device", device]
    if plugin:
        cmd += ["--plugin", plugin]
    if padding_threshold is not None:
        cmd += ["--padding-threshold", str(padding_threshold)]
    pending, current, info = list(case_ids), None, {}
    start = time.monotonic()
    with tempfile.TemporaryFile() as err:
        proc = _workers.spawn(cmd, stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL)
        if not pool.started(proc):
            proc.wait()
            return None
        timed_out = False
        while True:
            left = timeout - (time.monotonic() - start)
            ready, _, _ = select.select([proc.stdout], [], [], max(left, 0))
            if not ready:
                timed_out = True
                _workers.kill(proc)
                break
            line = proc.stdout.readline()
            if not line:
                break
            msg = json.loads(line)
            if "start" in msg:
                current = msg["start"]
            elif "case" in msg:
                cid = msg.pop("case")
                msg["duration_s"] = round(time.monotonic() - start, 3)
                if cid in pending:
                    pending.remove(cid)
                record(cid, msg)
            elif "model" in msg:
                info = msg["model"]
        how = _death(proc)
        pool.finished(proc)
        tail = _tail(err)
    if pool.stop.is_set() and not timed_out and (pending or not info):
        return None  # killed by the interrupt: no verdict on what did not answer
    took = round(time.monotonic() - start, 3)
    for cid in pending:
        if timed_out:
            record(cid, {"outcome": ERROR, "duration_s": took, "details": {},
                         "message": f"model {model} timed out after {timeout:g} s (worker killed)"})
        else:
            record(cid, {"outcome": CRASH, "duration_s": took,
                         "message": f"worker process {how} while running model {model}"
                                    + (f" in {current}" if current else " (before any dtype ran)"),
                         "details": {"signal": how, "stderr_tail": tail}})
    if not info and not pending:
        info = {"error": f"worker {how} without its model summary: {tail[-500:]}"}
    return info


def run(models, cases_of, *, device, plugin, dtypes, steps, jobs=1, timeout=600.0, on_result=None,
        padding_threshold=None):
    """({case id: result}, {model: info}) for every model; ``on_result(case_id,
    result)`` is called under a lock as each case answers (progress). Ctrl-C
    or SIGTERM raises :class:`~devicekit._util.workers.Interrupted` with what
    answered."""
    results, infos, lock = {}, {}, threading.Lock()
    pool = _workers.Pool(models)

    def record(cid, result):
        with lock:
            results[cid] = result
            if on_result:
                on_result(cid, result)

    def slot():
        while (model := pool.take()) is not None:
            info = run_model(model, cases_of(model), device=device, plugin=plugin, dtypes=dtypes,
                             steps=steps, timeout=timeout, record=record,
                             padding_threshold=padding_threshold, pool=pool)
            if info is not None:
                with lock:
                    infos[model] = info

    try:
        pool.run(slot, jobs)
    except KeyboardInterrupt:
        with lock:
            raise _workers.Interrupted(dict(results), dict(infos)) from None
    return results, infos
