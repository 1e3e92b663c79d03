"""devicekit.torch: convolutional networks on ``dk`` with no fallback
(``sdk/devicekit/torch/_lower_cnn.py``). Per op, forward and backward against
torch on the CPU in float32: batch norm (train with its running statistics,
eval), group norm (also a gradient through its saved statistics), max/avg/
adaptive pooling, convolution (1-D, 2-D, 3-D, groups, depthwise, stride, padding,
dilation, transposed), 3-D max (with indices), avg and adaptive pooling. Then a small CNN and a 1-D conv model
trained 3 SGD steps on dk and on the CPU: losses, weights and running
statistics agree, then eval outputs. Needs torch (skipped otherwise).
"""

import copy

import pytest

torch = pytest.importorskip("torch", reason="devicekit.torch needs torch: pip install "
                                            "'devicekit[torch]'")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import devicekit.torch  # noqa: E402, F401  (makes the dk device)

DK = "dk:0"
aten = torch.ops.aten
TOL = dict(rtol=1e-4, atol=1e-5)  # float32: a few ulps of reordered sums


pytestmark = pytest.mark.usefixtures("torch_no_fallback")  # (conftest.py)


def close(got, want, what):
    got = got.detach().cpu()
    assert got.shape == want.shape, f"{what}: shape {list(got.shape)} != {list(want.shape)}"
    err = (got - want).abs().max().item() if want.numel() else 0.0
    assert torch.allclose(got, want, **TOL), f"{what}: max abs error {err:.3g}"


def check(fn, *shapes, seed=0):
    """fn on CPU tensors and on dk copies: outputs and input gradients agree."""
    torch.manual_seed(seed)
    xs = [torch.randn(*s, requires_grad=True) for s in shapes]
    ds = [x.detach().to(DK).requires_grad_(True) for x in xs]
    want, got = fn(*xs), fn(*ds)
    g = torch.randn_like(want)
    want.backward(g)
    got.backward(g.to(DK))
    close(got, want.detach(), "output")
    for i, (d, x) in enumerate(zip(ds, xs)):
        close(d.grad, x.grad, f"grad of input {i}")


@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize("shape", [(4, 3), (2, 3, 5), (2, 3, 4, 4)])
def test_batch_norm_updates_running_stats_as_torch(cpu, train, shape):
    bn = nn.BatchNorm1d(3) if len(shape) < 4 else nn.BatchNorm2d(3)
    bn.momentum = 0.3
    with torch.no_grad():
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-0.5, 0.5)
        bn.running_mean.uniform_(-1, 1)
        bn.running_var.uniform_(0.5, 2)
    dbn = copy.deepcopy(bn).to(DK)
    bn.train(train)
    dbn.train(train)
    check(lambda x: bn(x) if x.device.type == "cpu" else dbn(x), shape)
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        close(getattr(dbn, name), getattr(bn, name), name)
    for name in ("weight", "bias"):
        close(getattr(dbn, name).grad, getattr(bn, name).grad, f"grad of {name}")


@pytest.mark.parametrize("kw", [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1),
                                dict(kernel_size=3, stride=2, dilation=2, ceil_mode=True)])
def test_max_pool2d(cpu, kw):
    check(lambda x: F.max_pool2d(x, **kw), (2, 3, 9, 9))


def test_max_pool2d_indices_and_1d(cpu):
    torch.manual_seed(1)
    x = torch.randn(2, 3, 7, 7)
    out, idx = F.max_pool2d(x.to(DK), 3, 2, 1, return_indices=True)
    want, want_idx = F.max_pool2d(x, 3, 2, 1, return_indices=True)
    close(out, want, "output")
    assert torch.equal(idx.cpu(), want_idx)
    check(lambda x: F.max_pool1d(x, 3, 2), (2, 3, 10))


@pytest.mark.parametrize("kw", [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1),
                                dict(kernel_size=3, stride=2, padding=1, ceil_mode=True,
                                     count_include_pad=False),
                                dict(kernel_size=2, divisor_override=3)])
def test_avg_pool2d(cpu, kw):
    check(lambda x: F.avg_pool2d(x, **kw), (2, 3, 8, 8))


@pytest.mark.parametrize("size", [1, (3, 2), 5])
def test_adaptive_avg_pool2d(cpu, size):
    check(lambda x: F.adaptive_avg_pool2d(x, size), (2, 3, 7, 6))


@pytest.mark.parametrize("size", [1, (3, 2)])
def test_adaptive_max_pool2d(cpu, size):
    check(lambda x: F.adaptive_max_pool2d(x, size), (2, 3, 7, 6))


@pytest.mark.parametrize("groups, affine", [(2, True), (4, False)])
def test_group_norm(cpu, groups, affine):
    check(lambda x, *wb: F.group_norm(x, groups, *wb), (2, 4, 3, 5),
          *([(4,), (4,)] if affine else []))


def test_group_norm_gradient_through_its_statistics(cpu):
    # torch's own formula for this case calls unsqueeze_, which a dk tensor cannot take
    def fn(x, w, b):
        out, mean, rstd = aten.native_group_norm(x, w, b, 2, 4, 6, 2, 1e-5)
        return out.sum(-1) + (mean * 3 + rstd * 2).repeat_interleave(2, 1)
    check(fn, (2, 4, 6), (4,), (4,))


def test_avg_pool1d(cpu):
    check(lambda x: F.avg_pool1d(x, 3, 2, 1), (2, 3, 9))


@pytest.mark.parametrize("kw", [dict(), dict(stride=2, padding=1), dict(dilation=2, padding=2),
                                dict(groups=2, stride=(2, 1)), dict(groups=4, padding=1)])
def test_conv2d(cpu, kw):
    groups = kw.get("groups", 1)
    out = 8 if groups == 4 else 6  # depthwise: a channel multiplier of 2
    check(lambda x, w, b: F.conv2d(x, w, b, **kw), (2, 4, 7, 7), (out, 4 // groups, 3, 3), (out,))


@pytest.mark.parametrize("kw", [dict(), dict(stride=2, padding=1, dilation=2), dict(groups=4)])
def test_conv1d(cpu, kw):
    check(lambda x, w: F.conv1d(x, w, **kw), (2, 4, 11), (8, 4 // kw.get("groups", 1), 3))


@pytest.mark.parametrize("kw", [dict(), dict(stride=2, padding=1, output_padding=1),
                                dict(groups=2, dilation=2),
                                # output_padding leaves room for a window more than x has
                                dict(stride=(3, 2), padding=(1, 2), output_padding=(2, 3), groups=2,
                                     dilation=(4, 4))])
def test_conv_transpose2d(cpu, kw):
    check(lambda x, w, b: F.conv_transpose2d(x, w, b, **kw), (2, 4, 5, 5),
          (4, 6 // kw.get("groups", 1), 3, 3), (6,))


def test_conv_transpose1d(cpu):
    check(lambda x, w: F.conv_transpose1d(x, w, stride=2), (2, 4, 6), (4, 3, 3))


@pytest.mark.parametrize("kw, w", [(dict(), (3, 2, 2, 2, 2)),
                                   (dict(stride=(2, 1, 2), padding=1, dilation=(1, 2, 1)),
                                    (4, 2, 3, 3, 2)),
                                   (dict(groups=2, padding=(0, 1, 1)), (4, 1, 2, 3, 3))])
def test_conv3d(cpu, kw, w):
    check(lambda x, w, b: F.conv3d(x, w, b, **kw), (2, 2, 5, 6, 5), w, (w[0],))


def test_conv_transpose3d(cpu):
    check(lambda x, w: F.conv_transpose3d(x, w, stride=2, padding=1, output_padding=1, groups=2),
          (1, 4, 3, 3, 2), (4, 1, 3, 2, 3))


@pytest.mark.parametrize("kw", [dict(kernel_size=2), dict(kernel_size=(3, 2, 3), stride=2,
                                                          padding=1, dilation=(1, 2, 1),
                                                          ceil_mode=True)])
def test_max_pool3d_with_indices(cpu, kw):
    check(lambda x: F.max_pool3d(x, **kw), (2, 3, 7, 8, 7))
    x = torch.randn(3, 5, 6, 7)  # unbatched: the indices too
    want = F.max_pool3d(x, return_indices=True, **kw)
    got = F.max_pool3d(x.to(DK), return_indices=True, **kw)
    close(got[0], want[0], "output")
    assert torch.equal(got[1].cpu(), want[1]), "indices"


@pytest.mark.parametrize("kw", [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1),
                                dict(kernel_size=3, stride=2, padding=1, ceil_mode=True,
                                     count_include_pad=False),
                                dict(kernel_size=2, divisor_override=3)])
def test_avg_pool3d(cpu, kw):
    check(lambda x: F.avg_pool3d(x, **kw), (2, 3, 7, 6, 5))


@pytest.mark.parametrize("size", [1, (3, 2, 4)])
def test_adaptive_pool3d(cpu, size):
    check(lambda x: F.adaptive_avg_pool3d(x, size), (2, 3, 5, 7, 6))
    check(lambda x: F.adaptive_max_pool3d(x, size), (2, 3, 5, 7, 6))
    x = torch.randn(0, 3, 5, 7, 6)  # an empty batch
    close(F.adaptive_avg_pool3d(x.to(DK), size), F.adaptive_avg_pool3d(x, size), "empty batch")


def test_conv4d_is_a_devicekit_error(cpu):
    import devicekit
    x, w = torch.randn(1, 2, 3, 3, 3, 3).to(DK), torch.randn(3, 2, 2, 2, 2, 2).to(DK)
    with pytest.raises((devicekit.UnloweredOpError, RuntimeError),
                       match="DeviceKit lowers 1-D, 2-D and 3-D"):
        aten.convolution(x, w, None, [1] * 4, [0] * 4, [1] * 4, False, [0] * 4, 1)


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 8, 3, padding=1, groups=8), nn.BatchNorm2d(8), nn.AdaptiveAvgPool2d(1))
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        return self.head(self.body(x).flatten(1))


class Conv1dNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv1d(4, 8, 5, stride=2, padding=2), nn.BatchNorm1d(8), nn.GELU(),
            nn.Conv1d(8, 8, 3, padding=2, dilation=2, groups=2), nn.AvgPool1d(2))
        self.head = nn.Linear(8, 3)

    def forward(self, x):
        return self.head(self.body(x).mean(-1))


@pytest.mark.parametrize("make, shape", [(SmallCNN, (4, 3, 8, 8)), (Conv1dNet, (4, 4, 16))])
def test_cnn_trains_on_dk_as_on_cpu(cpu, make, shape):
    torch.manual_seed(0)
    ref = make()
    model = copy.deepcopy(ref).to(DK)
    xs = [torch.randn(*shape) for _ in range(3)]
    ys = [torch.randint(0, ref.head.out_features, (shape[0],)) for _ in range(3)]
    for m, dev in ((ref, "cpu"), (model, DK)):
        opt = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)
        m.losses = []
        for x, y in zip(xs, ys):
            opt.zero_grad()
            loss = F.cross_entropy(m(x.to(dev)), y.to(dev))
            loss.backward()
            opt.step()
            m.losses.append(loss.item())
    assert model.losses == pytest.approx(ref.losses, rel=1e-5, abs=1e-6)
    want = ref.state_dict()
    for name, t in model.state_dict().items():
        close(t, want[name], name)
    ref.eval()
    model.eval()
    test = torch.randn(*shape)
    with torch.no_grad():
        close(model(test.to(DK)), ref(test), "eval output")
