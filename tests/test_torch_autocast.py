"""devicekit.torch: ``torch.autocast("dk")`` and ``torch.amp.GradScaler("dk")``
on the reference CPU plugin.

Needs torch (skipped with the reason otherwise). Proves: under autocast
bfloat16/float16 each op's output dtype is the one torch's CUDA policy gives
(the table below is written from torch's lists in ATen/autocast_mode.h, not
from running dk); an unsupported dtype is a DeviceKit error; GradScaler's two
ops match torch's CPU kernels exactly; a tiny MLP trains under autocast bf16,
and under fp16 with GradScaler (an injected inf skips its step and backs the
scale off), matching the same computation on the CPU with explicit casts.
"""

import math

import pytest

torch = pytest.importorskip("torch", reason="devicekit.torch needs torch: pip install "
                                            "'devicekit[torch]'")
import torch.nn.functional as F  # noqa: E402

import devicekit  # noqa: E402
import devicekit.torch as dkt  # noqa: E402

LOW = "low"    # torch's AT_FORALL_LOWER_PRECISION_FP: runs in the autocast dtype
FP32 = "fp32"  # AT_FORALL_FP32 / AT_FORALL_FP32_SET_OPT_DTYPE: runs in float32

# (name, policy per torch's lists, fn(x [4, 8], w [3, 8]) on the autocast device)
CASES = [
    ("linear", LOW, lambda x, w: F.linear(x, w)),
    ("matmul", LOW, lambda x, w: x @ w.t()),
    ("mm", LOW, lambda x, w: torch.mm(x, w.t())),
    ("bmm", LOW, lambda x, w: torch.bmm(x[None], w.t()[None])),
    ("addmm", LOW, lambda x, w: torch.addmm(x[:, :3], x, w.t())),
    ("baddbmm", LOW, lambda x, w: torch.baddbmm(x[None, :, :3], x[None], w.t()[None])),
    ("scaled_dot_product_attention", LOW,
     lambda x, w: F.scaled_dot_product_attention(x[None, None], x[None, None], x[None, None])),
    ("softmax", FP32, lambda x, w: torch.softmax(F.linear(x, w), -1)),
    ("log_softmax", FP32, lambda x, w: torch.log_softmax(F.linear(x, w), -1)),
    ("layer_norm", FP32, lambda x, w: F.layer_norm(F.linear(x, w), (3,))),
    ("mse_loss", FP32, lambda x, w: F.mse_loss(F.linear(x, w), F.linear(x, w))),
    ("cross_entropy (log_softmax, nll_loss)", FP32,
     lambda x, w: F.cross_entropy(F.linear(x, w), torch.tensor([0, 1, 2, 0]).to(x.device))),
    ("exp", FP32, lambda x, w: torch.exp(F.linear(x, w))),
    ("pow.Tensor_Scalar", FP32, lambda x, w: F.linear(x, w) ** 2),
    ("sum", FP32, lambda x, w: F.linear(x, w).sum()),
    ("sum.dim_IntList", FP32, lambda x, w: F.linear(x, w).sum(-1)),
    # AT_FORALL_PROMOTE: the widest operand (float32 here)
    ("addcmul (promote)", FP32, lambda x, w: torch.addcmul(x[:, :3], F.linear(x, w), x[:, :3])),
]


@pytest.fixture
def dk(cpu):
    return dkt.device(cpu.name)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_output_dtypes_follow_torchs_cuda_policy(dk, dtype):
    x, w = torch.randn(4, 8).to(dk), torch.randn(3, 8).to(dk)
    got, want = {}, {}
    with torch.autocast("dk", dtype=dtype):
        for name, policy, fn in CASES:
            got[name] = fn(x, w).dtype
            want[name] = dtype if policy == LOW else torch.float32
        # ops on no list keep their operands' dtype (the fallthrough)
        got["relu"], want["relu"] = torch.relu(F.linear(x, w)).dtype, dtype
    assert got == want
    assert F.linear(x, w).dtype == torch.float32  # outside the region: nothing cast


def test_default_dtype_nesting_and_decorator(dk):
    x = torch.randn(4, 8).to(dk)
    with torch.autocast("dk"):  # torch's default for an out-of-tree device: float16
        assert F.linear(x, x).dtype == torch.float16
        with torch.autocast("dk", enabled=False):
            assert F.linear(x, x).dtype == torch.float32

    @torch.autocast("dk", dtype=torch.bfloat16)
    def f(a):
        return a @ a.t()

    assert f(x).dtype == torch.bfloat16 and not torch.is_autocast_enabled("dk")


def test_unsupported_dtype_is_a_devicekit_error(dk):
    with pytest.raises(devicekit.DTypeError, match=r"devicekit.torch: torch.autocast\('dk'\) runs "
                                                    r"in torch.bfloat16 or torch.float16.*float64"):
        with torch.autocast("dk", dtype=torch.float64):
            pass
    assert torch.dk.get_amp_supported_dtype() == [torch.bfloat16, torch.float16]


def test_binary_cross_entropy_is_refused_as_on_cuda(dk):
    p = torch.full((4,), 0.5).to(dk)
    with torch.autocast("dk", dtype=torch.bfloat16):
        with pytest.raises(RuntimeError, match="devicekit.torch: .*unsafe to autocast"):
            F.binary_cross_entropy(p, p)


def test_sdpa_under_autocast_runs_the_plugins_16_bit_fused_kernel(dk):
    q = torch.randn(1, 2, 4, 8).to(dk).requires_grad_()
    ops = ("scaled_dot_product_attention", "scaled_dot_product_attention_backward")
    before = {op: dict(devicekit.composite_stats().get(op, {}).get("fused", {})) for op in ops}
    with torch.autocast("dk", dtype=torch.bfloat16):
        out = F.scaled_dot_product_attention(q, q, q, is_causal=True)
    out.float().sum().backward()
    assert q.grad.dtype == torch.float32
    grew = set()
    for op in ops:
        after = devicekit.composite_stats()[op]["fused"]
        grew |= {k for k in after if after[k] > before[op].get(k, 0)}
    assert grew == {"cpu.sdpa_flash_bf16", "cpu.sdpa_backward_bf16"}


# ---- GradScaler's ops, against torch's CPU kernels ----------------------------------------

def _amp_ops(dev):
    grads = [torch.tensor([1.0, 2.0, -3.0]).half(), torch.tensor([[0.5, 4.0]]),
             torch.tensor([6.0, math.inf]).half(), torch.tensor([2.0, 8.0]).bfloat16()]
    grads = [g.clone().to(dev) for g in grads]
    out = []
    for gs in (grads[:2], grads[2:]):
        fi, inv = torch.zeros(1).to(dev), torch.full((1,), 0.25).to(dev)
        torch._amp_foreach_non_finite_check_and_unscale_(gs, fi, inv)
        out += [g.cpu() for g in gs] + [fi.cpu()]
    # found_inf is only ever set, never cleared
    fi = torch.ones(1).to(dev)
    torch._amp_foreach_non_finite_check_and_unscale_(grads[:1], fi, torch.ones(1).to(dev))
    out.append(fi.cpu())
    for scale, tracker, found, interval in [(1024.0, 0, 0.0, 3), (1024.0, 2, 0.0, 3),
                                            (1024.0, 2, 1.0, 3), (3e38, 1, 0.0, 2)]:
        s = torch.full((1,), scale).to(dev)
        t = torch.full((1,), tracker, dtype=torch.int32).to(dev)
        torch._amp_update_scale_(s, t, torch.full((1,), found).to(dev), 2.0, 0.5, interval)
        out += [s.cpu(), t.cpu()]
    return out


def test_gradscaler_ops_match_torch_cpu(dk):
    want, got = _amp_ops("cpu"), _amp_ops(dk)
    assert len(want) == len(got)
    for w, g in zip(want, got):
        assert g.dtype == w.dtype and torch.equal(g, w), (g, w)
    assert got[2].item() == 0.0 and got[5].item() == 1.0 and got[6].item() == 1.0  # can fail


# ---- training, against the CPU with explicit casts ---------------------------------------

class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.norm, self.fc2 = torch.nn.Linear(16, 32), torch.nn.LayerNorm(32), \
            torch.nn.Linear(32, 8)

    def forward(self, x, y):  # under autocast: the policy casts
        return F.cross_entropy(self.fc2(F.gelu(self.norm(self.fc1(x)))), y)

    def explicit(self, x, y, low):  # the same with torch's CUDA policy written out
        h = F.linear(x.to(low), self.fc1.weight.to(low), self.fc1.bias.to(low))
        h = F.layer_norm(h.float(), (32,), self.norm.weight, self.norm.bias)
        h = F.gelu(h)
        out = F.linear(h.to(low), self.fc2.weight.to(low), self.fc2.bias.to(low))
        return F.cross_entropy(out.float(), y)


def _data():
    g = torch.Generator().manual_seed(1)
    return torch.randn(8, 16, generator=g), torch.randint(0, 8, (8,), generator=g)


def _close(dk_model, cpu_model, tol):
    for (n, a), b in zip(dk_model.named_parameters(), cpu_model.parameters()):
        a = a.detach().cpu()
        assert torch.allclose(a, b.detach(), atol=tol, rtol=tol), (n, (a - b).abs().max())


def test_mlp_trains_under_autocast_bf16(dk):
    torch.manual_seed(0)
    ref = MLP()
    model = MLP().to(dk)
    model.load_state_dict(ref.state_dict())
    start = ref.fc1.weight.detach().clone()
    x, y = _data()
    xd, yd = x.to(dk), y.to(dk)
    opt, ref_opt = (torch.optim.SGD(m.parameters(), lr=0.5) for m in (model, ref))
    for _ in range(3):
        with torch.autocast("dk", dtype=torch.bfloat16):
            loss = model(xd, yd)
        assert loss.dtype == torch.float32
        ref_loss = ref.explicit(x, y, torch.bfloat16)
        # within one bfloat16 ulp at 1.0 (2**-7; measured: 2.2e-3)
        assert abs(loss.item() - ref_loss.item()) < 2 ** -7 * max(1.0, abs(ref_loss.item()))
        for o, lo in ((opt, loss), (ref_opt, ref_loss)):
            o.zero_grad()
            lo.backward()
            o.step()
    assert model.fc1.weight.grad.dtype == torch.float32  # master weights stay float32
    _close(model, ref, 2 ** -7)  # measured: 1.5e-3
    assert (model.fc1.weight.detach().cpu() - start).abs().max() > 1e-3  # it trained


def test_mlp_trains_under_autocast_fp16_with_gradscaler(dk):
    torch.manual_seed(0)
    ref = MLP()
    model = MLP().to(dk)
    model.load_state_dict(ref.state_dict())
    x, y = _data()
    xd, yd = x.to(dk), y.to(dk)
    opt, ref_opt = (torch.optim.SGD(m.parameters(), lr=0.5) for m in (model, ref))
    kw = dict(init_scale=2.0 ** 10, growth_factor=2.0, backoff_factor=0.5, growth_interval=2)
    scaler, ref_scaler = torch.amp.GradScaler("dk", **kw), torch.amp.GradScaler("cpu", **kw)
    scales = []
    for step in range(4):
        with torch.autocast("dk", dtype=torch.float16):
            loss = model(xd, yd)
        ref_loss = ref.explicit(x, y, torch.float16)
        # within two float16 ulps at 1.0 (measured: 2.7e-4)
        assert abs(loss.item() - ref_loss.item()) < 2 ** -9 * max(1.0, abs(ref_loss.item()))
        before = model.fc2.weight.detach().cpu().clone()
        for s, o, lo, m in ((scaler, opt, loss, model), (ref_scaler, ref_opt, ref_loss, ref)):
            o.zero_grad()
            s.scale(lo).backward()
            if step == 2:  # an overflowed gradient: this step must be skipped
                m.fc2.weight.grad.add_(math.inf)
            s.step(o)
            s.update()
        if step == 2:
            assert torch.equal(model.fc2.weight.detach().cpu(), before)
        scales.append((scaler.get_scale(), ref_scaler.get_scale()))
    # grows after growth_interval=2 good steps, backs off on the inf, as torch's
    assert scales == [(1024.0, 1024.0), (2048.0, 2048.0), (1024.0, 1024.0), (1024.0, 1024.0)]
    _close(model, ref, 2 ** -9)  # measured: 1.8e-4


class Block(torch.nn.Module):
    """A one-layer causal transformer: embedding, pre-norm attention (SDPA), MLP, head."""

    def __init__(self, vocab=16, d=16, heads=2):
        super().__init__()
        self.heads = heads
        self.emb = torch.nn.Embedding(vocab, d)
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.fc, self.head = torch.nn.Linear(d, d), torch.nn.Linear(d, vocab)

    def forward(self, ids, low=None):
        """Under autocast with ``low=None``; else torch's CUDA policy written out."""
        def lin(m, x):
            if low is None:
                return m(x)
            return F.linear(x.to(low), m.weight.to(low), m.bias.to(low))

        def ln(m, x):
            return m(x) if low is None else F.layer_norm(x.float(), m.weight.shape, m.weight, m.bias)

        b, t = ids.shape
        x = self.emb(ids)
        q, k, v = lin(self.qkv, ln(self.ln1, x)).split(x.shape[-1], -1)
        q, k, v = (z.reshape(b, t, self.heads, -1).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + lin(self.proj, a.transpose(1, 2).reshape(b, t, -1))
        x = x + lin(self.fc, F.gelu(ln(self.ln2, x)))
        logits = lin(self.head, x)
        return F.cross_entropy(logits.reshape(b * t, -1).float(), ids.reshape(-1))


def test_tiny_transformer_trains_under_autocast_bf16(dk):
    torch.manual_seed(0)
    ref = Block()
    model = Block().to(dk)
    model.load_state_dict(ref.state_dict())
    ids = torch.randint(0, 16, (2, 6), generator=torch.Generator().manual_seed(2))
    idd = ids.to(dk)
    opt, ref_opt = (torch.optim.SGD(m.parameters(), lr=0.5) for m in (model, ref))
    for _ in range(3):
        with torch.autocast("dk", dtype=torch.bfloat16):
            loss = model(idd)
        ref_loss = ref(ids, torch.bfloat16)
        assert abs(loss.item() - ref_loss.item()) < 2 ** -7 * max(1.0, abs(ref_loss.item()))
        for o, lo in ((opt, loss), (ref_opt, ref_loss)):
            o.zero_grad()
            lo.backward()
            o.step()
    _close(model, ref, 2 ** -7)
