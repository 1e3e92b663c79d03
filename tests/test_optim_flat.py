"""devicekit.optim.AdamW updates same-dtype parameters together:
packed end to end, one adamw_step for all of them. The update is
elementwise, so the results must be bit-identical to the per-parameter
adamw_step, step after step, and the launches must not grow with the
number of parameters beyond one gradient copy each."""

import numpy as np

import devicekit as dk
import devicekit.nn.functional as F
from devicekit import nn, optim

SHAPES = {"a": (4, 3), "b": (3,), "c": (2, 3, 2), "d": (), "e": (7, 1)}
HP = dict(lr=3e-2, betas=(0.85, 0.98), eps=1e-7, weight_decay=0.05)


def make(rng):
    return nn.ParameterDict({n: rng.standard_normal(s).astype(np.float32) for n, s in SHAPES.items()})


def loss(params, k):
    total = None
    for i, n in enumerate(SHAPES):
        term = ((params[n] * (0.5 + 0.1 * i + 0.01 * k)) ** 2).sum()
        total = term if total is None else total + term
    return total


def test_flat_adamw_is_bit_identical_to_per_parameter_steps(cpu):
    params = make(np.random.default_rng(7))
    ref = {n: params[n].detach() for n in SHAPES}
    m = {n: dk.zeros(*SHAPES[n]) for n in SHAPES}
    v = {n: dk.zeros(*SHAPES[n]) for n in SHAPES}
    opt = optim.AdamW(params.parameters(), **HP)
    for step in range(1, 5):
        opt.zero_grad()
        loss(params, step).backward()
        grads = {n: params[n].grad for n in SHAPES}
        opt.step()
        for n in SHAPES:
            ref[n], m[n], v[n] = F.adamw_step(ref[n], grads[n], m[n], v[n], step, lr=HP["lr"],
                                              beta1=HP["betas"][0], beta2=HP["betas"][1],
                                              eps=HP["eps"], weight_decay=HP["weight_decay"])
            got = params[n]
            assert got.shape == ref[n].shape and got.is_leaf and got.requires_grad
            assert got.grad is grads[n]  # kept until zero_grad
            np.testing.assert_array_equal(got.numpy(), ref[n].numpy(), err_msg=f"{n} step {step}")
            i = list(SHAPES).index(n)
            np.testing.assert_array_equal(opt.state[i]["m"].numpy(), m[n].numpy())
            np.testing.assert_array_equal(opt.state[i]["v"].numpy(), v[n].numpy())


def test_a_parameter_without_grad_leaves_the_group_and_stays_put(cpu):
    params = make(np.random.default_rng(8))
    opt = optim.AdamW(params.parameters(), **HP)
    loss(params, 0).backward()
    opt.step()
    frozen = params["c"]
    before = frozen.numpy().copy()
    opt.zero_grad()
    (params["a"] * params["b"]).sum().backward()  # only a and b get gradients
    opt.step()
    assert params["c"] is frozen and params["c"].grad is None
    np.testing.assert_array_equal(params["c"].numpy(), before)
    assert opt.state[0]["step"] == 2 and opt.state[2]["step"] == 1


def test_launches_per_step_do_not_scale_with_the_update_formula(cpu):
    params = make(np.random.default_rng(9))
    opt = optim.AdamW(params.parameters(), **HP)
    for _ in range(2):  # the second step reuses the packed parameters and moments
        opt.zero_grad()
        loss(params, 1).backward()
        dk.synchronize()
        dk.reset_dispatch_stats()
        opt.step()
        dk.synchronize()
    launches = sum(s["kernel"] for s in dk.dispatch_stats().values())
    # One copy per gradient plus one adamw_step (about 15 launches), where
    # five per-parameter steps take about 75.
    assert launches <= len(SHAPES) + 20, dk.dispatch_stats()
