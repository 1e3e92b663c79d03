"""Data parallelism as a model case: ``gpt2-ddp2``.

The zoo's ``gpt2`` trained on 2 ranks, each a process of its own on the
device under test, through ``devicekit.distributed`` and DeviceKit's own
autograd and AdamW (no torch): rank r runs the harness's phases
(``harness.execute``) on the r-th half of the batch and, after every
backward, all_reduces the master gradients with ``avg``, so both ranks take
the same AdamW steps. The combined run (the ranks' logits concatenated in
rank order, their losses averaged, rank 0's gradients) is judged like any
model's against the *single-process* run on the whole batch: the reference
side is ``gpt2``'s own (the float64 reference and the correct run of each
dtype on cpu:0, one process, the whole batch), with the suite's bounds
unchanged. One more check: the averaged gradients must be bitwise equal on
every rank (the collectives part's contract), else ``backward`` fails.

A plugin without the collectives part gets not-implemented cases, optional
there (nothing to certify); where the part is declared, float32 is required
as for every model. The parent (the model worker) makes the unique id,
spawns the ranks (``python -m devicekit.models.ddp``) with a time limit,
and kills every rank it started when it returns or fails.
"""

import argparse
import os
import pickle
import subprocess
import sys
import tempfile
import time

import numpy as np

from .base import Model

NRANKS = 2
#: The communicator's timeout: a collective that cannot complete fails in this time.
COMM_TIMEOUT_S = 60.0
NOT_IMPLEMENTED_WHY = ("the plugin has no collectives part (optional, device API 1.5): "
                       "data parallelism needs all_reduce")


class _SameModel(Model):
    """``inner``'s parameters, buffers and layers under another name: the
    data-parallel case and each rank's shard are the same network."""

    def __init__(self, inner):
        super().__init__(inner.config)
        self.inner = inner

    def param_specs(self):
        return self.inner.param_specs()

    def buffer_specs(self):
        return self.inner.buffer_specs()

    def layers(self):
        return self.inner.layers()


class DDPModel(_SameModel):
    """``inner`` trained data-parallel on ``nranks`` ranks; in one process it
    *is* ``inner`` (its parameters, batch and layers): that is the run the
    ranks' combined result is judged against."""

    ddp = True

    def __init__(self, inner, nranks=NRANKS):
        super().__init__(inner)
        self.nranks = nranks
        self.name = f"{inner.name}-ddp{nranks}"
        self.title = (f"{inner.title}, data parallel on {nranks} ranks (devicekit.distributed, "
                      f"gradients all_reduce'd avg) against one process on the whole batch")

    def make_data(self):
        return self.inner.make_data()

    def config_dict(self):
        return {**self.inner.config_dict(), "model": self.name, "ranks": self.nranks}


class _Shard(_SameModel):
    """Rank ``rank``'s part of ``inner``'s batch (its first axis split in
    ``nranks`` equal parts, in rank order)."""

    def __init__(self, inner, rank, nranks):
        super().__init__(inner)
        self.rank, self.nranks = rank, nranks
        self.name = inner.name

    def make_data(self):
        data = self.inner.make_data()
        batch = len(data["targets"])
        if batch % self.nranks:
            raise ValueError(f"{self.inner.name}: a batch of {batch} does not split into "
                             f"{self.nranks} equal parts")
        lo, hi = batch * self.rank // self.nranks, batch * (self.rank + 1) // self.nranks
        return {k: np.asarray(v)[lo:hi].copy() for k, v in data.items()}


# ---- one rank ------------------------------------------------------------------


def _rank_main(argv=None):
    p = argparse.ArgumentParser(prog="devicekit.models.ddp")
    p.add_argument("--model", required=True)
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--nranks", type=int, required=True)
    p.add_argument("--uid", required=True, help="the unique id, hex")
    p.add_argument("--dtypes", required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--device")
    p.add_argument("--plugin")
    args = p.parse_args(argv)
    from .. import distributed
    from ..autograd import no_grad
    from ..conformance.target import open_target
    from . import get
    from . import harness as H

    device = open_target(args.device, args.plugin).device
    model = get(args.model)
    shard = _Shard(model.inner, args.rank, args.nranks)
    comm = distributed.Communicator(bytes.fromhex(args.uid), args.nranks, args.rank, device,
                                    timeout=COMM_TIMEOUT_S)

    def sync(master):
        """The gradients' average over the ranks, in place (all issued, then
        waited); a strided gradient (a transposed weight's) is made dense first."""
        with no_grad():
            for _, t in master.items():
                if t.grad is not None and not t.grad.is_contiguous():
                    t.grad = t.grad.contiguous()
        works = [comm.all_reduce(t.grad, op="avg") for _, t in master.items()
                 if t.grad is not None]
        for w in works:
            w.wait()

    runs = {}
    try:
        for dtype in args.dtypes.split(","):
            runs[dtype] = H.execute(shard, device, dtype, args.steps, sync=sync)
    finally:
        comm.destroy()
    with open(os.path.join(args.out, f"rank{args.rank}.pkl.tmp"), "wb") as f:
        pickle.dump(runs, f)
    os.replace(os.path.join(args.out, f"rank{args.rank}.pkl.tmp"),
               os.path.join(args.out, f"rank{args.rank}.pkl"))


# ---- the parent: spawn, wait (bounded), combine ----------------------------------------


class RanksFailed(RuntimeError):
    pass


def spawn(model, device, plugin, dtypes, steps, timeout):
    """Runs the ranks; {dtype: [Run per rank]}. Raises RanksFailed with every
    rank's exit status and output tail. Every rank is killed on the way out."""
    from .. import distributed

    uid = distributed.unique_id(device).hex()
    with tempfile.TemporaryDirectory(prefix="dk-ddp-") as out:
        cmd = [sys.executable, "-m", "devicekit.models.ddp", "--model", model.name,
               "--nranks", str(model.nranks), "--uid", uid, "--dtypes", ",".join(dtypes),
               "--steps", str(steps), "--out", out, "--device", device.name]
        if plugin:
            cmd += ["--plugin", plugin]
        logs = [tempfile.TemporaryFile() for _ in range(model.nranks)]
        procs = []
        try:
            for r in range(model.nranks):
                procs.append(subprocess.Popen(cmd + ["--rank", str(r)], stdout=logs[r],
                                              stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))
            deadline = time.monotonic() + timeout
            while any(pr.poll() is None for pr in procs):  # poll() reaps: peers see a death
                if time.monotonic() > deadline:
                    raise RanksFailed(f"{model.name}: the ranks did not finish within "
                                      f"{timeout:g} s" + _tails(procs, logs))
                time.sleep(0.02)
            if any(pr.returncode != 0 for pr in procs):
                raise RanksFailed(f"{model.name}: a rank failed" + _tails(procs, logs))
            per_rank = []
            for r in range(model.nranks):
                with open(os.path.join(out, f"rank{r}.pkl"), "rb") as f:
                    per_rank.append(pickle.load(f))
        finally:
            for pr in procs:
                if pr.poll() is None:
                    pr.kill()
                    pr.wait()
            for f in logs:
                f.close()
    return {dt: [rk[dt] for rk in per_rank] for dt in dtypes}


def _tails(procs, logs):
    lines = []
    for r, (pr, f) in enumerate(zip(procs, logs)):
        f.seek(0)
        text = f.read().decode(errors="replace").strip()[-1500:]
        status = "running" if pr.poll() is None else f"exit {pr.returncode}"
        lines.append(f"\n--- rank {r} ({status}):\n{text}")
    return "".join(lines)


def combine(model, dtype, ranks):
    """One ``harness.Run`` from the ranks' runs: logits concatenated in rank
    order, losses averaged (equal parts of a mean), rank 0's gradients, which
    must be bitwise equal on every rank."""
    from ..conformance.case import FAIL
    from . import harness as H

    r0 = ranks[0]
    run = H.Run(model.name, r0.device, dtype, ops=r0.ops, fused=r0.fused)
    for rk in ranks:
        for phase, problem in rk.problems.items():
            run.problems.setdefault(phase, problem)

    def cat(attr):
        parts = [getattr(rk, attr) for rk in ranks]
        return None if any(x is None for x in parts) else np.concatenate(parts, axis=0)

    run.logits, run.inference = cat("logits"), cat("inference")
    if all(rk.loss is not None for rk in ranks):
        run.loss = float(np.mean([rk.loss for rk in ranks]))
    if all(len(rk.curve) == len(r0.curve) for rk in ranks):
        run.curve = [float(v) for v in np.mean([rk.curve for rk in ranks], axis=0)]
    run.grads = r0.grads
    for r, rk in enumerate(ranks[1:], 1):
        differ = sorted(n for n in r0.grads
                        if n not in rk.grads or rk.grads[n].tobytes() != r0.grads[n].tobytes())
        if differ and "backward" not in run.problems:
            run.problems["backward"] = (
                FAIL, f"the averaged gradients differ between rank 0 and rank {r} in "
                      f"{len(differ)} parameters ({', '.join(differ[:3])}...): every rank must "
                      f"receive the same bits from all_reduce")
    return run


if __name__ == "__main__":
    _rank_main()
