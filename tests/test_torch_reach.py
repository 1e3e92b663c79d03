"""The torch section's hand-written cases (conformance_tests/_torch_reach.py:
non-default arguments, in-place ops through views, host scalars and 0-d CPU
tensors per dtype) run, pass on the reference plugin, and fail when a bug is
planted in a lowering (in-process, monkeypatched); and
``benchmarks/coverage_run.py --bridge`` measures devicekit/torch on a
one-case run."""

import json
import os
import subprocess
import sys

import pytest

from conftest import HUNG_S

torch = pytest.importorskip("torch", reason="the torch section needs torch")
try:
    from torch.testing._internal.common_methods_invocations import op_db  # noqa: F401
except Exception as e:  # noqa: BLE001
    pytest.skip(f"torch's OpInfo corpus cannot be imported: {e}", allow_module_level=True)
pytest.importorskip("coverage", reason="coverage_run.py --bridge needs coverage.py: "
                                       "pip install 'devicekit[coverage]'")

import devicekit.torch  # noqa: E402,F401  (registers the dk device)
from devicekit.conformance.case import Target, run_case  # noqa: E402
from devicekit.conformance_tests import _torch_reach, torch_opinfo  # noqa: E402
from devicekit.torch import _dispatch, _lower_models, _lower_ops, _table  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
aten = torch.ops.aten

#: One case of each family, forward and backward.
SOME = ("torch/args.mean/float32/samples", "torch/args.mean/float32/grad",
        "torch/args.clamp/float32/samples", "torch/inplace.add_/float32/samples",
        "torch/inplace.add_/float32/grad", "torch/scalar.add/int8/samples",
        "torch/scalar.mul/float16/samples")


@pytest.fixture(scope="module")
def by_id():
    import devicekit
    target = Target.of(devicekit.device("cpu:0"), level="full")
    return target, {c.id: c for c in torch_opinfo.cases(target)}


def _run(by_id, case_id):
    target, cases = by_id
    return run_case(cases[case_id], target)


def test_families_are_cases_of_the_torch_section(by_id):
    _, cases = by_id
    reach = [i for i in cases if i.split("/")[1].split(".")[0] in _torch_reach.FAMILIES]
    least = {"refuse": 6, "draws": 2}  # (one case per refused call form; per random op and dtype)
    for fam in _torch_reach.FAMILIES:
        assert sum(i.startswith(f"torch/{fam}.") for i in reach) >= least.get(fam, 10), fam
    # every bridge dtype has scalar cases; the grad kind exists for float32 entries
    for d in _torch_reach.BRIDGE_DTYPES:
        assert f"torch/scalar.add/{d}/samples" in cases, d
    assert "torch/args.cross_entropy/float32/grad" in cases
    assert set(SOME) <= set(cases)


def test_the_families_pass_on_cpu0_with_their_samples_counted(by_id):
    for case_id in SOME:
        r = _run(by_id, case_id)
        assert r["outcome"] == "pass", (case_id, r.get("message"))
        t = r["details"]["torch"]
        assert t["reach"] == case_id.split("/")[1] and t["outcomes"]["pass"] >= 4, (case_id, t)
        assert t["aten"], case_id  # the ATen ops it reached


def _replace(monkeypatch, op, fn):
    old = _table.LOWERINGS[op]
    monkeypatch.setitem(_table.LOWERINGS, op, _table.Lowering(fn(old.fn), old.kind, old.raw))
    monkeypatch.setattr(_dispatch, "_derived", {})  # in-place forms derived from the old one


def test_a_lowering_that_drops_keepdim_fails_args(by_id, monkeypatch):
    def drop_keepdim(fn):
        def bad(x, dim=None, keepdim=False, **kw):
            return fn(x, dim, False, **kw)
        return bad
    _replace(monkeypatch, aten.mean.dim, drop_keepdim)
    r = _run(by_id, "torch/args.mean/float32/samples")
    assert r["outcome"] == "fail" and "keepdim" in r["message"], r


def test_a_lowering_that_ignores_alpha_fails_args(by_id, monkeypatch):
    _replace(monkeypatch, aten.add.Tensor, lambda fn: lambda a, b, alpha=1: fn(a, b))
    r = _run(by_id, "torch/args.add_sub/float32/samples")
    assert r["outcome"] == "fail" and "alpha" in r["message"], r


def test_an_in_place_write_that_misses_the_base_fails_inplace(by_id, monkeypatch):
    """The planted write-through computes the value and writes it nowhere,
    on both paths an in-place op takes: the derived one (the functional
    lowering, then a copy) and the one that runs its last kernel into self
    (``bridge.binary_into``, float32 ``add_``'s). (The grad kind would not see
    it: torch's autograd formula for add_ does not read the forward's values.)"""
    def no_write(lowering, args, kwargs):
        lowering.fn(*_table.unwrap(args), **_table.unwrap_kwargs(kwargs))
        return args[0]
    monkeypatch.setitem(_table.DERIVERS, "in_place", no_write)
    monkeypatch.setattr(devicekit.bridge, "binary_into",
                        lambda op, dst, a, b: getattr(devicekit.ops, op)(a, b))
    monkeypatch.setattr(_dispatch, "_derived", {})
    r = _run(by_id, "torch/inplace.add_/float32/samples")
    assert r["outcome"] == "fail" and "through transpose" in r["message"], r


def test_a_promotion_bug_fails_scalar(by_id, monkeypatch):
    """A host int made a float before it reaches the lowering: int8 + 3 is float32."""
    orig = _dispatch.unwrap
    monkeypatch.setattr(_dispatch, "unwrap", lambda x: float(x) if type(x) is int else orig(x))
    r = _run(by_id, "torch/scalar.add/int8/samples")
    assert r["outcome"] == "fail" and "torch.float32 where torch gives" in r["message"], r


def test_a_0d_cpu_tensor_of_a_higher_category_gives_its_dtype():
    """int8 dk tensor + 0-d CPU float16 tensor is float16 (a Python float would give float32)."""
    x = torch.arange(-3, 3, dtype=torch.int8)
    for s in (torch.tensor(1.5, dtype=torch.float16), torch.tensor(2, dtype=torch.int32)):
        for want, got in ((x + s, x.to("dk") + s), (s * x.bool(), s * x.bool().to("dk"))):
            assert got.dtype == want.dtype and torch.equal(got.cpu(), want), (s, want, got)


def test_clamp_by_a_host_bound_promotes_and_index_put_takes_a_host_value(by_id):
    """clamp of an int32 tensor by a float (a Python float, a 0-d CPU tensor)
    is float32 as in torch, a bool tensor clamped by a 0-d int8 tensor is
    int8; ``x[i] = v`` with v a Python number or a 0-d CPU tensor writes x's
    dtype. Their cases pass in every bridge dtype."""
    xi = torch.arange(-3, 4, dtype=torch.int32)
    for want, got in ((torch.clamp(xi, min=1.5), torch.clamp(xi.to("dk"), min=1.5)),
                      (torch.clamp(xi, max=torch.tensor(2.5)),
                       torch.clamp(xi.to("dk"), max=torch.tensor(2.5))),
                      (torch.clamp(xi.bool(), min=torch.tensor(2, dtype=torch.int8)),
                       torch.clamp(xi.bool().to("dk"), min=torch.tensor(2, dtype=torch.int8)))):
        assert got.dtype == want.dtype and torch.equal(got.cpu(), want), (want, got)
    x, i = torch.zeros(5), torch.tensor([1, 3])
    for v in (torch.tensor(2.5), 4.0, True):
        want, got = x.clone(), x.to("dk")
        want[i] = v
        got[i.to("dk")] = v
        assert torch.equal(got.cpu(), want), (v, want, got)
    for d in ("int32", "bool", "float16"):
        for case_id in (f"torch/scalar.clamp/{d}/samples", f"torch/scalar.index_put/{d}/samples"):
            r = _run(by_id, case_id)
            assert r["outcome"] == "pass", (case_id, r.get("message"))


def test_a_clamp_that_keeps_the_dtype_fails_scalar_clamp(by_id, monkeypatch):
    """The lowering before it promoted: an integer tensor clamped by a float bound raised."""
    monkeypatch.setattr(_lower_ops, "_clamp_dtype", lambda x, lo, hi: None)
    r = _run(by_id, "torch/scalar.clamp/int32/samples")
    assert r["outcome"] == "error" and "would change int32 to float32" in r["message"], r


def test_cpu_index_tensors_of_a_dk_tensor_are_taken_as_torch_takes_them(by_id, monkeypatch):
    """x[i] and x[i] = v with i on the CPU work as on torch's accelerators (the
    index copied to the device); a CPU tensor anywhere else is still refused."""
    x, i = torch.arange(20.).reshape(4, 5), torch.tensor([3, 1])
    d = x.to("dk")
    assert torch.equal(d[i].cpu(), x[i])
    d[i] = 7.0
    x[i] = 7.0
    assert torch.equal(d.cpu(), x)
    with pytest.raises(RuntimeError, match="expected all tensors on the same device"):
        torch.cat([d, x])
    assert _run(by_id, "torch/scalar.host_index/float32/samples")["outcome"] == "pass"
    monkeypatch.setattr(_dispatch, "_host_index_ops", lambda: frozenset())  # as before: refused
    r = _run(by_id, "torch/scalar.host_index/float32/samples")
    assert r["outcome"] == "error" and "expected all tensors on the same device" in r["message"], r


def test_refusals_raise_the_documented_error_and_write_nothing(by_id):
    """Every refuse.* case passes on cpu:0: each refused call raises its
    documented class naming the op and the reason, operands unchanged; torch on
    the CPU computes most of them (recorded), so they have no oracle."""
    _, cases = by_id
    ids = sorted(i for i in cases if i.startswith("torch/refuse."))
    assert len(ids) >= 6 and all(i.endswith("/float32/raises") for i in ids), ids
    computes = 0
    for case_id in ids:
        r = _run(by_id, case_id)
        assert r["outcome"] == "pass", (case_id, r.get("message"))
        rows = r["details"]["torch"]["refusals"]
        assert rows and all(row["ok"] and row["raised"] for row in rows), (case_id, rows)
        computes += sum(row["torch_cpu"] == "computes" for row in rows)
    assert computes >= 10


def test_a_refusal_of_another_class_fails_refuse(by_id, monkeypatch):
    """x.to("meta") refused with a bare RuntimeError (the lowering before this
    round) is not the documented UnloweredOpError."""
    def old(fn):
        def bad(t, **kw):
            if kw.get("device") is not None and torch.device(kw["device"]).type == "meta":
                raise RuntimeError("_to_copy from dk:0 to meta: devicekit.torch moves data "
                                   "between dk devices and the CPU only")
            return fn(t, **kw)
        return bad
    _replace(monkeypatch, aten._to_copy.default, old)
    r = _run(by_id, "torch/refuse.to_other_device/float32/raises")
    assert r["outcome"] == "fail" and "raised RuntimeError, not UnloweredOpError" in r["message"], r


def test_a_refusal_that_writes_first_fails_refuse(by_id, monkeypatch):
    """mul(out=) that zeroes out before it refuses a shape: refused, but written."""
    def writes(fn):
        def bad(a, b, *, out):
            out.zero_()
            return fn(a, b, out=out)
        return bad
    _replace(monkeypatch, aten.mul.out, writes)
    r = _run(by_id, "torch/refuse.mul_out/float32/raises")
    assert r["outcome"] == "fail" and "operands [2] were written" in r["message"], r


def test_a_bridge_that_runs_decreasing_offs_fails_refuse(by_id, monkeypatch):
    """_grouped_mm without the offs check computes something for decreasing
    offs (torch's CPU does too: unspecified); the documented refusal is gone."""
    def lenient(offs, groups):
        ends = [int(e) for e in devicekit.torch._device.to_host(offs).tolist()]
        return list(zip([0] + ends[:-1], ends))
    monkeypatch.setattr(_lower_models, "_ends", lenient)
    r = _run(by_id, "torch/refuse.grouped_mm/float32/raises")
    assert r["outcome"] == "fail" and "decreasing offs: no error" in r["message"], r


def test_draws_judge_random_without_torchs_generator(by_id, monkeypatch):
    """draws.random_ passes on cpu:0 (range, every value, same bits from the
    same seed), and fails a random_.from lowering that ignores ``from``, and
    one that does not advance the device's stream (the same bits from any seed)."""
    for d in ("float32", "int64"):
        r = _run(by_id, f"torch/draws.random_/{d}/draws")
        assert r["outcome"] == "pass" and len(r["details"]["torch"]["draws"]) == 3, r
    with monkeypatch.context() as m:
        _replace(m, getattr(aten.random_, "from"),
                 lambda fn: lambda x, lo, hi=None, **kw: fn(x, 0, hi, **kw))
        r = _run(by_id, "torch/draws.random_/float32/draws")
        assert r["outcome"] == "fail" and "outside the integers of [3, 13)" in r["message"], r
    monkeypatch.setattr(devicekit.torch._device._Rng, "take", lambda self, n: (1, 0))
    r = _run(by_id, "torch/draws.random_/int64/draws")
    assert r["outcome"] == "fail" and "the same result from another seed" in r["message"], r


def test_a_host_operand_error_names_the_op_and_the_device():
    d = torch.ones(2, 3).to("dk")
    with pytest.raises(devicekit.torch.HostOperandError,
                       match=r"aten::add\.Tensor on dk:0 \(DeviceKit .*\): expected all tensors "
                             r"on the same device, got a cpu tensor of shape \[2, 3\]"):
        d + torch.ones(2, 3)


def test_fallback_cpu_runs_a_copy_to_meta():
    """x.to("meta") is "not covered" (UnloweredOpError); with fallback("cpu")
    on it runs on the CPU, its meta result left on meta (not copied to dk)."""
    with devicekit.torch.fallback("cpu"):
        y = torch.ones(2, 3).to("dk").to("meta", torch.float16)
    assert y.device.type == "meta" and y.shape == (2, 3) and y.dtype == torch.float16


def test_ctc_loss_takes_length_tensors_on_the_cpu_as_torch_does(by_id):
    """F.ctc_loss(dk log-probs, targets, CPU lengths) was refused as a host
    operand; torch reads length tensors on the host (LossCTC.cpp), so it runs,
    forward and backward, and args.ctc_loss passes."""
    F = torch.nn.functional
    g = torch.Generator().manual_seed(3)
    lp = torch.randn(6, 2, 5, generator=g).log_softmax(2)
    tg, il, tl = torch.tensor([[1, 2, 2], [3, 4, 0]]), torch.tensor([6, 5]), torch.tensor([3, 2])
    for red in ("mean", "sum", "none"):
        a, b = lp.clone().requires_grad_(True), lp.to("dk").requires_grad_(True)
        want, got = F.ctc_loss(a, tg, il, tl, reduction=red), F.ctc_loss(b, tg, il, tl,
                                                                           reduction=red)
        torch.testing.assert_close(got.cpu(), want)
        want.sum().backward()
        got.sum().backward()
        torch.testing.assert_close(b.grad.cpu(), a.grad)
    with pytest.raises(RuntimeError, match="input_lengths must be integral"):
        F.ctc_loss(lp.to("dk"), tg, il.float(), tl)
    for kind in ("samples", "grad"):
        r = _run(by_id, f"torch/args.ctc_loss/float32/{kind}")
        assert r["outcome"] == "pass" and r["details"]["torch"]["outcomes"]["pass"] == 6, r


def test_coverage_run_bridge_measures_devicekit_torch(tmp_path):
    out = tmp_path / "cov"
    cmd = [sys.executable, os.path.join(REPO, "benchmarks", "coverage_run.py"), "--bridge",
           "--level", "core", "--jobs", "1", "-k", "torch/args.gelu/float32/",
           "--out", str(out)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=HUNG_S)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "devicekit/torch/_lower_nn.py" in p.stdout and "total" in p.stdout
    summary = json.loads((out / "bridge-summary.json").read_text())
    nn = summary["files"]["devicekit/torch/_lower_nn.py"]
    assert 0 < nn[0] < nn[1] and 0 <= nn[2] < nn[3]
    # the case reaches gelu's approximate="tanh" (a worker's data, combined)
    data = json.loads((out / "bridge.json").read_text())
    f = next(v for k, v in data["files"].items() if k.endswith("devicekit/torch/_lower_nn.py"))
    assert f["functions"]["gelu"]["summary"]["covered_lines"] > 0
    # and its backward (the grad case): run on the case's thread, where coverage.py traces it,
    # not on torch's autograd device thread
    assert f["functions"]["gelu_backward"]["summary"]["covered_lines"] > 0
    assert (out / "bridge-html" / "index.html").exists()
    unreached = (out / "bridge-unreached.txt").read_text()
    assert "devicekit/torch/_lower_cnn.py  convolution_backward:" in unreached


def test_coverage_run_bridge_lowering_only_keeps_every_lowering_file(tmp_path):
    """--lowering-only traces the lowering files only (the others omitted),
    and still reports a lowering file no case imports (_lower_dist.py), so
    --check sees its branches as untaken."""
    out = tmp_path / "cov"
    cmd = [sys.executable, os.path.join(REPO, "benchmarks", "coverage_run.py"), "--bridge",
           "--lowering-only", "--level", "core", "--jobs", "1", "-k",
           "torch/refuse.mul_out/float32/", "--out", str(out)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=HUNG_S)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    files = json.loads((out / "bridge-summary.json").read_text())["files"]
    assert "devicekit/torch/_device.py" not in files and "devicekit/torch/__init__.py" not in files
    assert files["devicekit/torch/_lower_dist.py"][0] == 0 < files["devicekit/torch/_lower_dist.py"][1]
    assert files["devicekit/torch/_lower_ops.py"][0] > 0  # mul_out ran
