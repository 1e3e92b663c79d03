"""devicekit.torch: the ``dk`` torch device on the reference CPU plugin.

Needs torch (``pip install 'devicekit[torch]'``; skipped with the reason
otherwise). Proves: devices are numbered in ``devicekit.devices()`` order and
found by DeviceKit name; views share the base's DeviceKit storage and an
in-place op on a view is seen through the base (and through autograd);
copies, transfers, ``.item()``, ``print``, ``state_dict`` and ``torch.save``
work; random ops draw DeviceKit's Philox stream, seeded by
``torch.manual_seed``. Every value is checked against torch on the CPU.
"""

import io

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="devicekit.torch needs torch: pip install "
                                            "'devicekit[torch]'")
import devicekit  # noqa: E402
import devicekit.torch as dkt  # noqa: E402

DK = "dk:0"


def storage(t):
    return dkt.from_torch(t)._storage_id


def test_device_numbering_and_names(cpu):
    names = [d.name for d in devicekit.devices()]
    assert dkt.device("cpu:0") == torch.device("dk", names.index("cpu:0"))
    assert dkt.dk_device(torch.device("dk", names.index("cpu:0"))).name == "cpu:0"
    assert torch.dk.device_count() == len(names)
    with pytest.raises(devicekit.DeviceNotFoundError, match="no DeviceKit device named 'acme:1'"):
        dkt.device("acme:1")
    x = torch.arange(6.0).to(dkt.device("cpu:0"))
    assert x.device.type == "dk" and x.is_dk
    assert dkt.from_torch(x).device.name == "cpu:0"


def test_the_table_lowers_tensor_ops_of_this_torch():
    # Every overload the lowering modules name exists in this torch, and each
    # one that is not a factory takes a tensor (TorchScript's scalar-scalar
    # overloads such as eq.default would be lowered by mistake otherwise).
    from devicekit.torch import _table
    assert _table._ABSENT == []
    for op, low in _table.LOWERINGS.items():
        if low.kind != "factory":
            assert any("Tensor" in str(a.type) for a in op._schema.arguments), op
    assert dkt.lowered_ops()["aten.native_layer_norm.default"] == "composite"


def test_values_round_trip_every_dtype(cpu):
    for dtype in (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64,
                  torch.int32, torch.int8, torch.uint8, torch.bool):
        x = (torch.arange(-3, 9).reshape(3, 4) * 0.75).to(dtype)
        back = x.to(DK).cpu()
        assert back.dtype == dtype and torch.equal(back, x), dtype
    with pytest.raises(devicekit.DTypeError, match="complex64 has no DeviceKit dtype"):
        torch.zeros(2, dtype=torch.complex64).to(DK)


@pytest.mark.parametrize("make", [
    lambda a: a.view(4, 6), lambda a: a.t(), lambda a: a.transpose(0, 1), lambda a: a[1:3],
    lambda a: a[:, 2], lambda a: a.select(0, 1), lambda a: a[:, None].expand(6, 3, 4)[:, 0],
    lambda a: a.as_strided((2, 2), (5, 1), 1), lambda a: a.detach(), lambda a: a.unsqueeze(0),
    lambda a: a.reshape(24), lambda a: a.split(2)[1], lambda a: a.permute(1, 0)[::2],
], ids=["view", "t", "transpose", "slice", "select-col", "select", "expand", "as_strided",
        "detach", "unsqueeze", "reshape", "split", "strided-slice"])
def test_views_alias_and_in_place_writes_through(cpu, make):
    ref = torch.arange(24.0).reshape(6, 4)
    dev = ref.to(DK)
    vr, vd = make(ref), make(dev)
    assert storage(vd) == storage(dev)
    assert vd.shape == vr.shape and vd.stride() == vr.stride()
    assert vd.storage_offset() == vr.storage_offset()
    if vr.stride() and 0 in vr.stride():  # an expanded view cannot be written in place
        return
    vr.mul_(-2).add_(1)
    vd.mul_(-2).add_(1)
    assert torch.equal(dev.cpu(), ref)          # seen through the base
    assert torch.equal(make(dev).cpu(), make(ref))


def test_setitem_copy_and_fill_land_in_the_view(cpu):
    ref = torch.zeros(4, 5)
    dev = ref.to(DK)
    src = torch.arange(4.0)
    for t, s in ((ref, src), (dev, src.to(DK))):
        t[:, 1] = s                     # copy_ into a strided column
        t[2] = 7.0                      # fill_ of a row
        t.t()[3].copy_(src * 10)        # a CPU tensor copied into a device view
        t[1:3, 2:4].zero_()
    assert torch.equal(dev.cpu(), ref)
    idx = torch.tensor([3, 2, 1, 0])
    x = torch.arange(12.0).reshape(3, 4).to(DK)
    x.copy_(x[:, idx.to(DK)])           # index.Tensor (a gather), then written back
    assert torch.equal(x.cpu(), torch.arange(12.0).reshape(3, 4)[:, idx])


def test_core_copy_into_reads_an_aliasing_source_first(cpu):
    # The write-through primitive itself: a source sharing the destination's
    # storage (here its transpose) is read whole before anything is written.
    a = devicekit.tensor(np.arange(9.0, dtype=np.float32).reshape(3, 3))
    devicekit._core.copy_into(a, a.T)
    np.testing.assert_array_equal(a.numpy(), np.arange(9.0).reshape(3, 3).T)
    row = devicekit.tensor(np.arange(4.0, dtype=np.float32))
    devicekit._core.copy_into(a[:, :], row[:3])   # broadcast into every row
    np.testing.assert_array_equal(a.numpy(), np.tile(np.arange(3.0), (3, 1)))


def test_in_place_on_a_view_under_autograd(cpu):
    def run(device):
        w = torch.linspace(-1, 1, 12).reshape(3, 4).to(device).requires_grad_()
        y = w * 1.5
        y[1].mul_(3)                    # in place on a view of a non-leaf: CopySlices
        y.t()[0].add_(y[2, 0])
        (y * y).sum().backward()
        return y.detach().cpu(), w.grad.cpu()
    (yr, gr), (yd, gd) = run("cpu"), run(DK)
    torch.testing.assert_close(yd, yr)
    torch.testing.assert_close(gd, gr)


def test_integer_in_place_refuses_a_float_result(cpu):
    x = torch.arange(4).to(DK)
    with pytest.raises(RuntimeError, match="can't be cast to the desired output type"):
        x.add_(0.5)


def test_clamp_by_0d_bounds_of_the_same_kind_keeps_the_dtype(cpu):
    """torch's promotion: 0-d float32 bounds do not widen a float16 x (T5 in
    float16 clamps so); a 0-d float bound of an integer x does (refused here)."""
    x = torch.tensor([-70000.0, -3.0, 0.5, 65000.0]).half()
    t = torch.tensor(60000.0)
    for got, want in ((torch.clamp(x.to(DK), min=-t.to(DK), max=t.to(DK)), torch.clamp(x, -t, t)),
                      (torch.clamp_min(x.to(DK), -t.to(DK)), torch.clamp_min(x, -t)),
                      (torch.clamp_max(x.to(DK), t.to(DK)), torch.clamp_max(x, t))):
        assert got.dtype == want.dtype == torch.float16 and torch.equal(got.cpu(), want)
    b = torch.tensor(1.0, requires_grad=True)
    y = torch.clamp(torch.tensor([0.5, 2.0]).to(DK), max=b.to(DK))
    y.sum().backward()
    assert b.grad.item() == 1.0  # the bound's gradient flows through its cast


def test_item_print_and_transfers(cpu):
    x = torch.tensor([[1.5, -2.0], [3.0, 4.25]], device=DK)
    assert x.device == torch.device(DK)
    assert x.sum().item() == pytest.approx(6.75)
    assert (x > 2).sum().item() == 2
    text = repr(x.requires_grad_())
    assert text.startswith("tensor([[ 1.5000, -2.0000]") and "device='dk:0'" in text
    assert "requires_grad=True" in text
    assert "dtype=torch.float16" in repr(x.detach().half()) and "device='dk:0'" in repr(x.half())
    y = x.double() * 2
    assert y.dtype == torch.float64 and torch.equal(y.cpu(), torch.tensor([[3.0, -4], [6, 8.5]],
                                                                          dtype=torch.float64))


def test_state_dict_save_and_load(cpu, tmp_path):
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3))
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3))
    model.load_state_dict(ref.state_dict())
    model.to(DK)
    sd = model.state_dict()
    assert all(v.device.type == "dk" for v in sd.values())
    buf = io.BytesIO()
    torch.save(sd, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=True)
    assert all(v.device == torch.device(DK) for v in loaded.values())
    for k, v in ref.state_dict().items():
        assert torch.equal(loaded[k].cpu(), v), k
    other = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3)).to(DK)
    other.load_state_dict(loaded)
    x = torch.randn(2, 4)
    torch.testing.assert_close(other(x.to(DK)).cpu(), ref(x))
    path = tmp_path / "model.pt"
    torch.save(model, path)             # a whole module, its parameters on the device
    whole = torch.load(path, weights_only=False)
    assert isinstance(whole[0].weight, torch.nn.Parameter) and whole[0].weight.device.type == "dk"
    torch.testing.assert_close(whole(x.to(DK)).cpu(), ref(x))


def test_tied_parameters_stay_one_parameter(cpu):
    emb = torch.nn.Embedding(10, 4)
    head = torch.nn.Linear(4, 10, bias=False)
    head.weight = emb.weight
    model = torch.nn.ModuleDict({"emb": emb, "head": head}).to(DK)
    assert model["emb"].weight is model["head"].weight
    assert model["emb"].weight.device.type == "dk"


def test_random_ops_draw_devicekit_philox_seeded_by_manual_seed(cpu):
    torch.manual_seed(1234)
    a = torch.rand(10, device=DK)
    b = torch.rand(10, device=DK)
    torch.manual_seed(1234)
    assert torch.equal(torch.rand(10, device=DK).cpu(), a.cpu())
    assert not torch.equal(a.cpu(), b.cpu())    # the stream advances
    # exactly DeviceKit's Philox stream: seed 1234, counters from 0, then ceil(10/4) = 3
    want = devicekit.ops.rand([10], 1234, 0).numpy()
    np.testing.assert_array_equal(a.cpu().numpy(), want)
    np.testing.assert_array_equal(b.cpu().numpy(), devicekit.ops.rand([10], 1234, 3).numpy())
    torch.manual_seed(7)
    state = torch.dk.get_rng_state()
    n1 = torch.randn(1000, device=DK)
    torch.dk.set_rng_state(state)
    assert torch.equal(torch.randn(1000, device=DK).cpu(), n1.cpu())
    assert abs(n1.mean().item()) < 0.15 and abs(n1.std().item() - 1) < 0.1
    torch.manual_seed(3)
    drop = torch.nn.functional.dropout(torch.ones(2000, device=DK), 0.25)
    kept = (drop != 0).float().mean().item()
    assert 0.7 < kept < 0.8
    scaled = torch.where(drop == 0, 1 / 0.75, drop).cpu()
    torch.testing.assert_close(scaled, torch.full((2000,), 1 / 0.75))
    with pytest.raises(NotImplementedError, match="torch.Generator cannot drive a dk device"):
        torch.empty(3, device=DK).uniform_(generator=torch.Generator())


PREFER = r"""
import torch, devicekit.torch as dkt
first = dkt.prefer("cuda_sim:0")
assert first == torch.device("dk", 0), first
assert dkt.device("cpu:0") == torch.device("dk", 1)
x = torch.randn(4, 3, requires_grad=True)
y = (x.to(first) * 2).sum()
y.backward()  # torch's autograd engine serves dk:0 only: this is why prefer exists
assert torch.equal(x.grad, torch.full((4, 3), 2.0)), x.grad
print("ok")
"""


@pytest.mark.slow
def test_prefer_numbers_the_device_under_test_dk0_so_backward_runs(cuda_sim_library, run_python):
    """Two plugins: cpu:0 is discovered first, so cuda_sim:0 would be dk:1,
    where torch's autograd engine has no ready queue (its Python device guard
    reports one device). prefer() numbers it dk:0 before anything else does."""
    p = run_python(PREFER, plugin_path=[cuda_sim_library])
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stdout + p.stderr


def test_the_order_variable_puts_named_devices_first(cpu, run_python):
    code = ("import os, torch, devicekit.torch as dkt\n"
            "os.environ['DEVICEKIT_TORCH_DEVICES'] = 'nosuch:0, cpu:0'\n"
            "print(dkt.device('cpu:0'))")
    p = run_python(code)
    assert p.returncode == 0 and p.stdout.strip() == "dk:0", p.stdout + p.stderr


@pytest.mark.parametrize("make", [
    lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.01, nesterov=True,
                               foreach=True),
    lambda ps: torch.optim.AdamW(ps, lr=0.01, weight_decay=0.1, foreach=True),
    lambda ps: torch.optim.AdamW(ps, lr=0.01, amsgrad=True, foreach=True),
    lambda ps: torch.optim.RMSprop(ps, lr=0.01, foreach=True),
], ids=["sgd-nesterov", "adamw", "adamw-amsgrad", "rmsprop"])
def test_torch_optimizers_with_foreach_true_update_like_the_cpu(cpu, make):
    """``foreach=True`` makes torch.optim call the ``_foreach_*`` ops, each
    lowered per list element; ``_foreach_maximum_`` (amsgrad), whose element op
    has no in-place ATen form, runs ``maximum`` and copies into the element."""
    def run(device):
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(),
                                torch.nn.Linear(16, 3)).to(device)
        opt = make(list(m.parameters()))
        x = torch.randn(5, 8, generator=torch.Generator().manual_seed(1)).to(device)
        for _ in range(3):
            opt.zero_grad()
            m(x).square().sum().backward()
            opt.step()
        return [p.detach().cpu() for p in m.parameters()]
    for got, want in zip(run(DK), run("cpu")):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def _sgd(ps, foreach):
    return torch.optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.01, nesterov=True,
                           foreach=foreach)


def _adamw(ps, foreach):
    return torch.optim.AdamW(ps, lr=0.01, weight_decay=0.1, foreach=foreach)


def _train_run(make, foreach, steps=3):
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3)).to(DK)
    opt = make(m.parameters(), foreach)
    x = torch.randn(5, 8, generator=torch.Generator().manual_seed(1)).to(DK)
    for _ in range(steps):
        opt.zero_grad()
        m(x).square().sum().backward()
        opt.step()
    return [p.detach().cpu() for p in m.parameters()]


@pytest.mark.parametrize("make", [_sgd, _adamw], ids=["sgd-nesterov", "adamw"])
def test_a_foreach_optimizer_is_bitwise_its_per_parameter_loop(cpu, make):
    """torch's foreach SGD and AdamW make, element by element, the calls their
    per-parameter loops make (mul_, lerp_, addcmul_, addcdiv_, add_ with
    alpha ...); the bridge runs a ``_foreach_*`` list's in-place elements
    straight to the element op's kernel: the same kernels in the same order,
    so the same bits."""
    for got, want in zip(_train_run(make, True), _train_run(make, False)):
        assert torch.equal(got, want)


def test_a_coverage_run_counts_each_element_of_a_foreach_op(cpu):
    """In a coverage run a ``_foreach_add_`` list's elements are dispatched
    one by one (each counted as ``add_.Tensor``), not taken straight to the
    kernel; the values are the same either way."""
    ps = [torch.ones(3, device=DK) for _ in range(4)]
    gs = [torch.full((3,), 2.0, device=DK) for _ in range(4)]
    cov = dkt.coverage(lambda dev: torch._foreach_add_(ps, gs, alpha=0.5))
    rows = {r["op"]: r for r in cov.rows}
    assert cov.error is None
    assert rows["aten.add_.Tensor"]["calls"] == 4
    assert "aten._foreach_add_.List" in rows["aten.add_.Tensor"]["via"]
    torch._foreach_add_(ps, gs, alpha=0.5)  # the direct path
    assert all(torch.equal(p.cpu(), torch.full((3,), 3.0)) for p in ps)


def test_torch_optimizers_on_dk_take_the_foreach_path_by_default(cpu):
    """As on CUDA: ``foreach=None`` (the default) picks the foreach path for dk
    parameters (torch's ``_default_to_fused_or_foreach``, told that a DKTensor
    parameter is a tensor foreach kernels take)."""
    from torch.optim.optimizer import _default_to_fused_or_foreach
    ps = [torch.nn.Parameter(torch.ones(3, device=DK)) for _ in range(2)]
    assert _default_to_fused_or_foreach(ps, differentiable=False, use_fused=False) == (False, True)
    assert _default_to_fused_or_foreach([torch.nn.Parameter(torch.ones(3))], False, False)[1] is False
    m = torch.nn.Linear(4, 2).to(DK)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    m(torch.ones(1, 4, device=DK)).sum().backward()
    cov = dkt.coverage(lambda dev: opt.step())
    ops = {r["op"] for r in cov.rows}
    assert cov.error is None and "aten._foreach_add_.List" in ops, sorted(ops)
