"""Finite differences for gradients.

- :func:`numeric_gradient`: central differences of any scalar numpy function;
  the conformance autograd section applies it to the float64 numpy oracle, so
  its reference gradients never touch the plugin.
- :func:`gradcheck` (like torch.autograd.gradcheck), used by the project's
  tests: the function runs on float64 devicekit tensors; the loss is
  sum(out * w) for a fixed random w, so every output element's gradient path
  is exercised. The analytic gradient (backward) must match central
  differences of that loss.
"""

import numpy as np

import devicekit as dk


def _loss(out, w):
    return float(np.sum(np.where(w == 0, 0.0, out.numpy() * w)))


def numeric_gradient(loss, arrays, i, eps=1e-6):
    """d loss(*arrays) / d arrays[i] by central differences; ``arrays[i]`` is a
    float64 numpy array, ``loss`` returns a float."""
    base = arrays[i]
    numeric = np.zeros(base.shape)
    for j in np.ndindex(base.shape):
        moved = list(arrays)
        for sign in (1, -1):
            x = base.copy()
            x[j] += sign * eps
            moved[i] = x
            numeric[j] += sign * loss(*moved) / (2 * eps)
    return numeric


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

    def evaluate(*arrays):
        with dk.no_grad():
            return _loss(fn(*[dk.tensor(a) if isinstance(a, np.ndarray) else a for a in arrays]), w)

    for i in wrt:
        analytic = args[i].grad.numpy() if args[i].grad is not None else np.zeros(inputs[i].shape)
        assert analytic.shape == inputs[i].shape and analytic.dtype == np.float64
        numeric = numeric_gradient(evaluate, list(inputs), i, eps)
        np.testing.assert_allclose(analytic, numeric, rtol=rtol, atol=atol,
                                   err_msg=f"gradient of input {i} (shape {inputs[i].shape})")
