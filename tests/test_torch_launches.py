"""devicekit.torch: what a 16-bit ``linear``/``matmul`` and a small integer
``pow`` launch on the device.

Needs torch (skipped with the reason otherwise). Proves, from the SDK's own
launch counters (``devicekit.dispatch_stats``): a bfloat16 or float16
``nn.Linear`` forward and backward, and a 16-bit ``matmul``, launch the same
``matmul`` kernels as in float32, in the 16-bit dtype (the base op accumulates
wider, per the spec), with no cast kernel and no cast inserted by the SDK
around them; and the result matches torch's CPU op. A float32/float64 square
or cube (HF's tanh-GELU cubes its input) is products, no ``pow`` kernel, with
the bits of torch's CPU kernel (which computes them as products too).
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
