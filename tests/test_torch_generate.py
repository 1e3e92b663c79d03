"""devicekit.torch: what generation needs, on ``dk:0`` with no fallback.

Per-op checks against torch CPU (integer bitwise ops at the int64 extremes,
sort/topk with ties and NaN, fmod/remainder with negative operands, roll,
scatter, index_put, boolean masks); a tiny random-weight GPT-2's greedy and
beam ``generate()`` give the CPU's tokens; sampling with top-k/top-p runs on
the device, is reproducible under ``torch.manual_seed``, and its draws pass
chi-square tests against the probabilities they sample from (fixed seeds, so
deterministic; each test also shows the bound rejects a wrong distribution).

Needs torch (and transformers for the generate tests); skipped with the reason otherwise.
"""

import pytest

torch = pytest.importorskip("torch", reason="devicekit.torch needs torch: pip install "
                                            "'devicekit[torch]'")
import devicekit.torch as dkt  # noqa: E402

D = "dk:0"
I64 = torch.iinfo(torch.int64)


@pytest.fixture(autouse=True)
def no_fallback(cpu):
    dkt.reset_fallback_stats()
    yield
    assert dkt.fallback_stats() == {}  # (the fallback is off: an unlowered op would raise)


def _same(got, want):
    """Equal values and dtype (NaN where the other has NaN)."""
    got = got.cpu()
    nan = want.isnan() if want.is_floating_point() else torch.zeros_like(want, dtype=torch.bool)
    assert got.dtype == want.dtype and got.shape == want.shape, f"dk {got}\ntorch cpu {want}"
    assert torch.equal(got.isnan() if got.is_floating_point() else nan, nan) and torch.equal(
        got[~nan], want[~nan]), f"dk {got}\ntorch cpu {want}"


def _chi2(counts, probs):
    """Pearson's statistic over the categories with probability > 0."""
    n = counts.sum()
    keep = probs > 0
    expected = probs[keep] * n
    return float(((counts[keep] - expected) ** 2 / expected).sum())


# ---- integer bitwise ops ------------------------------------------------------------------------

A64 = torch.tensor([0, 1, -1, I64.max, I64.min, 12345, -9876, 7, -(2**40) + 3, I64.min + 1])
B64 = torch.tensor([5, -1, I64.min, I64.max, -1, -12345, 3, I64.min, 2**33, I64.max])


@pytest.mark.parametrize("op", [torch.bitwise_and, torch.bitwise_or, torch.bitwise_xor],
                         ids=["and", "or", "xor"])
def test_bitwise_int64_extremes(op):
    _same(op(A64.to(D), B64.to(D)), op(A64, B64))
    _same(op(A64.to(D), -6), op(A64, -6))
    _same(~A64.to(D), ~A64)


@pytest.mark.parametrize("dtype", [torch.int8, torch.uint8, torch.int32])
def test_bitwise_and_shifts_narrow_ints(dtype):
    info = torch.iinfo(dtype)
    g = torch.Generator().manual_seed(0)
    x = torch.randint(info.min, info.max + 1, (64,), generator=g, dtype=torch.int64).to(dtype)
    y = torch.randint(info.min, info.max + 1, (64,), generator=g, dtype=torch.int64).to(dtype)
    x[:2] = torch.tensor([info.min, info.max], dtype=dtype)
    for op in (torch.bitwise_and, torch.bitwise_or, torch.bitwise_xor):
        _same(op(x.to(D), y.to(D)), op(x, y))
    _same(~x.to(D), ~x)
    for s in (1, 3, 7):  # left shifts wrap to the width; right shifts are arithmetic
        _same(x.to(D) << s, x << s)
        _same(x.to(D) >> s, x >> s)


def test_shifts_int64_and_bool_ops():
    for s in (0, 1, 33, 63):
        _same(A64.to(D) << s, A64 << s)
        _same(A64.to(D) >> s, A64 >> s)
    s = torch.tensor([0, 1, 63, 5, 62, 64, 3, 0, 70, 2])  # per element, the width and beyond too
    _same(A64.to(D) << s.to(D), A64 << s)
    _same(A64.to(D) >> s.to(D), A64 >> s)
    x8, s8 = torch.tensor([-128, -7, 7, 127, 1, -1], dtype=torch.int8), torch.tensor([1, 2, 3, 7, 8, 9],
                                                                                    dtype=torch.int8)
    _same(x8.to(D) << s8.to(D), x8 << s8)
    _same(x8.to(D) >> s8.to(D), x8 >> s8)
    m, n = torch.tensor([True, False, True, False]), torch.tensor([True, True, False, False])
    _same(m.to(D) & n.to(D), m & n)
    _same(m.to(D) ^ n.to(D), m ^ n)
    _same(~m.to(D), ~m)


# ---- sort / argsort / topk ----------------------------------------------------------------------

X = torch.tensor([[3., 1., 2., 1., float("nan"), -0.0, 0.0, 3., -5., float("inf"), 2.],
                  [1., 1., 1., 1., 1., 1., 1., 1., 1., 1., 1.],
                  [float("-inf"), 4., 4., float("nan"), -2., 9., 4., -2., 0.5, 1., 4.]])


@pytest.mark.parametrize("descending", [False, True], ids=["ascending", "descending"])
@pytest.mark.parametrize("dim", [-1, 0])
def test_sort_stable_ties_nan(descending, dim):
    v, i = torch.sort(X.to(D), dim=dim, descending=descending, stable=True)
    v0, i0 = torch.sort(X, dim=dim, descending=descending, stable=True)
    _same(i, i0)  # stable: equal values (-0.0 == 0.0 too) keep their order; NaN sorts largest
    _same(v, v0)
    _same(torch.argsort(X.to(D), dim=dim, descending=descending, stable=True), i0)


def test_sort_ints_and_topk_ties():
    g = torch.Generator().manual_seed(0)
    xi = torch.randint(-3, 3, (4, 37), generator=g)
    _same(torch.sort(xi.to(D), dim=1, stable=True)[1], torch.sort(xi, dim=1, stable=True)[1])
    _same(torch.sort(xi.to(D), dim=1, descending=True, stable=True)[0],
          torch.sort(xi, dim=1, descending=True, stable=True)[0])
    for largest in (True, False):
        for k in (4, 11):  # picked one by one; through the sort (k above its 10 stages)
            v, i = torch.topk(X.to(D), k, largest=largest)
            v0, _ = torch.topk(X, k, largest=largest)
            _same(v, v0)
            # torch leaves the order of ties open; dk's is the stable sort's (lower index first)
            _same(i, torch.sort(X, dim=-1, descending=largest, stable=True)[1][:, :k])
            _same(v, X.gather(1, i.cpu()))
    _same(torch.topk(xi.to(D), 3, dim=0)[0], torch.topk(xi, 3, dim=0)[0])


# ---- fmod / remainder / roll ------------------------------------------------------------------------

def test_fmod_remainder_int_div_negative_operands():
    a = torch.tensor([5., -5., 5., -5., 7.5, -0.5, 0.0, 1e6 + 0.25])
    b = torch.tensor([3., 3., -3., -3., 2., 0.3, 3., -7.])
    g = torch.Generator().manual_seed(0)
    ai = torch.cat([torch.tensor([7, -7, 7, -7, 0, 2**52, -(2**52) + 1]),
                    torch.randint(-10**15, 10**15, (100,), generator=g)])
    bi = torch.cat([torch.tensor([3, 3, -3, -3, 5, 3, -7]),
                    torch.randint(1, 10**6, (100,), generator=g) * (torch.arange(100) % 2 * 2 - 1)])
    for op in (torch.fmod, torch.remainder):
        torch.testing.assert_close(op(a.to(D), b.to(D)).cpu(), op(a, b), rtol=0, atol=1e-6)
        _same(op(ai.to(D), bi.to(D)), op(ai, bi))
        _same(op(ai.to(D), -5), op(ai, -5))
        x8 = torch.tensor([-128, -7, 7, 127, 0], dtype=torch.int8)
        _same(op(x8.to(D), 3), op(x8, 3))
    for mode in ("floor", "trunc"):  # integer division, exact beyond float32's 2**24 too
        _same(torch.div(ai.to(D), bi.to(D), rounding_mode=mode), torch.div(ai, bi, rounding_mode=mode))
        _same(torch.div(ai.to(D), -3, rounding_mode=mode), torch.div(ai, -3, rounding_mode=mode))


def test_roll():
    x = torch.arange(24.).reshape(2, 3, 4)
    _same(torch.roll(x.to(D), (1, -2), (0, 2)), torch.roll(x, (1, -2), (0, 2)))
    _same(torch.roll(x.to(D), 5), torch.roll(x, 5))
    _same(torch.roll(x.to(D), 7, 1), torch.roll(x, 7, 1))


# ---- scatter / index_put / boolean masks --------------------------------------------------------------

def test_scatter_with_a_repeated_index_writes_one_value_not_their_sum():
    """torch writes one of the values where an index repeats along dim (its
    CPU: the last); never their sum."""
    idx = torch.tensor([[1, 1, 3, 1], [0, 2, 2, 4]])
    src = torch.tensor([[1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0]])
    got = torch.zeros(2, 5).to(D).scatter(1, idx.to(D), src.to(D)).cpu()
    _same(got, torch.zeros(2, 5).scatter(1, idx, src))
    assert got[0, 1] == 4.0 and got[1, 2] == 7.0
    idx0 = torch.tensor([[2, 0, 1], [2, 1, 1]])  # along dim 0: rows 0 and 1 hit row 2 in column 0
    _same(torch.zeros(3, 3).to(D).scatter(0, idx0.to(D), src[:, :3].to(D)),
          torch.zeros(3, 3).scatter(0, idx0, src[:, :3]))


def test_scatter_and_index_put():
    idx = torch.tensor([[0, 3], [4, 1]])
    src = torch.tensor([[1., 2.], [3., 4.]])
    _same(torch.zeros(2, 5).to(D).scatter(1, idx.to(D), src.to(D)), torch.zeros(2, 5).scatter(1, idx, src))
    _same(torch.ones(2, 5).to(D).scatter(1, idx.to(D), -1.0), torch.ones(2, 5).scatter(1, idx, -1.0))
    for accumulate in (False, True):
        rows, cols = torch.tensor([0, 2, -1]), torch.tensor([1, 3, 0])
        want = torch.zeros(3, 4).index_put((rows, cols), torch.tensor([1., 2., 3.]), accumulate)
        got = torch.zeros(3, 4).to(D).index_put((rows.to(D), cols.to(D)), torch.tensor([1., 2., 3.]).to(D),
                                                accumulate)
        _same(got, want)
    rep = torch.tensor([0, 0, 2])
    # a repeated index without accumulate: one write lands (torch's CPU: the last), never a sum
    _same(torch.zeros(3, 4).to(D).index_put((rep.to(D),), torch.arange(12.).reshape(3, 4).to(D)),
          torch.zeros(3, 4).index_put((rep,), torch.arange(12.).reshape(3, 4)))
    y, yd = torch.zeros(5), torch.zeros(5).to(D)
    y[torch.tensor([1, 3, 1, 1])] = 5.0
    yd[torch.tensor([1, 3, 1, 1]).to(D)] = 5.0
    _same(yd, y)
    _same(torch.zeros(3, 4).to(D).index_put((rep.to(D),), torch.ones(3, 4).to(D), accumulate=True),
          torch.zeros(3, 4).index_put((rep,), torch.ones(3, 4), accumulate=True))


def test_index_backward_is_index_put():
    """The backward of ``x[arange, argmax]`` (pooling by position) is an accumulating index_put."""
    x = torch.randn(4, 6, generator=torch.Generator().manual_seed(0), requires_grad=True)
    xd = x.detach().to(D).requires_grad_()
    i = x.argmax(1)
    (x[torch.arange(4), i] * 2).sum().backward()
    (xd[torch.arange(4).to(D), i.to(D)] * 2).sum().backward()
    _same(xd.grad, x.grad)


def test_boolean_mask_read_and_assign():
    x = torch.randn(3, 4, 5, generator=torch.Generator().manual_seed(0))
    m, rows = x > 0.2, torch.tensor([True, False, True])
    _same(x.to(D)[m.to(D)], x[m])
    _same(x.to(D)[rows.to(D)], x[rows])
    _same(torch.nonzero(m.to(D)), torch.nonzero(m))
    y, yd = x.clone(), x.to(D)
    y[m] = -1.0
    yd[m.to(D)] = -1.0
    _same(yd, y)
    y[rows] = torch.full((2, 4, 5), 9.0)
    yd[rows.to(D)] = torch.full((2, 4, 5), 9.0).to(D)
    _same(yd, y)
    y[m] = torch.arange(float(m.sum()))  # one value per selected element, in order
    yd[m.to(D)] = torch.arange(float(m.sum())).to(D)
    _same(yd, y)
    _same(x.to(D).masked_fill(m.to(D), 0.5), x.masked_fill(m, 0.5))


# ---- multinomial: the device's Philox stream ------------------------------------------------------------

P = torch.tensor([0.05, 0.0, 0.3, 0.15, 0.2, 0.1, 0.15, 0.05])
# chi-square bound for 6 degrees of freedom (7 categories with p > 0) at p = 1e-4
BOUND = 27.9


def test_multinomial_reproducible_and_chi_square():
    torch.manual_seed(0)
    a = torch.multinomial(P.to(D), 4000, replacement=True).cpu()
    torch.manual_seed(0)
    b = torch.multinomial(P.to(D), 4000, replacement=True).cpu()
    assert torch.equal(a, b), "the same seed must give the same draws"
    assert not torch.equal(a, torch.multinomial(P.to(D), 4000, replacement=True).cpu())
    counts = torch.bincount(a, minlength=8).double()
    assert counts[1] == 0, "a zero-probability category was drawn"
    assert _chi2(counts, P.double()) < BOUND
    # the bound has power: the same draws fail against a neighbouring distribution
    assert _chi2(counts, torch.roll(P, 1).double()) > BOUND
    # unnormalised weights, several rows
    w = torch.stack([P * 7, torch.tensor([0., 0, 0, 1, 0, 0, 0, 0])])
    rows = torch.multinomial(w.to(D), 50, replacement=True).cpu()
    assert rows.shape == (2, 50) and (rows[1] == 3).all()


def test_multinomial_without_replacement():
    torch.manual_seed(1)
    draws = torch.multinomial(P.expand(3000, 8).contiguous().to(D), 3).cpu()
    assert draws.shape == (3000, 3)
    assert (draws != 1).all(), "a zero-probability category was drawn"
    assert ((draws[:, 0] != draws[:, 1]) & (draws[:, 1] != draws[:, 2])
            & (draws[:, 0] != draws[:, 2])).all(), "a category was drawn twice"
    counts = torch.bincount(draws[:, 0], minlength=8).double()  # the first draw follows P
    assert _chi2(counts, P.double()) < BOUND
    assert _chi2(counts, torch.roll(P, 1).double()) > BOUND


def test_multinomial_refuses_a_generator():
    with pytest.raises(Exception, match="Philox"):
        torch.multinomial(P.to(D), 2, generator=torch.Generator())


# ---- Hugging Face generate() ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def gpt2():
    pytest.importorskip("transformers", reason="the generate tests build a transformers GPT-2: "
                                               "pip install transformers")
    import transformers
    from devicekit.torch import hf_models
    transformers.logging.set_verbosity_error()
    model, batch = hf_models.build("gpt2", 3, dropout=False)
    with torch.no_grad():  # larger random weights: less repetitive tokens than a fresh init's
        for p in model.parameters():
            p.mul_(4)
    return model.eval(), batch["input_ids"][:, :4]


def _generate(model, ids, device, **kw):
    model = model.to(device)
    ids = ids.to(device)
    return model.generate(ids, attention_mask=torch.ones_like(ids), pad_token_id=0, **kw).cpu()


@pytest.mark.parametrize("beams", [1, 3], ids=["greedy", "beam"])
def test_generate_same_tokens_as_cpu(gpt2, beams):
    model, ids = gpt2
    want = _generate(model, ids, "cpu", max_new_tokens=8, num_beams=beams, do_sample=False)
    got = _generate(model, ids, D, max_new_tokens=8, num_beams=beams, do_sample=False)
    assert len(set(want[:, 4:].flatten().tolist())) > 3  # (not a degenerate repetition)
    _same(got, want)


def test_sampling_top_k_top_p_reproducible(gpt2):
    model, ids = gpt2
    kw = dict(max_new_tokens=8, do_sample=True, top_k=10, top_p=0.9)
    torch.manual_seed(5)
    a = _generate(model, ids, D, **kw)
    torch.manual_seed(5)
    b = _generate(model, ids, D, **kw)
    assert torch.equal(a, b) and a.shape == (2, 12)


def test_sampling_distribution_matches_warped_softmax(gpt2):
    """One sampled token for 3000 copies of a prompt: its frequencies against
    the top-k/top-p-filtered softmax of the CPU model's logits."""
    from transformers import TopKLogitsWarper, TopPLogitsWarper
    model, ids = gpt2
    prompt = ids[:1]
    with torch.no_grad():
        logits = model.cpu()(prompt).logits[:, -1].double()
    logits = TopPLogitsWarper(0.9)(prompt, TopKLogitsWarper(10)(prompt, logits))
    probs = torch.softmax(logits, -1)[0]
    kept = int((probs > 0).sum())
    assert 2 < kept <= 10
    torch.manual_seed(7)
    out = _generate(model, prompt.expand(3000, 4), D, max_new_tokens=1, do_sample=True, top_k=10,
                    top_p=0.9)
    counts = torch.bincount(out[:, -1], minlength=probs.numel()).double()
    assert counts[probs == 0].sum() == 0, "sampled a token top-k/top-p removed"
    bound = {3: 18.4, 4: 21.1, 5: 23.5, 6: 25.7, 7: 27.9, 8: 29.9, 9: 31.8, 10: 33.7}[kept]  # p=1e-4
    assert _chi2(counts, probs) < bound
    shuffled = probs.clone()
    shuffled[probs > 0] = probs[probs > 0].flip(0)
    assert _chi2(counts, shuffled) > bound


def test_conformance_accepts_another_tie_order_only():
    """The torch section's rule for sort/topk indices (torch leaves the order
    of equal values open): another order of ties passes, a wrong index fails."""
    from types import SimpleNamespace
    from devicekit.conformance_tests import _opinfo
    x = torch.tensor([[2., 1., 2., 0.], [5., 5., 5., 1.]])
    s = SimpleNamespace(input=x, args=(2, 1), kwargs={})
    want = (torch.tensor([[2., 2.], [5., 5.]]), torch.tensor([[0, 2], [0, 1]]))
    assert _opinfo.ties_ok("topk", (want[0], torch.tensor([[2, 0], [2, 1]])), want, s, torch)
    assert not _opinfo.ties_ok("topk", (want[0], torch.tensor([[0, 1], [0, 1]])), want, s, torch)
    assert not _opinfo.ties_ok("topk", (want[0], torch.tensor([[0, 0], [0, 1]])), want, s, torch)
    assert not _opinfo.ties_ok("add", want, want, s, torch)
    s = SimpleNamespace(input=x, args=(), kwargs={"dim": 1})
    assert _opinfo.ties_ok("argsort", torch.tensor([[3, 1, 2, 0], [3, 2, 0, 1]]),
                           torch.tensor([[3, 1, 0, 2], [3, 0, 1, 2]]), s, torch)
    assert not _opinfo.ties_ok("argsort", torch.tensor([[3, 1, 0, 0], [3, 2, 0, 1]]),
                               torch.tensor([[3, 1, 0, 2], [3, 0, 1, 2]]), s, torch)
