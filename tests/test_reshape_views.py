"""reshape returns a view whenever the layout allows one (as torch.reshape and
numpy's in-place shape change), else a dense copy; values are numpy's either
way, and gradients flow through both. The case that matters in models: a
piece of ``qkv.split(d, dim=-1)`` reshaped to heads is a view, so attention
gets it without a copy launch."""

import numpy as np
import pytest

import devicekit as dk
from devicekit import ops

RNG = np.random.default_rng(7)


def _numpy_can_view(a, shape):
    b = a.view()
    try:
        b.shape = shape  # numpy refuses exactly when a copy would be needed
    except AttributeError:
        return False
    return True


def _layouts():
    """(numpy array, the same as a device view) pairs of assorted layouts."""
    base = RNG.standard_normal((4, 6, 10)).astype(np.float32)
    t = dk.tensor(base)
    yield base, t
    yield base.transpose(1, 0, 2), t.permute(1, 0, 2)
    yield base.transpose(2, 1, 0), t.permute(2, 1, 0)
    yield base[:, 1:5, :], t[:, 1:5, :]
    yield base[:, :, 2:6], t[:, :, 2:6]  # a split piece along the last dim
    yield base[::2, :, :], t[::2, :, :]
    yield base[:, :1, :], t[:, :1, :]    # a size-1 dim with a meaningless stride
    yield base[1:2, 3:4, :], t[1:2, 3:4, :]


def _targets(n):
    out = [[n], [-1, 1], [1, n]]
    for a in range(2, n):
        if n % a == 0:
            out.append([a, n // a])
            for b in range(2, n // a):
                if (n // a) % b == 0:
                    out.append([a, b, n // a // b])
    return out


def test_reshape_is_a_view_exactly_when_numpy_can_reshape_in_place():
    checked = views = 0
    for a, t in _layouts():
        for shape in _targets(a.size) + [list(a.shape[:-1]) + [a.shape[-1] // 2, 2]
                                         if a.shape[-1] % 2 == 0 else list(a.shape)]:
            want = a.reshape(shape)
            got = t.reshape(*shape)
            np.testing.assert_array_equal(got.numpy(), want)
            is_view = got._storage_id == t._storage_id
            assert is_view == _numpy_can_view(a, want.shape), (a.shape, a.strides, shape)
            checked += 1
            views += is_view
    assert checked > 100 and 0 < views < checked  # both paths were exercised


def test_split_heads_is_a_view_and_costs_no_launch():
    b, n, h, d = 2, 5, 3, 4
    qkv = dk.tensor(RNG.standard_normal((b, n, 3 * h * d)).astype(np.float32))
    q, k, v = qkv.split(h * d, dim=2)
    dk.synchronize()
    dk.reset_dispatch_stats()
    heads = [x.reshape(b, n, h, d).transpose(1, 2) for x in (q, k, v)]
    assert sum(s["kernel"] for s in dk.dispatch_stats().values()) == 0
    want = qkv.numpy().reshape(b, n, 3, h, d).transpose(2, 0, 3, 1, 4)
    for got, w in zip(heads, want):
        np.testing.assert_array_equal(got.numpy(), w)


@pytest.mark.parametrize("viewable", [True, False])
def test_gradients_flow_through_either_path(viewable):
    a = RNG.standard_normal((4, 6)).astype(np.float32)
    x = dk.tensor(a, requires_grad=True)
    src = x[:, 1:5] if viewable else x.T  # a column slice is viewable as [4, 2, 2]; x.T as [24] is not
    shape = (4, 2, 2) if viewable else (24,)
    y = src.reshape(*shape)
    assert (y._storage_id == x._storage_id) == viewable
    w = RNG.standard_normal(shape).astype(np.float32)
    ops.sum(y * dk.tensor(w)).backward()
    want = np.zeros_like(a)
    if viewable:
        want[:, 1:5] = w.reshape(4, 4)
    else:
        want = w.reshape(6, 4).T
    np.testing.assert_array_equal(x.grad.numpy(), want)
