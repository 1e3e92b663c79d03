"""devicekit.torch.graphs: eager torch code on ``dk`` captured into a device
graph and replayed with no Python per op (as ``torch.cuda.graph``).

Replays are bitwise equal to eager ``dk`` runs on the same inputs (an MLP
forward, in both graph modes; forward and backward; replays after the static
input was changed in place; ``make_graphed_callables``); host work inside a
capture (``.item()``, an op the CPU fallback would run, a random op in a
capture made with mode "native") is refused with an error naming the ATen op
and the capture is discarded; random ops in a recorded capture, or in the
default "auto" one (which then ends recorded; without them it stays native),
(dropout forward and backward, ``torch.rand``) replay as N eager runs from the
same seed, bitwise; the bridge's
caches (convolution's index tensors: refused without a warm-up; a scalar
constant first made inside the capture) work with the graph; and a greedy
decode loop of the hf-gpt2 test model with a ``transformers`` StaticCache,
one decode step captured and replayed, gives eager dk's and torch CPU's tokens.

Needs torch (skipped with the reason otherwise); the decode loop also needs
transformers.
"""

import copy
import gc

import pytest

torch = pytest.importorskip("torch", reason="devicekit.torch needs torch: pip install "
                                            "'devicekit[torch]'")
import devicekit  # noqa: E402
import devicekit.torch as dkt  # noqa: E402

DK = "dk:0"


@pytest.fixture(autouse=True)
def _no_fallback(torch_no_fallback):
    yield


def _mlp(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.GELU(), torch.nn.LayerNorm(32),
                               torch.nn.Linear(32, 4))


def _host(seed, *shape):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("mode", ["native", "recorded", "auto"])
def test_mlp_forward_replays_bitwise_equal_to_eager_with_changed_inputs(cpu, mode):
    m = _mlp().to(DK)
    x = _host(1, 3, 8).to(DK)                      # the static input
    g = dkt.DKGraph(mode)
    with torch.no_grad():
        m(x)                                       # warm-up
        with dkt.graph(g):
            y = m(x).softmax(-1)
        # auto, no random op: the plugin's native graph (the CPU plugin has the part)
        want_mode = "native" if mode == "auto" else mode
        assert g.captured and g.mode == want_mode and not g.auto_recorded and g.calls > 5
        for seed in (2, 3, 4):
            x.copy_(_host(seed, 3, 8))             # the input, changed in place
            g.replay()
            want = m(x).softmax(-1)                # eager dk on the same input
            assert torch.equal(y.cpu(), want.cpu()), seed
    assert not torch.equal(y.cpu(), m(_host(1, 3, 8).to(DK)).softmax(-1).detach().cpu())


@pytest.mark.parametrize("mode", ["native", "recorded"])
def test_forward_and_backward_captured(cpu, mode):
    m = _mlp().to(DK)
    x = _host(1, 4, 8).to(DK)
    m(x).pow(2).mean().backward()                  # warm-up
    m.zero_grad(set_to_none=True)                  # .grad made inside the capture: the graph's
    g = dkt.DKGraph(mode)
    with dkt.graph(g):
        loss = m(x).pow(2).mean()
        loss.backward()
    grads = [p.grad for p in m.parameters()]
    for seed in (5, 6):
        x.copy_(_host(seed, 4, 8))
        for p in grads:                            # backward accumulates: zero in place
            p.zero_()
        g.replay()
        got = (loss.detach().cpu().clone(), [p.cpu().clone() for p in grads])
        m.zero_grad(set_to_none=True)
        want_loss = m(x).pow(2).mean()
        want_loss.backward()
        assert torch.equal(got[0], want_loss.detach().cpu())
        for a, p in zip(got[1], m.parameters()):
            assert torch.equal(a, p.grad.cpu())
        for p, gr in zip(m.parameters(), grads):   # the graph's .grad tensors again
            p.grad = gr


class _HostInBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        return grad * 2 if grad.sum().item() > 0 else grad   # a host read in the backward


def test_host_read_inside_captured_backward_is_named(cpu):
    x = _host(1, 4).to(DK).requires_grad_()
    _HostInBackward.apply(x).sum().backward()                # eager: fine
    g = dkt.DKGraph()
    with pytest.raises(devicekit.InvalidArgumentError,
                       match=r"^devicekit.torch.graphs: aten._local_scalar_dense.default"):
        with dkt.graph(g):
            _HostInBackward.apply(x).sum().backward()
    assert not g.captured
    assert torch.equal((x * 2).detach().cpu(), _host(1, 4) * 2)  # no error left pending


def test_item_inside_capture_names_the_call_and_discards_it(cpu):
    x = _host(1, 4).to(DK)
    g = dkt.DKGraph()
    with pytest.raises(devicekit.InvalidArgumentError) as info:
        with dkt.graph(g):
            y = x * 2
            if y.sum().item() > 0:                 # a value-dependent branch
                y = y + 1
    msg = str(info.value)
    assert msg.startswith("devicekit.torch.graphs: aten._local_scalar_dense.default")
    assert "Tensor.item()" in msg and "dk:0 needs the host" in msg and "discarded" in msg
    assert not g.captured
    from devicekit.torch import _device
    assert _device._dispatch is dkt._dispatch_op         # the bridge's eager dispatch is back
    assert torch.equal((x * 2).cpu(), _host(1, 4) * 2)   # the device runs eagerly again
    with pytest.raises(devicekit.InvalidArgumentError, match=r"aten._to_copy.default .*cpu\(\)"):
        with dkt.graph(dkt.DKGraph()):
            (x + 1).cpu()
    with dkt.graph(g):                             # the graph can capture again
        y = x + 1
    g.replay()
    assert torch.equal(y.cpu(), _host(1, 4) + 1)


def test_cpu_fallback_op_inside_capture_is_refused(cpu):
    x = _host(1, 4, 5).to(DK)
    g = dkt.DKGraph()
    with dkt.fallback("cpu"):
        with pytest.raises(devicekit.InvalidArgumentError) as info:
            with dkt.graph(g):
                torch.cummax(x, 1)
        assert "aten.cummax.default" in str(info.value)
        assert "CPU fallback" in str(info.value) and "capturing a graph" in str(info.value)
        assert dkt.fallback_stats() == {}          # it did not run on the CPU
        assert not g.captured
        torch.cummax(x, 1)                         # outside a capture it falls back, counted
    assert dkt.fallback_stats()["aten.cummax.default"]["calls"] == 1
    dkt.reset_fallback_stats()


def test_random_op_in_a_native_capture_and_nested_capture_refused(cpu):
    x = _host(1, 8).to(DK)
    before = dkt._device.rng(dkt._device.dk_device(torch.device(DK))).offset
    with pytest.raises(devicekit.InvalidArgumentError,
                       match=r"native_dropout.default draws random numbers.*native graph.*"
                             r"mode='recorded'"):
        with dkt.graph(dkt.DKGraph("native")):
            torch.nn.functional.dropout(x, 0.5, training=True)
    # the discarded capture drew nothing from the device's Philox stream
    assert dkt._device.rng(dkt._device.dk_device(torch.device(DK))).offset == before
    g = dkt.DKGraph()
    with dkt.graph(g):
        with pytest.raises(devicekit.InvalidArgumentError, match="do not nest"):
            dkt.DKGraph().capture_begin(DK)
        y = x * 3
    g.replay()
    assert torch.equal(y.cpu(), _host(1, 8) * 3)


def test_bridge_caches_in_a_capture(cpu):
    x = _host(1, 2, 3, 7, 5).to(DK)                # (a geometry no other test caches)
    conv = torch.nn.Conv2d(3, 4, (3, 2), stride=(2, 1)).to(DK)
    g = dkt.DKGraph()
    with torch.no_grad():
        with pytest.raises(devicekit.InvalidArgumentError,
                           match=r"aten.convolution.default on dk:0 needs the host.*warm-up"):
            with dkt.graph(g):                     # convolution's index tensors: not cached yet
                conv(x)
        conv(x)                                    # the warm-up caches them
        with dkt.graph(g):
            y = conv(x) * 3.0517578125             # a scalar constant first made in the capture
        gc.collect()
        for seed in (2, 3):
            x.copy_(_host(seed, 2, 3, 7, 5))
            g.replay()
            assert torch.equal(y.cpu(), (conv(x) * 3.0517578125).cpu())


def test_make_graphed_callables_forward(cpu):
    m = _mlp().to(DK)
    f = dkt.make_graphed_callables(m, (_host(1, 2, 8).to(DK),))
    for seed in (7, 8):
        x = _host(seed, 2, 8).to(DK)
        with torch.no_grad():
            assert torch.equal(f(x).cpu(), m(x).cpu())
    with pytest.raises(devicekit.InvalidArgumentError, match="captured for"):
        f(_host(1, 3, 8).to(DK))


# ---- a decode loop -------------------------------------------------------------------

PROMPT, NEW = 4, 10


def _gpt2():
    pytest.importorskip("transformers", reason="the decode loop uses transformers' GPT-2")
    from devicekit.torch import hf_models
    model, batch = hf_models.build("gpt2", seed=0, dropout=False)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():  # larger weights than GPT-2's init, so greedy tokens vary
        for p in model.parameters():
            if p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
    return model.eval(), batch["input_ids"][:1, :PROMPT]


def greedy(model, prompt, device, replay=None):
    """NEW greedy tokens with a StaticCache: prefill, then one decode step
    (token id and cache position as dk tensors updated in place, argmax on
    the device, the token written into ``toks`` at the position), run eagerly
    or captured once (``replay``: the DKGraph mode) and replayed. Only the
    final tokens are read."""
    from transformers import StaticCache
    cache = StaticCache(config=model.config, max_cache_len=PROMPT + NEW)
    with torch.no_grad():
        out = model(input_ids=prompt.to(device), cache=cache,
                    cache_position=torch.arange(PROMPT, device=device), use_cache=True)
        tok = out.logits[:, -1:].argmax(-1)            # static input and output
        pos = torch.full((1,), PROMPT, device=device)  # static input: the cache position
        toks = torch.zeros(1, NEW, dtype=torch.long, device=device)
        toks[:, :1].copy_(tok)

        def step():
            logits = model(input_ids=tok, cache=cache, cache_position=pos, use_cache=True).logits
            tok.copy_(logits[:, -1:].argmax(-1))
            toks.index_copy_(1, pos - (PROMPT - 1), tok)
            pos.add_(1)

        step()                                         # eager (and the warm-up)
        if replay:
            g = dkt.DKGraph(replay)
            with dkt.graph(g, device):
                step()
            for _ in range(NEW - 2):
                g.replay()
        else:
            for _ in range(NEW - 2):
                step()
    return toks.cpu()


def test_gpt2_static_cache_decode_step_replayed(cpu):
    model, prompt = _gpt2()
    want = greedy(copy.deepcopy(model), prompt, "cpu")
    assert len(set(want[0].tolist())) > 3              # the tokens vary: the test can fail
    on_dk = copy.deepcopy(model).to(DK)
    assert torch.equal(greedy(on_dk, prompt, DK), want)
    for mode in ("native", "recorded"):
        assert torch.equal(greedy(on_dk, prompt, DK, replay=mode), want), mode


def _random_step(x, w):
    """A training-style step that draws: dropout forward and backward, a rand."""
    h = torch.nn.functional.dropout(x @ w, 0.3, training=True)
    loss = (h * h).sum() + torch.rand(5, device=DK).sum()
    loss.backward()
    return loss


@pytest.mark.parametrize("mode", ["recorded", "auto"])
def test_random_ops_in_a_recorded_capture_replay_as_eager_runs(cpu, mode):
    """N replays of a recorded capture with dropout and torch.rand give,
    bitwise, the N eager runs from the same torch.manual_seed (loss and
    gradient), and two replays differ: each draws fresh counters. The
    default mode ("auto") on the CPU plugin, which has native graphs, ends
    as DeviceKit's recording because the capture drew random numbers."""
    x = _host(1, 6, 8).to(DK)
    w0 = _host(2, 8, 8)

    def eager_runs(n):
        w = w0.clone().to(DK).requires_grad_()
        _random_step(x, w)  # the warm-up, drawing as the capture's warm-up does
        torch.manual_seed(7)
        out = []
        for _ in range(n):
            w.grad = None
            out.append((_random_step(x, w).cpu(), w.grad.cpu()))
        return out

    eager = eager_runs(4)
    w = w0.clone().to(DK).requires_grad_()
    _random_step(x, w)  # warm-up (makes w.grad, which the capture then overwrites)
    torch.manual_seed(7)
    g = dkt.DKGraph(mode=mode)
    w.grad = None
    with dkt.graph(g):
        assert g.mode == mode  # (auto: undecided while the capture is open)
        loss = _random_step(x, w)
    assert g.mode == "recorded" and g.device_graph.random_calls == 2  # dropout, rand
    assert g.auto_recorded == (mode == "auto")
    replays = []
    for _ in range(4):
        g.replay()
        replays.append((loss.cpu(), w.grad.cpu()))
    for (el, eg), (rl, rg) in zip(eager, replays):
        assert torch.equal(el, rl) and torch.equal(eg, rg)
    assert not torch.equal(replays[0][0], replays[1][0])
    assert not torch.equal(replays[0][1], replays[1][1])
    # a reseed after the capture: the next replay draws what eager draws from it
    torch.manual_seed(7)
    g.replay()
    assert torch.equal(loss.cpu(), eager[0][0])


def _mse_step(model, opt, x, y):
    """A training step of ``model`` on the static batch ``x``, ``y``: returns the loss."""
    def step():
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss

    return step


def _adamw_steps(capturable, capture, steps=5):
    """Losses of ``steps`` AdamW steps of the MLP on dk: eagerly, or two eager
    steps then one step captured and replayed."""
    model = _mlp().to(DK)
    x, y = _host(1, 16, 8).to(DK), _host(2, 16, 4).to(DK)
    opt = torch.optim.AdamW(model.parameters(), lr=0.01, capturable=capturable)
    step = _mse_step(model, opt, x, y)

    if not capture:
        return [step().item() for _ in range(steps)]
    losses = [step().item() for _ in range(2)]
    g = dkt.DKGraph()
    with dkt.graph(g):
        loss = step()
    for _ in range(steps - 2):
        g.replay()
        losses.append(loss.item())
    return losses


def test_a_captured_adamw_step_with_capturable_replays_as_eager_steps(cpu):
    # capturable=True keeps the step count on the device: its bias
    # corrections (_foreach_pow(beta, steps): a scalar base and a list of
    # exponents) advance with every replay
    got, want = _adamw_steps(True, True), _adamw_steps(True, False)
    assert got == want
    assert len(set(got)) == len(got)  # the loss moves: every replay is a step


def test_an_optimizer_keeping_its_step_on_the_host_is_refused_in_a_capture(cpu):
    # capturable=False: the bias corrections are host numbers, fixed at the
    # capture; every replay would repeat them, silently
    before = _adamw_steps(False, False)
    with pytest.raises(devicekit.InvalidArgumentError,
                       match=r"AdamW.step\(\) with capturable=False on dk:0.*capturable=True"):
        _adamw_steps(False, True)
    from devicekit.torch import graphs
    assert not graphs._active                              # the capture is discarded
    assert _adamw_steps(False, False) == before            # eager steps run as before


@pytest.mark.parametrize("make", [
    lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
    lambda ps: torch.optim.AdamW(ps, lr=0.01, capturable=True),
], ids=["sgd-momentum", "adamw"])
def test_an_optimizers_first_step_is_refused_in_a_capture(cpu, make):
    # the first step makes the state (momentum buffers, moments): a replay
    # would make it afresh every time and the optimizer never accumulate
    model = _mlp().to(DK)
    x, y = _host(1, 16, 8).to(DK), _host(2, 16, 4).to(DK)
    opt = make(model.parameters())
    step = _mse_step(model, opt, x, y)

    with torch.no_grad():
        model(x)  # warm-up of the forward only: the optimizer has not stepped
    with pytest.raises(devicekit.InvalidArgumentError,
                       match=r"step\(\) inside a capture made the optimizer's state \(.*\): a "
                             r"first step.*warm-up"):
        with dkt.graph(dkt.DKGraph()):
            step()
    assert len(opt.state) == 0  # the state the capture made is gone
    from devicekit.torch import graphs
    assert not graphs._active
    # eager steps from there are those of a fresh optimizer
    got = [step().item() for _ in range(3)]
    fresh = _mlp().to(DK)
    fresh_step = _mse_step(fresh, make(fresh.parameters()), x, y)
    assert got == [fresh_step().item() for _ in range(3)]
