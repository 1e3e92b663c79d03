"""The PyTorch-style front end: dim=/keepdim= aliases, cat/stack/split/chunk/
narrow/squeeze/unsqueeze/flatten/view/clone, clamp/masked_fill/tril/triu,
zeros_like/ones_like, argmin, Tensor.max/min returning (values, indices),
randn/randint on Philox, nn.Module/Parameter/ParameterDict and optim.AdamW.

Forward results against numpy, gradients against float64 central
differences (``gradcheck``), and the error paths. Needs: the reference CPU
plugin (cpu:0).
"""

import math

import numpy as np
import pytest

import devicekit as dk
import devicekit.nn.functional as F
from devicekit import nn, ops, optim
from devicekit.nn.module import owners
from devicekit.testing import oracle_nn as N
from devicekit.testing import philox
from devicekit.testing.gradcheck import gradcheck

RNG = np.random.default_rng(7)


def same(t, expected):
    got = t.numpy()
    expected = np.asarray(expected)
    assert got.shape == expected.shape and got.dtype == expected.dtype, (got.dtype, got.shape,
                                                                         expected.dtype, expected.shape)
    assert np.array_equal(got, expected, equal_nan=True), (got, expected)


def f64(*shape):
    return RNG.uniform(-2, 2, shape)


# ---- dim= / keepdim= ------------------------------------------------------------

def test_dim_and_keepdim_are_axis_and_keepdims(cpu):
    a = RNG.standard_normal((3, 4, 5)).astype(np.float32)
    x = dk.tensor(a)
    pairs = [(ops.sum(x, dim=1, keepdim=True), ops.sum(x, axis=1, keepdims=True)),
             (x.sum(dim=(0, 2)), x.sum((0, 2))), (ops.mean(x, dim=-1), ops.mean(x, -1)),
             (ops.max(x, dim=0), ops.max(x, axis=0)), (ops.amin(x, dim=2), ops.min(x, 2)),
             (ops.argmax(x, dim=1, keepdim=True), ops.argmax(x, 1, True)),
             (ops.argmin(x, dim=1), ops.argmin(x, axis=1)),
             (ops.cumsum(x, dim=2), ops.cumsum(x, 2)), (x.cumsum(dim=0), ops.cumsum(x, axis=0)),
             (F.softmax(x, dim=1), F.softmax(x, 1)), (F.log_softmax(x, dim=0), F.log_softmax(x, 0)),
             (F.logsumexp(x, dim=2, keepdim=True), F.logsumexp(x, 2, True)),
             (F.var(x, dim=1), F.var(x, 1)), (x.softmax(dim=-1), x.softmax(-1))]
    idx = dk.tensor(RNG.integers(0, 4, (3, 2, 5)))
    pairs.append((ops.gather(x, dim=1, index=idx), ops.gather(x, 1, idx)))
    for by_dim, by_axis in pairs:
        same(by_dim, by_axis.numpy())
    np.testing.assert_allclose(ops.sum(x, dim=1).numpy(), a.sum(1), rtol=1e-6)


@pytest.mark.parametrize("call", [
    lambda x: ops.sum(x, 0, dim=0), lambda x: x.sum(axis=1, dim=1),
    lambda x: ops.mean(x, keepdims=True, keepdim=True), lambda x: ops.argmax(x, 1, dim=1),
    lambda x: F.softmax(x, 0, dim=0), lambda x: ops.cumsum(x, 0, dim=0),
    lambda x: ops.cat([x, x], 0, axis=0), lambda x: x.max(1, axis=1)])
def test_both_spellings_is_a_duplicate_argument_error(cpu, call):
    x = dk.ones(2, 3)
    with pytest.raises(dk.DuplicateArgumentError, match=r"got both .* pass one") as e:
        call(x)
    assert isinstance(e.value, TypeError) and isinstance(e.value, dk.DeviceKitError)


# ---- Tensor.max / min ------------------------------------------------------

def test_max_and_min_methods_match_torch(cpu):
    a = np.array([[1.0, 5.0, 5.0, -2.0], [np.nan, 0.0, 3.0, np.nan], [-1.0, -1.0, -7.0, -7.0]],
                 np.float32)
    x = dk.tensor(a)
    r = x.max(1)
    assert isinstance(r, tuple) and r._fields == ("values", "indices")
    values, indices = r  # unpacks like torch.return_types.max
    same(values, np.max(a, 1))
    same(indices, np.array([1, 0, 0]))  # first maximum; first NaN wins (as numpy and torch)
    same(x.min(dim=1, keepdim=True).indices, np.array([[3], [0], [2]]))
    same(x.min(0).values, np.min(a, 0))
    same(x.max(), np.max(a))  # no dim: a 0-d tensor, not a tuple
    same(x.max(dk.tensor(np.zeros(4, np.float32))), np.maximum(a, 0))  # elementwise
    same(x.amax(1), np.max(a, 1))
    same(x.max(axis=1, keepdims=True).values, np.max(a, 1, keepdims=True))  # numpy's spelling too
    with pytest.raises(dk.InvalidArgumentError, match=r"x.amax\(\(0, 1\)\)"):
        x.max((0, 1))
    with pytest.raises(dk.IndexOutOfRangeError):
        x.max(2)


def test_max_with_dim_gives_the_gradient_to_the_first_index_only(cpu):
    # torch: max(dim)'s backward scatters to the returned index, never splits ties
    x = dk.tensor(np.array([[2.0, 2.0, 1.0], [0.0, 3.0, 3.0]]), requires_grad=True)
    x.max(1).values.sum().backward()
    same(x.grad, np.array([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]))
    gradcheck(lambda t: t.min(0).values, f64(4, 3))


@pytest.mark.parametrize("dtype", ["float32", "int64", "int32", "int8", "uint8", "bool"])
def test_argmin_against_numpy(cpu, dtype):
    if dtype == "bool":
        a = RNG.integers(0, 2, (5, 7)).astype(bool)
    elif dtype == "float32":
        a = RNG.standard_normal((5, 7)).astype(np.float32)
        a[1, 3] = np.nan
        a[2, :] = 1.0  # ties: the first
    else:
        info = np.iinfo(dtype)
        a = RNG.integers(info.min, info.max, (5, 7), endpoint=True).astype(dtype)
        a[0, 4], a[3, 2], a[3, 5] = info.min, info.max, info.min  # the extremes map exactly
    x = dk.tensor(a)
    for axis in (0, 1, -1):
        same(ops.argmin(x, axis), np.argmin(a, axis))
    same(ops.argmin(x), np.array(np.argmin(a)))
    same(x.argmin(dim=1, keepdim=True), np.argmin(a, 1)[:, None])


# ---- joining and splitting -------------------------------------------------

def test_cat_against_numpy(cpu):
    a, b, c = (RNG.standard_normal(s).astype(np.float32) for s in ((2, 3, 4), (2, 1, 4), (2, 0, 4)))
    b[0, 0, :2] = (-0.0, np.nan)
    for pieces, dim in (([a, b, c, a], 1), ([a, a], 0), ([a, a], -1), ([b], 1)):
        same(ops.cat([dk.tensor(p) for p in pieces], dim), np.concatenate(pieces, dim))
    got = ops.cat([dk.tensor(b), dk.tensor(b)], 1).numpy()
    assert np.signbit(got[0, 0, 0]) and np.signbit(got[0, 1, 0])  # -0.0 keeps its sign
    same(ops.cat([dk.tensor(a), dk.tensor(a)], dim=2), np.concatenate([a, a], 2))
    at = a.transpose(2, 0, 1)
    same(ops.cat([dk.tensor(a).permute(2, 0, 1), dk.tensor(at)], axis=1),
         np.concatenate([at, at], 1))  # a strided piece
    ints = np.arange(6, dtype=np.int32).reshape(2, 3)
    same(ops.cat([dk.tensor(ints), dk.tensor(ints[:, :1].astype(np.float32))], 1),
         np.concatenate([ints, ints[:, :1]], 1).astype(np.float32))  # promotes
    flags = np.array([[True, False]])
    same(ops.cat([dk.tensor(flags), dk.tensor(~flags)]), np.concatenate([flags, ~flags]))


def test_stack_split_chunk_narrow_against_numpy(cpu):
    a = RNG.standard_normal((5, 6)).astype(np.float32)
    x = dk.tensor(a)
    for dim in (0, 1, 2, -1):
        same(ops.stack([x, x * 2], dim), np.stack([a, a * 2], dim))
    parts = x.split(2, 1)
    assert [p.shape for p in parts] == [(5, 2)] * 3
    parts = ops.split(x, 2)
    for got, want in zip(parts, np.split(a, [2, 4])):
        same(got, want)
    for got, want in zip(x.split([1, 0, 5], dim=1), np.split(a, [1, 1], 1)):
        same(got, want)
    # torch.chunk: pieces of ceil(n / chunks), so 6 in 4 chunks is 2, 2, 2
    assert [p.shape[1] for p in x.chunk(4, dim=1)] == [2, 2, 2]
    assert [p.shape[0] for p in x.chunk(2)] == [3, 2]
    same(x.chunk(3, 1)[2], a[:, 4:])
    same(x.narrow(0, 1, 3), a[1:4])
    assert parts[1]._storage_id == x._storage_id  # views, not copies


def test_squeeze_unsqueeze_flatten_view_clone(cpu):
    a = RNG.standard_normal((2, 1, 3, 1)).astype(np.float32)
    x = dk.tensor(a)
    same(x.squeeze(), np.squeeze(a))
    same(x.squeeze(1), np.squeeze(a, 1))
    same(x.squeeze((1, 3)), np.squeeze(a, (1, 3)))
    same(x.squeeze(0), a)  # a named dim that is not size 1 stays, as torch
    for d in (0, 2, 4, -1, -5):
        same(x.unsqueeze(d), np.expand_dims(a, d))
    same(x.flatten(), a.reshape(-1))
    same(x.flatten(1), a.reshape(2, -1))
    same(ops.flatten(x, 1, 2), a.reshape(2, 3, 1))
    same(dk.tensor(np.float32(3)).flatten(), np.array([3], np.float32))
    same(x.view(3, -1), a.reshape(3, -1))
    assert x.view(6)._storage_id == x._storage_id and x.unsqueeze(0)._storage_id == x._storage_id
    xt = x.reshape(2, 3).T
    same(xt.squeeze(), a.reshape(2, 3).T)
    same(xt.unsqueeze(1), a.reshape(2, 3).T[:, None])  # views of a strided tensor
    with pytest.raises(dk.InvalidArgumentError, match=r"not contiguous.*reshape"):
        xt.view(6)
    with pytest.raises(dk.DTypeError, match="reinterpreting"):
        x.view("int32")
    c = x.clone()
    same(c, a)
    assert c._storage_id != x._storage_id
    same(dk.tensor(np.array([True, False])).clone(), np.array([True, False]))


@pytest.mark.parametrize("name, fn, shapes", [
    ("cat", lambda a, b: ops.cat([a, b, a], dim=1), [(2, 3), (2, 2)]),
    ("stack", lambda a, b: ops.stack([a, b], -1), [(2, 3), (2, 3)]),
    ("split", lambda a: ops.split(a, [1, 3], 1)[1] * ops.split(a, 2, 1)[0].sum(), [(3, 4)]),
    ("chunk", lambda a: a.chunk(3, 0)[1], [(5, 2)]),
    ("narrow", lambda a: a.transpose(0, 1).narrow(1, 1, 2), [(4, 3)]),
    ("squeeze", lambda a: a.squeeze(1), [(3, 1, 2)]),
    ("unsqueeze", lambda a: a.T.unsqueeze(1), [(3, 2)]),
    ("flatten", lambda a: a.flatten(0, 1), [(2, 3, 2)]),
    ("view", lambda a: a.view(2, 6), [(3, 4)]),
    ("clone", lambda a: a.clone() * a, [(2, 3)]),
    ("clamp", lambda a: a.clamp(-0.5, 0.7), [(4, 5)]),
    ("clamp_tensor_bounds", lambda a, lo: ops.clamp(a, min=lo), [(3, 4), (1, 4)]),
    ("masked_fill", lambda a: a.masked_fill(dk.tensor(np.array([True, False, True])), -1.0), [(2, 3)]),
    ("tril", lambda a: a.tril(), [(2, 3, 4)]),
    ("triu", lambda a: ops.triu(a, -1), [(4, 3)]),
])
def test_gradients(cpu, name, fn, shapes):
    gradcheck(fn, *(f64(*s) for s in shapes))


def test_shape_op_errors(cpu):
    x = dk.ones(2, 3)
    cases = [
        (lambda: ops.cat([x, dk.ones(3, 3)], 1), dk.InvalidArgumentError, r"tensor 1 has shape \[3, 3\]"),
        (lambda: ops.cat([x, dk.ones(2)]), dk.InvalidArgumentError, "all dims but dim 0"),
        (lambda: ops.cat([]), dk.InvalidArgumentError, "at least one tensor"),
        (lambda: ops.cat(x), dk.InvalidArgumentError, "list or tuple"),
        (lambda: ops.cat([x, 3]), dk.InvalidArgumentError, "item 1 is a int"),
        (lambda: ops.cat([x, x], 2), dk.IndexOutOfRangeError, "dimension 2 is out of range"),
        (lambda: ops.stack([x, dk.ones(3, 2)]), dk.InvalidArgumentError, "equal shapes"),
        (lambda: x.split([1, 1], 1), dk.InvalidArgumentError, r"sum to the size 3 of dim 1"),
        (lambda: x.split(0), dk.InvalidArgumentError, "must be positive"),
        (lambda: x.split(1, 5), dk.IndexOutOfRangeError, "out of range"),
        (lambda: x.chunk(0), dk.InvalidArgumentError, "positive int"),
        (lambda: x.narrow(1, 2, 2), dk.InvalidArgumentError, "do not fit dim 1 of size 3"),
        (lambda: x.unsqueeze(3), dk.IndexOutOfRangeError, "out of range"),
        (lambda: x.squeeze(2), dk.IndexOutOfRangeError, "out of range"),
        (lambda: x.flatten(1, 0), dk.InvalidArgumentError, "comes after"),
        (lambda: x.view(4, 2), dk.InvalidArgumentError, "has 8 elements"),
        (lambda: ops.clamp(x), dk.InvalidArgumentError, "min, max or both"),
        (lambda: x.masked_fill(dk.ones(3), 0.0), dk.DTypeError, "mask must be a bool"),
        (lambda: x.masked_fill(dk.tensor([True, False]), 0.0), dk.InvalidArgumentError,
         r"mask \[2\] does not broadcast to x \[2, 3\]"),
        (lambda: x.masked_fill(dk.tensor([[[True]]]), 0.0), dk.InvalidArgumentError, "does not broadcast"),
        (lambda: dk.ones(2, 3, dtype="int32").masked_fill(dk.tensor([True, False, True]), 0.5),
         dk.DTypeError, "float value"),
        (lambda: ops.tril(dk.ones(3)), dk.InvalidArgumentError, "at least 2 dims"),
        (lambda: ops.gather(x, index=dk.zeros(2, 3, dtype="int64")), dk.InvalidArgumentError,
         r"gather\(\) needs dim="),
        (lambda: F.logsumexp(x), dk.InvalidArgumentError, r"logsumexp: needs dim="),
    ]
    for call, kind, pattern in cases:
        with pytest.raises(kind, match=pattern):
            call()


# ---- elementwise composites ---------------------------------------------------

def test_clamp_masked_fill_tril_triu_like_against_numpy(cpu):
    a = RNG.standard_normal((3, 4, 5)).astype(np.float32)
    a[0, 0, 0] = np.nan
    x = dk.tensor(a)
    same(ops.clamp(x, -0.5, 0.5), np.clip(a, -0.5, 0.5))
    same(x.clamp(min=0.0), np.maximum(a, np.float32(0.0)))
    same(x.clip(max=0.25), np.minimum(a, np.float32(0.25)))
    same(ops.clamp(x, 1.0, -1.0), np.where(np.isnan(a), a, np.float32(-1.0)))  # min > max: max
    lo = RNG.standard_normal((1, 5)).astype(np.float32)
    same(ops.clamp(x, dk.tensor(lo)), np.where(a < lo, lo, a))
    ints = np.arange(-4, 8, dtype=np.int32).reshape(3, 4)
    same(dk.tensor(ints).clamp(-1, 3), np.clip(ints, -1, 3))
    mask = RNG.integers(0, 2, (4, 1)).astype(bool)
    same(x.masked_fill(dk.tensor(mask), -np.inf), np.where(mask, np.float32(-np.inf), a))
    same(dk.tensor(ints).masked_fill(dk.tensor(mask[:3]), 9), np.where(mask[:3], 9, ints))
    for k in (-2, -1, 0, 1, 3):
        same(ops.tril(x, k), np.tril(a, k))
        same(x.triu(diagonal=k), np.triu(a, k))
    same(ops.tril(dk.tensor(ints)), np.tril(ints))
    same(ops.triu(dk.ones(2, 2, dtype="bool")), np.triu(np.ones((2, 2), bool)))
    same(ops.zeros_like(x), np.zeros_like(a))
    same(ops.ones_like(dk.tensor(ints)), np.ones_like(ints))
    same(ops.ones_like(x, dtype="int64"), np.ones(a.shape, np.int64))
    assert ops.zeros_like(x, requires_grad=True).requires_grad


# ---- random -------------------------------------------------------------------

def test_randn_is_box_muller_of_the_rand_stream(cpu):
    shape, seed, offset = (3, 50), 1234, 7
    z = ops.randn(shape, seed, offset)
    u = philox.random_uniform((2, *shape), seed, offset, np.float32).astype(np.float64)
    want = np.sqrt(-2.0 * np.log1p(-u[0])) * np.cos(2.0 * math.pi * u[1])
    assert z.dtype == "float32" and z.shape == shape
    np.testing.assert_allclose(z.numpy(), want, rtol=2e-5, atol=2e-6)
    same(ops.randn(shape, seed, offset), z.numpy())  # deterministic
    assert not np.array_equal(ops.randn(shape, seed + 1, offset).numpy(), z.numpy())
    big = ops.randn(20000, 5, dtype="float64").numpy()
    assert big.dtype == np.float64 and abs(big.mean()) < 0.05 and abs(big.std() - 1) < 0.05
    assert ops.randn((4,), 1, dtype="bfloat16").dtype == "bfloat16"
    with pytest.raises(dk.DTypeError, match="floating point"):
        ops.randn(3, 1, dtype="int32")


def test_randint_against_the_float32_formula(cpu):
    shape, seed, low, high = (4, 300), 99, -3, 17
    r = ops.randint(low, high, shape, seed, offset=2)
    u = philox.random_uniform(shape, seed, 2, np.float32)
    want = low + np.minimum(np.floor(u * np.float32(high - low)), high - low - 1).astype(np.int64)
    same(r, want)
    assert set(np.unique(r.numpy())) == set(range(low, high))  # every value comes out
    same(ops.randint(0, 256, (9,), 3, dtype="uint8"),
         np.floor(philox.random_uniform((9,), 3, 0, np.float32) * np.float32(256)).astype(np.uint8))
    for call, kind in ((lambda: ops.randint(5, 5, 3, 1), dk.InvalidArgumentError),
                       (lambda: ops.randint(0, 2**25, 3, 1), dk.InvalidArgumentError),
                       (lambda: ops.randint(0, 300, 3, 1, dtype="uint8"), dk.InputOverflowError),
                       (lambda: ops.randint(0, 3, 3, 1, dtype="float32"), dk.DTypeError),
                       (lambda: ops.randint(0.5, 3, 3, 1), dk.InvalidArgumentError)):
        with pytest.raises(kind):
            call()


# ---- parameters and AdamW --------------------------------------------------

class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Parameter(dk.tensor(RNG.standard_normal((5, 3)).astype(np.float32)))
        self.inner = nn.ParameterDict({"block0.w": np.ones((3, 3), np.float32)})
        self.head = self.emb  # tied, as GPT-2's LM head
        self.scale = 2.0      # not a parameter

    def forward(self, ids):
        h = F.embedding(ids, self.emb) @ self.inner["block0.w"]
        return h @ self.head.T * self.scale


def test_module_registers_parameters_once(cpu):
    net = _Net()
    assert [n for n, _ in net.named_parameters()] == ["emb", "inner.block0.w"]
    assert len(net.parameters()) == 2 and all(p.requires_grad for p in net.parameters())
    out = net(dk.tensor([0, 4]))
    out.sum().backward()
    assert all(p.grad is not None for p in net.parameters())
    net.zero_grad()
    assert all(p.grad is None for p in net.parameters())
    tied = net.emb
    net.emb = nn.Parameter(dk.zeros(5, 3))  # re-assigned: the old one stays only as the head
    assert [(m is net, n) for m, n in owners(tied)] == [(True, "head")]
    assert [n for n, _ in net.named_parameters()] == ["emb", "head", "inner.block0.w"]
    with pytest.raises(dk.DTypeError):
        nn.Parameter(dk.tensor([1, 2]))


def test_adamw_matches_the_oracle_over_steps_and_updates_tied_owners(cpu):
    net = _Net()
    ids = dk.tensor([0, 4, 2])
    opt = optim.AdamW(net.parameters(), lr=1e-2, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1)
    ref = {n: p.numpy().astype(np.float64) for n, p in net.named_parameters()}
    m = {n: np.zeros_like(a) for n, a in ref.items()}
    v = {n: np.zeros_like(a) for n, a in ref.items()}
    for step in range(1, 4):
        opt.zero_grad()
        net(ids).sum().backward()
        grads = {n: p.grad.numpy().astype(np.float64) for n, p in net.named_parameters()}
        opt.step()
        for n in ref:
            ref[n], m[n], v[n] = N.adamw_step(ref[n], grads[n], m[n], v[n], step, lr=1e-2, beta1=0.8,
                                              beta2=0.99, eps=1e-6, weight_decay=0.1)
        for n, p in net.named_parameters():
            np.testing.assert_allclose(p.numpy(), ref[n], rtol=2e-5, atol=1e-6, err_msg=f"{n} step {step}")
            assert p.is_leaf and p.requires_grad and p.grad is not None  # grad kept until zero_grad
    assert net.head is net.emb and net.inner["block0.w"] is opt.params[1]
    assert opt.state[0]["step"] == 3 and opt.state[0]["m"].dtype == "float32"


def test_adamw_keeps_float32_state_for_half_parameters(cpu):
    params = nn.ParameterDict({"w": dk.tensor(np.linspace(-1, 1, 6, dtype=np.float32), dtype="bfloat16")})
    opt = optim.AdamW(params.parameters(), lr=0.1)
    (params["w"].to("float32") ** 2).sum().backward()
    opt.step()
    assert params["w"].dtype == "bfloat16" and opt.state[0]["v"].dtype == "float32"


def test_adamw_refuses_what_it_cannot_update(cpu):
    loose = dk.ones(3, requires_grad=True)
    with pytest.raises(dk.InvalidArgumentError, match="not held by a devicekit.nn.Module"):
        optim.AdamW([loose])
    with pytest.raises(dk.InvalidArgumentError, match="empty parameter list"):
        optim.AdamW([])
    with pytest.raises(dk.InvalidArgumentError, match="betas"):
        optim.AdamW(_Net().parameters(), betas=(0.9, 1.0))
