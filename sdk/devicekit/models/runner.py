"""Runs each model in its own worker subprocess, ``jobs`` at a time.

A worker that dies (segfault, abort, exit) gives every case of its model
that had not answered the outcome ``crash``, naming the signal, the dtype it
was running and its stderr tail; the other models go on. A model that takes
longer than ``timeout`` seconds is killed and its unanswered cases are
``error``. Results are keyed by case id, so the report does not depend on
scheduling.
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
from concurrent.futures import ThreadPoolExecutor

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
              padding_threshold=None):
    """Runs one worker; ``record(case_id, result)`` for each case; returns the model info."""
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
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, stdin=subprocess.DEVNULL)
        timed_out = False
        while True:
            left = timeout - (time.monotonic() - start)
            ready, _, _ = select.select([proc.stdout], [], [], max(left, 0))
            if not ready:
                timed_out = True
                proc.kill()
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
        tail = _tail(err)
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
    result)`` is called under a lock as each case answers (progress)."""
    results, infos, lock = {}, {}, threading.Lock()

    def record(cid, result):
        with lock:
            results[cid] = result
            if on_result:
                on_result(cid, result)

    def one(model):
        infos[model] = run_model(model, cases_of(model), device=device, plugin=plugin,
                                 dtypes=dtypes, steps=steps, timeout=timeout, record=record,
                                 padding_threshold=padding_threshold)

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        list(pool.map(one, models))
    return results, infos
