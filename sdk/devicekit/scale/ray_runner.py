"""``devicekit ray``: a suite's shards fanned out over a Ray cluster (docs/scale.md).

Ray does the scheduling; this module only says what one task is. Task K
runs ``python -m devicekit SUITE ARGS --shard K/N --report TMP`` in a
subprocess on whichever node Ray places it, exactly as a person would on
that machine (worker processes, crash isolation, the node's installed plugin),
and returns the report's text. Placement is by a custom resource named after
the device (``devicekit_cpu`` for ``--device cpu:0``): each task asks for one
unit, so a node runs as many shards at once as it declares units of its
device, and nodes without the device never get one. The driver merges the
reports with ``devicekit report merge``'s code.
"""

import os
import socket
import subprocess
import sys
import tempfile

from .merge import MergeError, parse

NOT_PASSED_ON = ("--report", "--shard", "--list")


class RunnerError(MergeError):
    """A usage problem or a shard that produced no report (exit 2)."""

    exit_code = 2


def default_resource(suite_args):
    """``devicekit_<plugin>`` from ``--device NAME:INDEX``, or None."""
    for i, a in enumerate(suite_args):
        if a == "--device" and i + 1 < len(suite_args):
            return "devicekit_" + suite_args[i + 1].split(":")[0]
        if a.startswith("--device="):
            return "devicekit_" + a.split("=", 1)[1].split(":")[0]
    return None


def shard_command(suite, suite_args, k, n, report_dir):
    return [sys.executable, "-m", "devicekit", suite, *suite_args, "--shard", f"{k}/{n}",
            "--report", report_dir]


def run_shard(suite, suite_args, k, n):
    """The body of one Ray task (also callable without Ray): runs shard K/N as
    the CLI would and returns {index, returncode, report (text or None),
    stderr_tail, node, host}."""
    try:
        import ray
        node = ray.get_runtime_context().get_node_id()
    except Exception:  # outside a Ray worker
        node = None
    with tempfile.TemporaryDirectory(prefix="devicekit-shard-") as tmp:
        proc = subprocess.run(shard_command(suite, suite_args, k, n, tmp),
                              capture_output=True, text=True, stdin=subprocess.DEVNULL)
        path = os.path.join(tmp, "report.json")
        text = None
        if os.path.exists(path):
            with open(path) as f:
                text = f.read()
    return {"index": k, "returncode": proc.returncode, "report": text,
            "stderr_tail": proc.stderr[-3000:], "node": node, "host": socket.gethostname()}


def run(suite, suite_args, n, address=None, resource=None):
    """([(label, shard report)] for K = 1..N, [node id per shard]) from Ray
    tasks. Joins the cluster at ``address`` (or the Ray this process already
    started); without one, starts a local Ray offering ``n`` units of the
    resource."""
    if n < 1:
        raise RunnerError("ray", f"--shards must be at least 1, got {n}")
    suite_args = [a for a in suite_args if a != "--"]
    bad = [a for a in suite_args if a.split("=")[0] in NOT_PASSED_ON]
    if bad:
        raise RunnerError("ray", f"{', '.join(bad)}: devicekit ray sets the report, the shard "
                                 f"and runs the cases itself; give --report to 'devicekit ray'")
    resource = resource or default_resource(suite_args)
    if not resource:
        raise RunnerError("ray", "name the device's custom resource with --resource (it cannot be "
                                 "derived without --device NAME)")
    try:
        import ray
    except ImportError:
        raise RunnerError("ray", "ray is not installed: pip install 'devicekit[ray]'") from None
    started = False
    if not ray.is_initialized():
        if address:
            ray.init(address=address, log_to_driver=False)
        else:
            ray.init(resources={resource: n}, log_to_driver=False)
        started = True
    try:
        have = ray.cluster_resources().get(resource, 0)
        if have < 1:
            raise RunnerError("ray", f"no node of the Ray cluster offers the resource "
                                     f"'{resource}'; start the nodes that have the device with "
                                     f"ray start --resources '{{\"{resource}\": 1}}'")
        task = ray.remote(run_shard).options(resources={resource: 1}, max_retries=0)
        answers = ray.get([task.remote(suite, suite_args, k, n) for k in range(1, n + 1)])
    finally:
        if started:
            ray.shutdown()
    items, nodes = [], []
    for a in answers:
        label = f"ray task {a['index']}/{n} on {a['host']}"
        if a["report"] is None or a["returncode"] not in (0, 1):
            tail = " | ".join(a["stderr_tail"].strip().splitlines()[-3:])
            raise RunnerError(label, f"'devicekit {suite} --shard {a['index']}/{n}' exited "
                                     f"{a['returncode']} without a report: {tail}")
        items.append((label, parse(a["report"], label)))
        nodes.append(a["node"] or a["host"])
    return items, nodes
