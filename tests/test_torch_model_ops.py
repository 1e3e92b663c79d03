"""devicekit.torch: the lowerings particular model families need
(``sdk/devicekit/torch/_lower_models.py``), against torch on the CPU, with no
fallback: a weight-normed convolution's output and gradients (Wav2Vec2 and
HuBERT's position convolution: ``_weight_norm_interface`` and its backward),
``histc`` (float and integer input, given and data bounds), ``_grouped_mm``
in its four forms with gradients, and a transformers Mixtral on its default
grouped-experts path (histc + _grouped_mm) trained one backward: same loss
and gradients. Needs torch (and transformers for the Mixtral test).
"""

import copy

import pytest

torch = pytest.importorskip("torch", reason="devicekit.torch needs torch: pip install "
                                            "'devicekit[torch]'")
import torch.nn as nn  # noqa: E402

import devicekit.torch  # noqa: E402, F401  (makes the dk device)
from devicekit.torch import _table  # noqa: E402

DK = "dk:0"
aten = torch.ops.aten


pytestmark = pytest.mark.usefixtures("torch_no_fallback")  # (conftest.py)


@pytest.fixture
def calls(monkeypatch):
    """{op name: calls} of the given lowerings while the test runs."""
    seen = {}

    def watch(*names):
        for name in names:  # "op" (its default overload) or "op.overload"
            pkt, _, over = name.partition(".")
            op = getattr(getattr(aten, pkt), over or "default")
            low = _table.LOWERINGS[op]

            def fn(*a, _fn=low.fn, _name=name, **k):
                seen[_name] = seen.get(_name, 0) + 1
                return _fn(*a, **k)
            monkeypatch.setitem(_table.LOWERINGS, op, _table.Lowering(fn, low.kind, low.raw))
        return seen
    return watch


TOL = dict(rtol=1e-4, atol=1e-5)  # float32: a few ulps of reordered sums


def close(got, want, what, tol=TOL):
    got = got.detach().cpu()
    assert got.shape == want.shape and got.dtype == want.dtype, (what, got.shape, want.shape)
    assert torch.allclose(got, want, **tol), f"{what}: max abs error {(got - want).abs().max()}"


@pytest.mark.parametrize("dim", [0, 2])
def test_weight_normed_conv_output_and_grads(calls, dim):
    seen = calls("_weight_norm_interface", "_weight_norm_interface_backward")
    torch.manual_seed(dim)
    base = nn.Conv1d(4, 6, 3, padding=1, groups=2)
    cpu = nn.utils.parametrizations.weight_norm(copy.deepcopy(base), dim=dim)
    dk = nn.utils.parametrizations.weight_norm(copy.deepcopy(base).to(DK), dim=dim)
    x = torch.randn(2, 4, 9)
    want = cpu(x)
    got = dk(x.to(DK))
    g = torch.randn_like(want)
    want.backward(g)
    got.backward(g.to(DK))
    close(got, want.detach(), "output")
    for (name, p), (_, q) in zip(cpu.named_parameters(), dk.named_parameters()):
        close(q.grad, p.grad, f"grad of {name}")
    assert seen == {"_weight_norm_interface": 1, "_weight_norm_interface_backward": 1}, seen


def test_weight_norm_of_bfloat16_keeps_float32_norms():
    v, g = torch.randn(3, 4, 5).bfloat16(), torch.randn(1, 1, 5).bfloat16()
    want = torch._weight_norm_interface(v, g, 2)
    got = torch._weight_norm_interface(v.to(DK), g.to(DK), 2)
    close(got[0], want[0], "w", dict(rtol=1e-2, atol=1e-2))
    close(got[1], want[1], "norms")


@pytest.mark.parametrize("kw", [dict(bins=5, min=-1, max=1), dict(bins=7), dict(bins=4, min=2,
                                                                             max=2)])
def test_histc_counts_as_torch(kw):
    x = torch.randn(500)
    x[:2] = torch.tensor([-1.0, 1.0])  # both ends counted
    assert torch.equal(torch.histc(x.to(DK), **kw).cpu(), torch.histc(x, **kw))
    x[2] = float("nan")
    if kw.get("min", 0) != kw.get("max", 0):  # NaN not counted
        assert torch.equal(torch.histc(x.to(DK), **kw).cpu(), torch.histc(x, **kw))
    else:  # NaN in the data's own range: refused, as torch does
        with pytest.raises(RuntimeError, match="is not finite"):
            torch.histc(x, **kw)
        with pytest.raises(Exception, match="DeviceKit's histc: range of .* is not finite"):
            torch.histc(x.to(DK), **kw)
    ids = torch.randint(0, 6, (40,), dtype=torch.int32)  # integers: as torch's CUDA kernel
    got = torch.histc(ids.to(DK), bins=4, min=0, max=3).cpu()
    want = torch.histc(ids.float(), bins=4, min=0, max=3).to(torch.int32)
    assert torch.equal(got, want), (got, want)


@pytest.mark.parametrize("shapes, offs", [(((7, 8), (3, 8, 4)), [2, 2, 7]),   # 2-D x 3-D
                                          (((3, 6, 8), (8, 12)), [4, 4, 12]),  # 3-D x 2-D
                                          (((6, 12), (12, 8)), [4, 4, 12]),    # 2-D x 2-D
                                          (((3, 6, 8), (3, 8, 4)), None)])     # 3-D x 3-D
def test_grouped_mm_forms_and_grads(calls, shapes, offs):
    seen = calls("_grouped_mm")
    torch.manual_seed(1)
    a, b = (torch.randn(*s, requires_grad=True) for s in shapes)
    o = None if offs is None else torch.tensor(offs, dtype=torch.int32)
    a2, b2 = (t.detach().to(DK).requires_grad_() for t in (a, b))
    want = torch._grouped_mm(a, b, offs=o)
    got = torch._grouped_mm(a2, b2, offs=None if o is None else o.to(DK))
    g = torch.randn_like(want)
    want.backward(g)
    got.backward(g.to(DK))
    close(got, want.detach(), "output")
    close(a2.grad, a.grad, "grad of a")
    close(b2.grad, b.grad, "grad of b")
    assert seen["_grouped_mm"] >= 2, seen  # the forward and at least one gradient


def test_mixtral_default_grouped_experts_path(calls):
    transformers = pytest.importorskip("transformers", reason="the Mixtral test builds a "
                                                             "transformers Mixtral")
    seen = calls("histc", "_grouped_mm")
    transformers.logging.set_verbosity_error()
    cfg = transformers.MixtralConfig(num_hidden_layers=1, hidden_size=32, intermediate_size=64,
                                     num_attention_heads=4, num_key_value_heads=2,
                                     num_local_experts=4, num_experts_per_tok=2, vocab_size=64,
                                     max_position_embeddings=32)
    torch.manual_seed(0)
    cpu = transformers.MixtralForCausalLM(cfg)
    dk = copy.deepcopy(cpu).to(DK)
    ids = torch.randint(0, 64, (2, 8))
    want = cpu(ids, labels=ids).loss
    got = dk(ids.to(DK), labels=ids.to(DK)).loss
    want.backward()
    got.backward()
    close(got, want.detach(), "loss")
    for (name, p), (_, q) in zip(cpu.named_parameters(), dk.named_parameters()):
        close(q.grad, p.grad, f"grad of {name}")
    assert seen.get("histc") and seen.get("_grouped_mm"), seen


CTC_CASES = {  # targets, input lengths, target lengths, zero_infinity
    "padded": (torch.tensor([[1, 2, 2, 5], [3, 1, 0, 0], [4, 4, 4, 1]]), [12, 10, 7], [4, 2, 3],
               False),
    "concatenated, repeats, an empty target": (torch.tensor([1, 1, 2, 3, 3]), [12, 5, 9],
                                               [3, 0, 2], False),
    "impossible alignment, zero_infinity": (torch.tensor([[1, 2, 3, 4], [2, 3, 4, 5], [1, 1, 1, 1]]),
                                            [3, 12, 12], [4, 4, 1], True),
    "lengths as tensors": (torch.tensor([[5, 4, 3, 2], [1, 2, 1, 2], [3, 3, 3, 3]]),
                           torch.tensor([12, 11, 6]), torch.tensor([4, 3, 1]), False),
}


@pytest.mark.parametrize("case", list(CTC_CASES))
def test_ctc_loss_and_its_gradient(calls, case):
    import torch.nn.functional as F
    targets, il, tl, zero_inf = CTC_CASES[case]
    # length tensors (dk or CPU) are read on the host and the int[] form runs, as torch
    # does for a plain tensor (_lower_models._ctc_loss_kernel); the .Tensor form is below
    seen = calls("_ctc_loss", "_ctc_loss_backward", "_ctc_loss.Tensor",
                 "_ctc_loss_backward.Tensor")
    torch.manual_seed(3)
    lp = torch.randn(12, 3, 6).log_softmax(2).detach().requires_grad_()
    lp2 = lp.detach().to(DK).requires_grad_()
    dev = lambda v: v.to(DK) if isinstance(v, torch.Tensor) else v  # noqa: E731
    for reduction in ("none", "mean"):
        want = F.ctc_loss(lp, targets, il, tl, reduction=reduction, zero_infinity=zero_inf)
        got = F.ctc_loss(lp2, targets.to(DK), dev(il), dev(tl), reduction=reduction,
                         zero_infinity=zero_inf)
        w = torch.rand_like(want) + 0.5
        (want * w).sum().backward()
        (got * w.to(DK)).sum().backward()
        close(got, want.detach(), f"{reduction} loss")
        close(lp2.grad, lp.grad, f"{reduction} gradient")
        assert torch.isfinite(lp.grad).all()
        lp.grad = lp2.grad = None
    assert seen == {"_ctc_loss": 2, "_ctc_loss_backward": 2}, seen
    if isinstance(il, torch.Tensor):  # the .Tensor forms, called directly with dk lengths
        want = aten._ctc_loss.Tensor(lp.detach(), targets, il, tl)
        got = aten._ctc_loss.Tensor(lp2.detach(), targets.to(DK), il.to(DK), tl.to(DK))
        close(got[0], want[0], ".Tensor loss")
        g = torch.rand_like(want[0]) + 0.5
        want_g = aten._ctc_loss_backward.Tensor(g, lp.detach(), targets, il, tl, *want, 0)
        got_g = aten._ctc_loss_backward.Tensor(g.to(DK), lp2.detach(), targets.to(DK), il.to(DK),
                                               tl.to(DK), *got, 0)
        close(got_g, want_g, ".Tensor gradient")
        assert seen["_ctc_loss.Tensor"] == 1 and seen["_ctc_loss_backward.Tensor"] == 1, seen


def test_ctc_loss_unbatched():
    import torch.nn.functional as F
    torch.manual_seed(4)
    lp = torch.randn(9, 5).log_softmax(1).detach().requires_grad_()
    lp2 = lp.detach().to(DK).requires_grad_()
    targets = torch.tensor([1, 3, 3, 2])
    want = F.ctc_loss(lp, targets, (9,), (4,))
    got = F.ctc_loss(lp2, targets.to(DK), (9,), (4,))
    want.backward()
    got.backward()
    close(got, want.detach(), "loss")
    close(lp2.grad, lp.grad, "gradient")
