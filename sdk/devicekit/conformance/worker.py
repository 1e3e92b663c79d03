"""A conformance worker process: ``python -m devicekit.conformance.worker``.

Builds the same case list as the parent (deterministic), prints ``ready``,
then for each case id read from stdin runs the case and answers one JSON line.
The protocol uses a private copy of the original stdout; fd 1 itself is
pointed at stderr, so a plugin that prints cannot corrupt it. A plugin crash
kills only this process: the parent records ``crash`` and starts a new worker.
"""

import argparse
import json
import os
import sys


def _quiet_crashes():
    """A crashing kernel should end this process at once, with the Python
    stack on stderr (faulthandler; the parent keeps its tail), and without a
    core dump: writing one for a process with large device mappings can take
    minutes. Replay the case alone to debug it."""
    import faulthandler

    faulthandler.enable()
    try:
        import ctypes
        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4 (Linux)
    except (OSError, AttributeError):
        pass


def main(argv=None):
    p = argparse.ArgumentParser(prog="devicekit.conformance.worker")
    p.add_argument("--device")
    p.add_argument("--plugin")
    p.add_argument("--level", default="full")
    p.add_argument("--sections", help="comma-separated: build only these sections' cases")
    args = p.parse_args(argv)
    _quiet_crashes()
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    from . import registry
    from .case import ERROR, PASS, run_case  # noqa: F401
    from .case import TORCH_DEVICES_ENV
    from .target import open_target

    if args.plugin:
        # A development build (--plugin) joins discovery, shadowing an
        # installed plugin of its file's name (as `devicekit dev` does):
        # devicekit.torch, which the torch section runs, numbers discovered
        # devices only, and would otherwise skip the whole section.
        from .._plugins.registry import OVERRIDE_ENV
        os.environ[OVERRIDE_ENV] = os.path.abspath(args.plugin)
    target = open_target(args.device, args.plugin, args.level)
    # The device under test is dk:0 for the torch section (TORCH_DEVICES_ENV),
    # set before building the cases, which may number the devices.
    os.environ.setdefault(TORCH_DEVICES_ENV, target.device.name)
    # Only the sections of the cases it will be sent: a filtered run pays for
    # no other section's set-up (the torch section imports torch and its
    # OpInfo corpus, about 10 s of CPU per process).
    only = set(args.sections.split(",")) if args.sections else None
    by_id = {c.id: c for c in registry.build(target, only)[0]}
    proto.write("ready\n")
    for line in sys.stdin:
        case_id = line.strip()
        if not case_id:
            continue
        if case_id not in by_id and only is not None:  # never expected: every section, then
            by_id = {c.id: c for c in registry.build(target)[0]}
            only = None
        result = run_case(by_id[case_id], target)
        problem = _after_case(target.device)
        if problem and result["outcome"] == PASS:
            result.update(outcome=ERROR, message=problem)
        proto.write(json.dumps({"id": case_id, **result}) + "\n")


def _after_case(dev):
    """What the case left behind, checked in its own worker so it is blamed on
    it: work still failing (an asynchronous error, a late crash happens here
    too) and device memory the plugin counts that the SDK does not hold."""
    import gc

    try:  # an asynchronous kernel error surfaces here: it belongs to this case
        dev.synchronize()
        st = dev.memory_stats()
        if st["bytes_in_use"] != st["reserved_bytes"]:  # maybe only a reference cycle left
            gc.collect()  # (not every case: a full collection costs ~10 ms)
            dev.synchronize()
            st = dev.memory_stats()
    except Exception as e:
        return (f"asynchronous error reported after the case finished: "
                f"{type(e).__name__}: {e}")
    if st["bytes_in_use"] != st["reserved_bytes"]:
        return (f"device memory after the case: the plugin reports {st['bytes_in_use']} bytes in "
                f"use, the SDK holds {st['reserved_bytes']} (allocated {st['allocated_bytes']} + "
                f"cached {st['cached_bytes']}): a leak, or statistics that are not exact")
    return None


if __name__ == "__main__":
    main()
