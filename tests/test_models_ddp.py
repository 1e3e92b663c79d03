"""The multi-rank model case ``gpt2-ddp2`` (devicekit.models.ddp): the zoo's
GPT-2 trained data-parallel on 2 ranks through devicekit.distributed equals
the single-process run on the whole batch within the model suite's bounds;
ranks that do not average their gradients, or that receive different bits,
fail; a plugin without the collectives part gets optional not-implemented
cases."""

import numpy as np
import pytest

import devicekit.models as zoo
from devicekit.conformance.case import FAIL, NOT_IMPLEMENTED, PASS
from devicekit.models import ddp, report, worker
from devicekit.models import harness as H

STEPS = 2


@pytest.fixture(scope="module")
def sides():
    """The single-process sides (float64 reference, float32 correct run) and
    two ranks' float32 runs on their halves of the batch, NOT averaged."""
    model = zoo.get("gpt2-ddp2")
    ref = H.execute(model, "cpu:0", "float64", STEPS)
    correct = H.execute(model, "cpu:0", "float32", STEPS)
    ranks = [H.execute(ddp._Shard(model.inner, r, 2), "cpu:0", "float32", STEPS)
             for r in range(2)]
    return model, ref, correct, ranks


def test_gpt2_ddp2_on_two_ranks_equals_one_process(sides, monkeypatch):
    """The model worker's path: two real rank processes (spawned, bounded,
    reaped), combined and judged against the single-process sides (given here
    in-process instead of by the reference subprocess, to save its start)."""
    from devicekit.conformance.target import open_target
    from devicekit.models import reference

    model, ref, correct, _ = sides
    monkeypatch.setattr(reference, "fetch", lambda name, dtypes=(), steps=1, **kw: {
        "runs": {"float64": ref, "float32": correct}})
    out = []
    worker.run_model(model, open_target("cpu:0"), ["float32"], STEPS, "", out.append)
    got = {m["case"]: (m["outcome"], m["message"]) for m in out if "case" in m}
    assert got == {f"models/gpt2-ddp2/float32/{p}": (PASS, "") for p in H.PHASES}, got
    info = next(m["model"] for m in out if "model" in m)
    assert info["ranks"] == 2 and len(info["curves"]["float32"]["plugin"]) == STEPS + 1
    assert info["golden"]["file"].endswith("gpt2.json")  # the single-process model's golden
    assert "gpt2-ddp2" in zoo.ALL_NAMES and zoo.get("gpt2-ddp2").config_dict()["ranks"] == 2


def test_ranks_that_do_not_average_their_gradients_fail(sides):
    model, ref, correct, ranks = sides
    run = ddp.combine(model, "float32", ranks)
    # each half alone: the forward and the mean loss still match one process ...
    for phase in ("forward", "loss", "inference"):
        assert H.judge(phase, run, correct, ref, "float32")[0] == PASS, phase
    # ... the gradients and the training do not
    for phase in ("backward", "train"):
        outcome, message, _ = H.judge(phase, run, correct, ref, "float32")
        assert outcome == FAIL, (phase, message)


def test_ranks_with_different_gradient_bits_fail_backward(sides):
    model, _, _, ranks = sides
    other = H.Run(**{**ranks[0].__dict__, "grads": {
        n: (np.nextafter(g.astype(np.float32), np.float32(np.inf)).astype(np.float64)
            if n == "wte" else g) for n, g in ranks[0].grads.items()}})
    run = ddp.combine(model, "float32", [ranks[0], other])
    outcome, message = run.problems["backward"]
    assert outcome == FAIL and "rank 1" in message and "wte" in message, message
    assert "backward" not in ddp.combine(model, "float32", [ranks[0], ranks[0]]).problems


def test_a_plugin_without_collectives_gets_optional_not_implemented(monkeypatch):
    from devicekit import distributed
    from devicekit.conformance.target import open_target

    monkeypatch.setattr(distributed, "is_available", lambda device=None: False)
    out = []
    worker.run_model(zoo.get("gpt2-ddp2"), open_target("cpu:0"), ["float32"], STEPS, "",
                     out.append)
    cases = [m for m in out if "case" in m]
    assert [m["outcome"] for m in cases] == [NOT_IMPLEMENTED] * len(H.PHASES)
    assert "no collectives part" in cases[0]["message"]
    made = report.make_cases(["gpt2", "gpt2-ddp2"], ["float32"], H.PHASES,
                             {"gpt2": 1, "gpt2-ddp2": 1}, ["gpt2-ddp2"])
    assert {c.section for c in made if c.required} == {"gpt2"}
