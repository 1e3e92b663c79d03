"""Finite-difference gradient check (like torch.autograd.gradcheck), shared by
test_autograd.py and test_composites.py.

The function runs on float64 devicekit tensors; the loss is sum(out * w) for a
fixed random w, so every output element's gradient path is exercised. The
analytic gradient (backward) must match central differences of that loss.
"""

import numpy as np

import devicekit as dk


def _loss(out, w):
    return float(np.sum(np.where(w == 0, 0.0, out.numpy() * w)))


def gradcheck(fn, *inputs, eps=1e-6, atol=1e-6, rtol=1e-5, wrt=None):
    """``inputs``: float64 numpy arrays (differentiated, unless ``wrt`` names the
    positions to differentiate) and anything else (passed through as-is)."""
    wrt = [i for i, a in enumerate(inputs) if isinstance(a, np.ndarray) and a.dtype == np.float64] \
        if wrt is None else list(wrt)
    args = [dk.tensor(a, requires_grad=i in wrt) if isinstance(a, np.ndarray) else a
            for i, a in enumerate(inputs)]
    out = fn(*args)
    w = np.random.default_rng(1).standard_normal(out.shape)
    dk.ops.sum(out * dk.tensor(w)).backward()

    def evaluate(arrays):
        with dk.no_grad():
            return _loss(fn(*[dk.tensor(a) if isinstance(a, np.ndarray) else a for a in arrays]), w)

    for i in wrt:
        analytic = args[i].grad.numpy() if args[i].grad is not None else np.zeros(inputs[i].shape)
        assert analytic.shape == inputs[i].shape and analytic.dtype == np.float64
        numeric = np.zeros(inputs[i].shape)
        for j in np.ndindex(inputs[i].shape):
            arrays = list(inputs)
            for sign in (1, -1):
                moved = inputs[i].copy()
                moved[j] += sign * eps
                arrays[i] = moved
                numeric[j] += sign * evaluate(arrays) / (2 * eps)
        np.testing.assert_allclose(analytic, numeric, rtol=rtol, atol=atol,
                                   err_msg=f"gradient of input {i} (shape {inputs[i].shape})")
