"""devicekit.torch: what a 16-bit ``linear``/``matmul`` and a small integer
``pow`` launch on the device.

Needs torch (skipped with the reason otherwise). Proves, from the SDK's own
launch counters (``devicekit.dispatch_stats``): a bfloat16 or float16
``nn.Linear`` forward and backward, and a 16-bit ``matmul``, launch the same
``matmul`` kernels as in float32, in the 16-bit dtype (the base op accumulates
wider, per the spec), with no cast kernel and no cast inserted by the SDK
around them; and the result matches torch's CPU op. A float32/float64 square
or cube (HF's tanh-GELU cubes its input) is products, no ``pow`` kernel, with
the bits of torch's CPU kernel (which computes them as products too). The
in-place ops of torch's AdamW (``mul_``, ``lerp_``, ``addcmul_``,
``addcdiv_``, ``add_``) run their last kernel with ``self`` as its output
(the CPU plugin's add/sub/mul/div declare DK_KERNEL_CAP_INPLACE): no copy
launch, the values of the out-of-place op, seen through every view; where
the kernel cannot write ``self`` (a strided ``self``, an operand overlapping
it, another dtype) they fall back to one copy with the same values.
"""

import pytest

torch = pytest.importorskip("torch", reason="devicekit.torch needs torch: pip install "
                                            "'devicekit[torch]'")
import devicekit  # noqa: E402
import devicekit.torch as dkt  # noqa: E402


def _launches(fn):
    fn()  # (first call: nothing cached is counted)
    devicekit.reset_dispatch_stats()
    fn()
    return {k: v for k, v in devicekit.dispatch_stats().items()
            if v["kernel"] or v["cast_inserted"]}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_16bit_linear_is_one_16bit_gemm_per_product(cpu, dtype):
    dev = dkt.device("cpu:0")
    torch.manual_seed(0)
    ref = torch.nn.Linear(16, 8)
    x = torch.randn(4, 16)

    def step(d, dt):
        lin = torch.nn.Linear(16, 8).to(dt)
        lin.load_state_dict(ref.state_dict())
        lin = lin.to(d)
        xd = x.to(dt).to(d).requires_grad_()
        out = lin(xd)
        out.sum().backward()
        return out, lin.weight.grad, xd.grad

    wide = _launches(lambda: step(dev, torch.float32))
    half = _launches(lambda: step(dev, dtype))
    assert half["matmul"] == wide["matmul"] and half["matmul"]["kernel"] == 3  # y, dW, dX
    assert half["matmul"]["cast_inserted"] == 0
    assert "cast" not in half, f"a 16-bit linear launched casts: {half}"

    mine, ref_out = step(dev, dtype), step("cpu", dtype)
    for a, b in zip(mine, ref_out):
        assert a.dtype == dtype
        torch.testing.assert_close(a.cpu(), b, rtol=2e-2, atol=2e-2)


def test_16bit_matmul_launches_one_matmul(cpu):
    dev = dkt.device("cpu:0")
    a, b = torch.randn(2, 4, 16).bfloat16(), torch.randn(16, 8).bfloat16()
    da, db = a.to(dev), b.to(dev)
    seen = _launches(lambda: torch.matmul(da, db))
    assert seen["matmul"] == {"kernel": 1, "cast_inserted": 0}
    assert "cast" not in seen, f"a bfloat16 matmul launched casts: {seen}"
    out = torch.matmul(da, db)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.cpu(), torch.matmul(a, b), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_square_and_cube_are_products_bitwise_as_torch(cpu, dtype):
    dev = dkt.device("cpu:0")
    x = torch.randn(64, 33, generator=torch.Generator().manual_seed(3)).to(dtype) * 7
    dx = x.to(dev)
    for exponent, muls in ((2, 1), (3, 2), (3.0, 2)):
        seen = _launches(lambda e=exponent: dx ** e)
        assert "pow" not in seen and seen["mul"]["kernel"] == muls, (exponent, seen)
        assert torch.equal((dx ** exponent).cpu(), x ** exponent), exponent
    xg, dg = x.clone().requires_grad_(), dx.clone().requires_grad_()
    (xg ** 3.0).sum().backward()
    (dg ** 3.0).sum().backward()
    assert torch.equal(dg.grad.cpu(), xg.grad)
    # any other exponent, and a 16-bit cube, still run the pow kernel
    assert "pow" in _launches(lambda: dx ** 2.5)
    assert "pow" in _launches(lambda: dx.bfloat16() ** 3)


def _copies(fn):
    seen = _launches(fn)
    return seen.get("copy", {}).get("kernel", 0), seen


def test_adamw_in_place_ops_write_self_with_no_copy(cpu):
    dev = dkt.device("cpu:0")
    g = torch.Generator().manual_seed(5)
    p, u, v = (torch.randn(32, 17, generator=g) for _ in range(3))
    v = v.abs() + 0.5
    # name: (the in-place call, its out-of-place form, base-op launches expected)
    steps = {
        "mul_": (lambda p, u, v: p.mul_(0.99), lambda p, u, v: p.mul(0.99), {"mul": 1}),
        "mul_ tensor": (lambda p, u, v: p.mul_(v), lambda p, u, v: p.mul(v), {"mul": 1}),
        "add_ alpha": (lambda p, u, v: p.add_(u, alpha=-0.5),
                       lambda p, u, v: p.add(u, alpha=-0.5), {"mul": 1, "add": 1}),
        "sub_": (lambda p, u, v: p.sub_(u), lambda p, u, v: p.sub(u), {"sub": 1}),
        "div_": (lambda p, u, v: p.div_(v), lambda p, u, v: p.div(v), {"div": 1}),
        "lerp_": (lambda p, u, v: p.lerp_(u, 0.1), lambda p, u, v: p.lerp(u, 0.1),
                  {"sub": 1, "mul": 1, "add": 1}),
        "addcmul_": (lambda p, u, v: p.addcmul_(u, u, value=0.001),
                     lambda p, u, v: p.addcmul(u, u, value=0.001), {"mul": 2, "add": 1}),
        "addcdiv_": (lambda p, u, v: p.addcdiv_(u, v, value=-0.01),
                     lambda p, u, v: p.addcdiv(u, v, value=-0.01),
                     {"div": 1, "mul": 1, "add": 1}),
    }
    for name, (step, functional, want) in steps.items():
        host = p.clone()
        dp, du, dv = host.to(dev), u.to(dev), v.to(dev)
        expect = functional(functional(dp, du, dv), du, dv)  # _launches calls step twice
        view = dp.view(-1)  # shares dp's storage: must see the write
        copies, seen = _copies(lambda f=step, a=(dp, du, dv): f(*a))
        assert copies == 0, f"{name}: {copies} copy launches: {seen}"
        assert {k: v["kernel"] for k, v in seen.items()} == want, (name, seen)
        assert torch.equal(dp.cpu(), expect.cpu()), name  # the out-of-place op's bits
        assert torch.equal(view.cpu(), expect.cpu().view(-1)), name
        step(host, u, v), step(host, u, v)
        torch.testing.assert_close(dp.cpu(), host, msg=name)  # torch CPU's values


def test_in_place_on_a_size_one_dim_writes_self(cpu):
    """A [1, 5] self: the plugin sets a broadcast input's size-1 stride to 0,
    which must not read as a different view from the output (found by
    conformance's addcdiv gradient samples)."""
    dev = dkt.device("cpu:0")
    x, y = torch.randn(1, 5) + 3, torch.randn(1, 5).abs() + 1
    d = x.to(dev)
    dy = y.to(dev)
    copies, seen = _copies(lambda: d.div_(dy))
    assert copies == 0 and seen["div"]["kernel"] == 1, seen
    x.div_(y), x.div_(y)
    assert torch.equal(d.cpu(), x)


def test_in_place_falls_back_to_one_copy_where_the_kernel_cannot_write_self(cpu):
    dev = dkt.device("cpu:0")
    x = torch.randn(8, 6, generator=torch.Generator().manual_seed(7))
    cases = {
        "strided self": lambda t: t.t().mul_(2.0),            # self is not dense
        "other is self": lambda t: t.mul_(t),                 # input 1 aliases the output
        "other in self's storage": lambda t: t[:4].add_(t[4:]),  # (disjoint rows)
        "float64 other": lambda t: t.add_(torch.ones(6, dtype=torch.float64).to(t.device)),
    }
    for name, fn in cases.items():
        host, d = x.clone(), x.clone().to(dev)
        copies, seen = _copies(lambda f=fn, t=d: f(t))
        assert copies >= 1, f"{name}: expected the copy fallback, launched {seen}"
        fn(host), fn(host)
        torch.testing.assert_close(d.cpu(), host, rtol=0, atol=0, msg=name)


def test_integer_in_place_keeps_torchs_cast_check(cpu):
    d = torch.arange(6).to(dkt.device("cpu:0"))
    with pytest.raises(RuntimeError, match="can't be cast"):
        d.mul_(0.5)
    d.mul_(3)  # int * int: the derived path, exact
    assert d.cpu().tolist() == [0, 3, 6, 9, 12, 15]


def test_the_backward_of_slicing_is_a_fill_and_one_copy(cpu):
    # logits[:, :-1] in a language-model loss: its backward (slice_backward) and
    # select's were torch's decomposition, a gather through index tensors (arange,
    # floor_divide, a masked index, where): a dozen launches
    dev = dkt.device("cpu:0")
    torch.manual_seed(0)
    x = torch.randn(4, 6, 5)
    g = torch.randn(4, 5, 5)
    xd = x.to(dev).requires_grad_(True)

    def step():
        xd.grad = None
        (xd[:, :-1] * g.to(dev)).sum().backward()
        (xd[:, 2] * 3).sum().backward()
        return xd.grad
    launches = _launches(step)
    ref = x.clone().requires_grad_(True)
    (ref[:, :-1] * g).sum().backward()
    (ref[:, 2] * 3).sum().backward()
    assert torch.equal(step().cpu(), ref.grad)
    for op in ("gather", "where", "div", "iota", "logical_and"):
        assert op not in launches, launches
    for name, fn in (("slice_scatter", lambda a, b: torch.slice_scatter(a, b, 1, 1, None, 2)),
                     ("select_scatter", lambda a, b: torch.select_scatter(a, b[:, 0], 1, -1))):
        b = g[:, :3] if name == "slice_scatter" else g
        got = _launches(lambda fn=fn, b=b: fn(x.to(dev), b.to(dev)))
        assert set(got) <= {"copy", "h2d"}, (name, got)  # (h2d: the operands moved over)
        assert torch.equal(fn(x.to(dev), b.to(dev)).cpu(), fn(x, b)), name
