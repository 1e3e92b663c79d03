"""One side of ``gate check``'s alternate timing (:mod:`.paired`): a process
that loads one plugin library, prepares the performance set
(:data:`.perf.SET`, the figures certify records) on one of its devices, and
times one batch of calls per request.

    python -m devicekit.gate.perf_worker LIBRARY DEVICE_INDEX [KEY ...]

With KEYs (figure keys, :func:`.perf.key`) only those figures are prepared
and timed: the parent gives each figure a fresh pair of processes, so that
what one figure did to a process (a slow kernel's sleeps, a pool's threads
parked) cannot carry into the next figure's timing.

Each side runs in its own process because the two binaries are usually two
builds of one plugin: same plugin name, same symbols, possibly the same
vendor runtime underneath, which one process cannot hold twice with
certainty. While one side times a batch the other waits on its stdin.

Protocol, one JSON value per line. Answers go to a private copy of stdout;
file descriptor 1 itself is pointed at stderr, so a plugin or a library
that prints cannot corrupt them.

- first answer: ``{"ready": true, "figures": [{"key", "op", "dtype", "size",
  "calls"}], "skipped": [{"key", "reason"}]}`` or ``{"error": "..."}``;
- request ``"KEY CALLS BATCHES"`` (a figure's :func:`.perf.key`): BATCHES
  batches of CALLS back-to-back calls, each ending with a device
  synchronize; answer ``{"seconds": the best batch's time per call}`` or
  ``{"error": "..."}``. The parent sends both sides the same numbers:
  batches of different lengths see different shares of preemption on a
  loaded machine (a batch shorter than a time slice often escapes it), which
  made one binary look 10x faster than itself;
- request ``"quit"`` or end of input: exit 0.
"""

import json
import os
import sys


def _say(stream, obj):
    stream.write(json.dumps(obj) + "\n")
    stream.flush()


def _prepare(library, index, only=None):
    """({key: (call, sync)}, figures, skipped) on device ``index`` of ``library``;
    a figure's ``calls`` is this side's own calibration (~5 ms a batch).
    ``only``: the keys to prepare (None: all); the others are left out of
    both lists."""
    import devicekit as dk

    from . import perf

    plugin = dk.load_plugin(library)
    devices = list(plugin.devices)
    if not 0 <= index < len(devices):
        raise LookupError(f"{library} has {len(devices)} device(s); device index {index} "
                          f"is not one of them")
    device = devices[index]
    implemented = {k["op"] for k in plugin.kernels()
                   if k.get("implemented") and "float32" in k["dtypes"]}
    sync = lambda: dk.synchronize(device)  # noqa: E731
    batches, figures, skipped = {}, [], []
    with dk.no_grad():
        for op, kind, size in perf.SET:
            key = perf.key({"op": op, "dtype": "float32", "size": size})
            if only is not None and key not in only:
                continue
            if op not in implemented:
                skipped.append({"key": key, "reason": "the plugin does not implement this "
                                                      "kernel in float32"})
                continue
            # the same inputs and call certify times (perf.measure); the numpy
            # reference it also builds is not used here: the other side is
            _, call, _, _, _ = perf._case(op, kind, size, device)
            calls = perf.calls_for(call, sync)
            batches[key] = (call, sync)
            figures.append({"key": key, "op": op, "dtype": "float32", "size": size,
                            "calls": calls})
    return batches, figures, skipped


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # whatever else writes to fd 1 lands on stderr
    sys.stdout = sys.stderr
    try:
        library, index, only = argv[0], int(argv[1]), argv[2:] or None
        batches, figures, skipped = _prepare(library, index, only)
    except Exception as e:  # any failure to start is the answer, in one line
        _say(answers, {"error": " ".join(f"{type(e).__name__}: {e}".split())})
        return 2
    _say(answers, {"ready": True, "figures": figures, "skipped": skipped})
    import devicekit as dk

    from . import perf

    with dk.no_grad():
        for line in sys.stdin:
            key, *counts = line.split()
            if key == "quit":
                break
            if key not in batches or len(counts) != 2 or not all(
                    c.isdigit() and int(c) >= 1 for c in counts):
                _say(answers, {"error": f"not a request: {line.strip()[:80]!r}"})
                continue
            (call, sync), (calls, repeats) = batches[key], map(int, counts)
            timer = perf.batch_timer(call, sync, calls)
            try:
                _say(answers, {"seconds": min(timer() for _ in range(repeats)) / calls})
            except Exception as e:  # a kernel error: the parent decides what it means
                _say(answers, {"error": " ".join(f"{type(e).__name__}: {e}".split())})
    return 0


if __name__ == "__main__":
    sys.exit(main())
