"""The model zoo (devicekit.models) and the pieces of the regression harness,
in this process on cpu:0: shapes and layers, Philox-seeded weights, the
float64 reference against the independent numpy oracle, the pass criterion,
the goldens, the per-layer search, and the command line's usage errors.

The whole-suite runs and the faulty plugins are in test_models_catches.py.
"""

import json
import math
import subprocess
import sys
import zlib

import numpy as np
import pytest

from conftest import HUNG_S

import devicekit.models as zoo
from devicekit import InvalidArgumentError
from devicekit.models import divergence, goldens, reference
from devicekit.models import harness as H
from devicekit.nn import functional as F
from devicekit.testing import oracle_nn as O


def test_zoo_is_shaped_like_the_real_models():
    for name in zoo.NAMES:
        model = zoo.get(name)
        layers = model.layers()
        names = [layer.name for layer in layers]
        assert len(set(names)) == len(names) > 3, name
        used = {p for layer in layers for p in layer.params}
        assert used == set(model.param_specs()), f"{name}: parameters no layer uses or unknown"
        assert "targets" in model.make_data()
    for name in ("gpt2", "llama", "encoder", "vit"):
        c = zoo.get(name).config
        assert c.dim // c.heads in (32, 64) and c.heads >= 2 and c.layers >= 2
        tokens = c.vocab if name != "vit" else (c.size // c.patch) ** 2 + 1
        assert tokens & (tokens - 1), f"{name}: vocab/tokens {tokens} is a power of two"
    assert zoo.get("llama").config.kv_heads < zoo.get("llama").config.heads  # grouped-query
    with pytest.raises(InvalidArgumentError, match="unknown model 'nope'"):
        zoo.get("nope")


def test_weights_and_data_are_fixed_philox_bits():
    from devicekit.models.base import normal
    from devicekit.testing import philox

    a, b = zoo.get("gpt2").init_params(), zoo.get("gpt2").init_params()
    assert all(np.array_equal(a[n], b[n]) for n in a) and a["wte"].dtype == np.float32
    assert abs(float(a["wte"].std()) - 0.02) < 0.001 and abs(float(a["wte"].mean())) < 0.001
    # the Box-Muller transform of the documented Philox streams, nothing else
    u1 = philox.random_uniform((5,), 7, zlib.crc32(b"w#u1") << 32, np.float64)
    u2 = philox.random_uniform((5,), 7, zlib.crc32(b"w#u2") << 32, np.float64)
    want = (np.sqrt(-2 * np.log1p(-u1)) * np.cos(2 * np.pi * u2)).astype(np.float32)
    assert np.array_equal(normal((5,), 7, "w"), want)
    assert not np.array_equal(normal((5,), 7, "w"), normal((5,), 7, "v"))


# ---- the float64 reference against the numpy oracle ------------------------

def _heads(x, h):
    b, n, d = x.shape
    return x.reshape(b, n, h, d // h).transpose(0, 2, 1, 3)


def _merge(x):
    b, h, n, d = x.shape
    return x.transpose(0, 2, 1, 3).reshape(b, n, h * d)


_BATCH_STATS = {}  # batch norm name -> (batch mean, unbiased batch variance) of the last CNN forward


def _oracle_logits(model, running=None):
    """The model's forward written again with the numpy float64 oracle
    (devicekit.testing.oracle_nn), which never calls devicekit. For the CNN,
    ``running`` None is a training forward that stores each batch norm's
    batch mean and unbiased variance in ``_BATCH_STATS``; a
    dict of running statistics is an inference forward that uses them."""
    p = {k: v.astype(np.float64) for k, v in model.init_params().items()}
    d, c = model.make_data(), model.config
    if model.name == "mlp":
        x = d["features"].astype(np.float64)
        for i in range(len(c.hidden)):
            x = O.gelu(O.linear(x, p[f"fc{i}.weight"], p[f"fc{i}.bias"]))
        return O.linear(x, p["head.weight"], p["head.bias"])
    if model.name == "cnn":
        def bn(x, n):
            if running is None:
                m = x.mean((0, 2, 3), keepdims=True)
                v = ((x - m) ** 2).mean((0, 2, 3), keepdims=True)
                count = x.size // x.shape[1]
                _BATCH_STATS[n] = (m.ravel(), v.ravel() * count / (count - 1))
            else:
                m, v = (running[n][i][None, :, None, None] for i in (0, 1))
            return ((x - m) / np.sqrt(v + 1e-5) * p[n + ".weight"][None, :, None, None]
                    + p[n + ".bias"][None, :, None, None])
        relu = lambda t: np.maximum(t, 0)  # noqa: E731
        x = relu(bn(O.conv2d(d["images"], p["stem.conv"], padding=1), "stem.bn"))
        x = O.max_pool2d(x, 2)
        h = relu(bn(O.conv2d(x, p["block1.conv1"], padding=1), "block1.bn1"))
        x = relu(bn(O.conv2d(h, p["block1.conv2"], padding=1), "block1.bn2") + x)
        h = relu(bn(O.conv2d(x, p["block2.conv1"], stride=2, padding=1), "block2.bn1"))
        h = bn(O.conv2d(h, p["block2.conv2"], padding=1), "block2.bn2")
        x = relu(h + bn(O.conv2d(x, p["block2.proj"], stride=2), "block2.proj_bn"))
        return O.linear(x.mean((2, 3)), p["head.weight"], p["head.bias"])
    if model.name == "gpt2":
        x = O.embedding(d["ids"], p["wte"]) + O.embedding(d["positions"], p["wpe"])
        for i in range(c.layers):
            b = f"block{i}"
            h = O.layer_norm(x, p[f"{b}.attn.ln.weight"], p[f"{b}.attn.ln.bias"])
            q, k, v = np.split(O.linear(h, p[f"{b}.attn.qkv.weight"], p[f"{b}.attn.qkv.bias"]), 3, -1)
            a = O.scaled_dot_product_attention(*(_heads(t, c.heads) for t in (q, k, v)), is_causal=True)
            x = x + O.linear(_merge(a), p[f"{b}.attn.proj.weight"], p[f"{b}.attn.proj.bias"])
            h = O.layer_norm(x, p[f"{b}.mlp.ln.weight"], p[f"{b}.mlp.ln.bias"])
            h = O.gelu(O.linear(h, p[f"{b}.mlp.fc.weight"], p[f"{b}.mlp.fc.bias"]), "tanh")
            x = x + O.linear(h, p[f"{b}.mlp.proj.weight"], p[f"{b}.mlp.proj.bias"])
        return O.linear(O.layer_norm(x, p["ln_f.weight"], p["ln_f.bias"]), p["wte"])
    if model.name == "llama":
        x = O.embedding(d["ids"], p["embed"])
        for i in range(c.layers):
            b = f"block{i}"
            h = O.rms_norm(x, p[f"{b}.attn.norm"])
            q = O.rotary_embedding(_heads(O.linear(h, p[f"{b}.attn.wq"]), c.heads), d["cos"], d["sin"])
            k = O.rotary_embedding(_heads(O.linear(h, p[f"{b}.attn.wk"]), c.kv_heads), d["cos"], d["sin"])
            v = _heads(O.linear(h, p[f"{b}.attn.wv"]), c.kv_heads)
            x = x + O.linear(_merge(O.scaled_dot_product_attention(q, k, v, is_causal=True)),
                             p[f"{b}.attn.wo"])
            h = O.swiglu(O.linear(O.rms_norm(x, p[f"{b}.mlp.norm"]), p[f"{b}.mlp.w_gate_up"]))
            x = x + O.linear(h, p[f"{b}.mlp.w_down"])
        return O.linear(O.rms_norm(x, p["norm"]), p["lm_head"])
    lin = lambda t, n: O.linear(t, p[n + ".weight"], p[n + ".bias"])  # noqa: E731
    if model.name == "vit":
        ln = lambda t, n: O.layer_norm(t, p[n + ".weight"], p[n + ".bias"], eps=1e-6)  # noqa: E731
        x = O.conv2d(d["images"].astype(np.float64), p["patch.weight"], p["patch.bias"], stride=c.patch)
        x = x.reshape(*x.shape[:2], -1).transpose(0, 2, 1)
        x = np.concatenate([np.broadcast_to(p["cls_token"], (x.shape[0], 1, c.dim)), x], 1) + p["pos"]
        for i in range(c.layers):
            b = f"block{i}"
            q, k, v = np.split(lin(ln(x, f"{b}.attn.ln"), f"{b}.attn.qkv"), 3, -1)
            a = O.scaled_dot_product_attention(*(_heads(t, c.heads) for t in (q, k, v)))
            x = x + lin(_merge(a), f"{b}.attn.proj")
            x = x + lin(O.gelu(lin(ln(x, f"{b}.mlp.ln"), f"{b}.mlp.fc")), f"{b}.mlp.proj")
        return lin(ln(x, "norm")[:, 0], "head")
    assert model.name == "encoder"
    ln = lambda t, n: O.layer_norm(t, p[n + ".weight"], p[n + ".bias"], eps=1e-12)  # noqa: E731
    x = ln(O.embedding(d["ids"], p["tok"]) + O.embedding(d["positions"], p["pos"]), "emb_ln")
    for i in range(c.layers):
        b = f"block{i}"
        q, k, v = (_heads(lin(x, f"{b}.attn.{n}"), c.heads) for n in "qkv")
        a = O.scaled_dot_product_attention(q, k, v, attn_mask=d["key_mask"])
        x = ln(x + lin(_merge(a), f"{b}.attn.o"), f"{b}.attn.ln")
        x = ln(x + lin(O.gelu(lin(x, f"{b}.mlp.fc")), f"{b}.mlp.proj"), f"{b}.mlp.ln")
    return lin(np.tanh(lin(x[:, 0], "pooler")), "cls")


@pytest.fixture(scope="module")
def reference_sides():
    """{model: {"runs": {dtype: Run}, "perturbed": {dtype: Run}}} on cpu:0, as
    the harness's reference side computes them."""
    return {name: reference.compute(name, H.DTYPES, H.DEFAULT_STEPS) for name in zoo.NAMES}


@pytest.fixture(scope="module")
def reference_runs(reference_sides):
    """{model: {dtype: Run}} on cpu:0 (float64 and the correct runs)."""
    return {name: side["runs"] for name, side in reference_sides.items()}


@pytest.mark.parametrize("name", zoo.NAMES)
def test_float64_reference_agrees_with_the_numpy_oracle(reference_runs, name):
    run = reference_runs[name]["float64"]
    model = zoo.get(name)
    want = _oracle_logits(model)
    assert run.logits.shape == want.shape
    assert H.rel_error(run.logits, want) < 1e-12, H.rel_error(run.logits, want)
    loss = O.cross_entropy(want.reshape(-1, want.shape[-1]), model.make_data()["targets"].reshape(-1))
    assert abs(run.loss - float(loss)) < 1e-12 * abs(float(loss))
    assert not run.problems and len(run.curve) == H.DEFAULT_STEPS + 1
    assert run.curve[-1] < run.curve[0]  # the AdamW steps do train


def test_cnn_inference_uses_the_running_statistics_of_the_training_forward(reference_runs):
    # BatchNorm2d semantics: running = (1 - momentum) * running + momentum * batch
    # (unbiased variance), from mean 0 / var 1; inference (no_grad) normalises with them.
    model = zoo.get("cnn")
    _oracle_logits(model)
    mom = model.config.bn_momentum
    running = {n: (mom * m, (1 - mom) + mom * v) for n, (m, v) in _BATCH_STATS.items()}
    assert set(running) == {k.rsplit(".", 1)[0] for k in model.buffer_specs()}
    want = _oracle_logits(model, running)
    got = reference_runs["cnn"]["float64"].inference
    assert H.rel_error(got, want) < 1e-12, H.rel_error(got, want)
    assert H.rel_error(want, _oracle_logits(model)) > 1e-3  # not the batch statistics


@pytest.mark.parametrize("name", zoo.NAMES)
def test_goldens_match_the_live_reference_runs(reference_runs, name):
    got = goldens.compare(zoo.get(name), reference_runs[name], H.DEFAULT_STEPS)
    assert got["match"], (f"{name}: the reference numerics changed; if intended, run "
                          f"{goldens.UPDATE_COMMAND}\n" + "\n".join(got["diffs"]))
    prov = goldens.load(name)["provenance"]
    assert prov["config_hash"] == zoo.get(name).config_hash() and "--update-goldens" in prov["command"]
    assert set(goldens.load(name)["dtypes"]) == {"float64", *H.DTYPES}


def test_golden_compare_reports_a_change(reference_runs):
    import copy

    runs = copy.deepcopy(reference_runs["mlp"])
    runs["float64"].curve[3] *= 1 + 1e-7
    runs["bfloat16"].grads["fc1.bias"] *= 1.5
    diffs = goldens.compare(zoo.get("mlp"), runs, H.DEFAULT_STEPS)["diffs"]
    assert any("float64.curve[3]" in d for d in diffs), diffs
    assert any("bfloat16.grads.fc1.bias.l2" in d for d in diffs), diffs
    assert "steps 3 != golden" in goldens.compare(zoo.get("mlp"), runs, 3)["diffs"][0]


def test_golden_judges_a_noise_level_gradient_on_the_models_gradient_scale(reference_runs):
    import copy

    import numpy as np

    runs = copy.deepcopy(reference_runs["encoder"])
    grads = runs["float32"].grads
    biggest = max(float(np.linalg.norm(g)) for g in grads.values())
    noise = "block0.attn.k.bias"  # mathematically 0: softmax cancels a key bias
    assert float(np.linalg.norm(grads[noise])) < goldens.GRAD_NOISE * biggest
    # Rounding noise of another float32 build: completely different, tiny.
    rng = np.random.default_rng(0)
    grads[noise] = rng.standard_normal(grads[noise].shape) * 1e-11
    assert goldens.compare(zoo.get("encoder"), runs, H.DEFAULT_STEPS)["match"]
    # A real gradient there (still far below the biggest one) is a change.
    grads[noise] = np.full(grads[noise].shape, 1e-3 * biggest)
    diffs = goldens.compare(zoo.get("encoder"), runs, H.DEFAULT_STEPS)["diffs"]
    assert any(f"float32.grads.{noise}.l2" in d for d in diffs), diffs


def test_update_goldens_writes_the_committed_files(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "devicekit", "models", "--update-goldens",
                           "--model", "mlp", "--goldens-dir", str(tmp_path)],
                          capture_output=True, text=True, timeout=HUNG_S)
    assert proc.returncode == 0, proc.stderr
    fresh = json.loads((tmp_path / "mlp.json").read_text())
    committed = goldens.load("mlp")
    assert fresh["provenance"]["config"] == committed["provenance"]["config"]
    diffs = []
    for dt, want in committed["dtypes"].items():
        goldens._walk(fresh["dtypes"][dt], want, dt, goldens.RTOL[dt], 0.0, diffs)
    assert not diffs, diffs


# ---- the pass criterion -----------------------------------------------------

def test_bound_scales_with_the_correct_runs_error():
    rng = np.random.default_rng(0)
    ref = rng.standard_normal(1000)
    noise = rng.standard_normal(1000)
    correct = ref + 1e-4 * noise
    assert H.check("t", ref + 3.9e-4 * noise, correct, ref, "float32")["ok"]
    bad = H.check("t", ref + 4.1e-4 * noise, correct, ref, "float32")
    assert not bad["ok"] and 1.0 < bad["ratio"] < 1.1
    # a correct run that is exact leaves the unit roundoff floor
    assert H.check("t", ref * (1 + 2.0**-25), ref, ref, "float32")["ok"]
    assert not H.check("t", ref * (1 + 2.0**-22), ref, ref, "float32")["ok"]
    nan = ref.copy()
    nan[3] = np.nan
    assert H.check("t", nan, correct, ref, "float32")["error"] == math.inf


def test_a_gradient_that_is_zero_in_exact_arithmetic_is_judged_on_the_models_scale():
    grads = {"w": np.ones(100), "k_bias": np.full(10, 1e-19)}
    scales = H.grad_scales(grads)
    noisy = np.full(10, 1e-12)
    assert H.rel_error(noisy, grads["k_bias"]) > 1e6               # against its own norm: nonsense
    assert H.rel_error(noisy, grads["k_bias"], scales["k_bias"]) < 1e-9  # against the model's scale


def test_curve_band_uses_the_worst_error_so_far():
    ref = [3.0, 2.5, 2.0]
    correct = [3.0 * (1 + 1e-6), 2.5, 2.0]  # exact after the first step
    ok = H.curve_check([3.0 * (1 + 3e-6), 2.5 * (1 + 3e-6), 2.0], correct, ref, "float32")
    assert all(r["ok"] for r in ok)
    bad = H.curve_check([3.0, 2.5 * (1 + 1e-5), 2.0], correct, ref, "float32")
    assert [r["ok"] for r in bad] == [True, False, True]


def test_perturb_moves_every_nonzero_float_by_one_ulp_of_the_run_dtype():
    values = {"x": np.array([1.0, -3.0, 0.0, 1e-3, 0.75]), "ids": np.arange(5)}
    for dtype, bits in (("float16", 11), ("bfloat16", 8), ("float32", 24)):
        out = H.perturb(values, dtype)
        assert out["ids"] is values["ids"] and out["x"][2] == 0.0  # ints and zeros stay
        _, e = np.frexp(values["x"])
        steps = (out["x"] - values["x"]) / np.ldexp(1.0, e - bits)
        assert set(np.abs(steps[[0, 1, 3, 4]])) == {1.0}
        assert np.array_equal(out["x"], H.perturb(values, dtype)["x"])  # seeded: every run the same
    signs = np.sign(H.perturb({"w": np.ones(1000)}, "float16")["w"] - 1.0)
    assert 400 < (signs > 0).sum() < 600  # up or down at random
    assert np.all(H.perturb({"h": np.ones(8)}, "float16")["h"].astype(np.float16) != 1.0)


def test_curve_band_widens_with_the_perturbed_runs_error():
    ref, correct = [3.0, 2.5], [3.0, 2.5]
    plugin = [3.0 * (1 + 1e-5), 2.5]
    assert not H.curve_check(plugin, correct, ref, "float32")[0]["ok"]
    rows = H.curve_check(plugin, correct, ref, "float32", [3.0 * (1 + 3e-6), 2.5])
    assert rows[0]["ok"] and rows[0]["perturbed_error"] == pytest.approx(3e-6)


def test_an_ill_conditioned_gradient_is_bounded_by_the_perturbed_correct_run(reference_sides,
                                                                               monkeypatch):
    """cnn/float16/backward, grad:block2.bn1.bias: 128 terms that mostly
    cancel, behind ReLUs whose inputs sit near zero. The correct run's error
    on it is small by luck (6.8e-4); the same reference CPU plugin with ONE
    input pixel nudged by one float16 ulp (and fused kernels off) is 8.9x the
    old single-run bound 4 * 6.8e-4 + u and failed (measured: 8.9x-17x over
    six choices of the pixel, five failing). The perturbed correct run's
    error on that tensor is 0.066: under the new bound the nudged run is
    0.11x and passes (0.11x-0.21x over the six pixels). A real bug in the same model and dtype (batch
    norm's batch mean detached from autograd, so its gradient is lost) still
    fails backward, at about 50x the new bound (700x the old)."""
    from devicekit import _core
    from devicekit import tensor as dk_tensor
    from devicekit._fused import fused_kernels

    model, dtype = zoo.get("cnn"), "float16"
    runs, perturbed = reference_sides["cnn"]["runs"], reference_sides["cnn"]["perturbed"][dtype]
    ref, correct = runs["float64"], runs[dtype]
    real_inputs = H.device_inputs

    def one_pixel_nudged(m, device, dt, perturbed=False):
        inp = real_inputs(m, device, dt, perturbed)
        a = inp["images"].numpy().copy()
        a.reshape(-1)[194] = np.nextafter(a.reshape(-1)[194], np.float16(np.inf))
        inp["images"] = dk_tensor(a, device=device)
        return inp
    monkeypatch.setattr(H, "device_inputs", one_pixel_nudged)
    with fused_kernels(False):
        nudged = H.execute(model, "cpu:0", dtype)
    monkeypatch.setattr(H, "device_inputs", real_inputs)

    outcome, message, details = H.judge("backward", nudged, correct, ref, dtype)  # the old bound
    assert outcome == "fail" and details["worst"]["tensor"] == "grad:block2.bn1.bias", message
    assert details["worst"]["ratio"] > 8 and "perturbed correct run: 0" in message
    outcome, message, details = H.judge("backward", nudged, correct, ref, dtype, perturbed)
    assert outcome == "pass", message
    row = next(r for r in details["checks"] + [details["worst"]]
               if r["tensor"] == "grad:block2.bn1.bias")
    assert row["perturbed_error"] > 10 * row["correct_error"] and row["ratio"] < 0.5
    assert details["perturbed"] is True
    for phase in H.PHASES:  # the nudged run passes every phase under the new bound
        assert H.judge(phase, nudged, correct, ref, dtype, perturbed)[0] == "pass", phase

    real_mean = _core.Tensor.mean

    def detached_batch_mean(self, *args, **kwargs):  # batch norm's statistics over (N, H, W)
        out = real_mean(self, *args, **kwargs)
        return out.detach() if kwargs.get("dim") == (0, 2, 3) else out
    monkeypatch.setattr(_core.Tensor, "mean", detached_batch_mean)
    buggy = H.execute(model, "cpu:0", dtype)
    monkeypatch.setattr(_core.Tensor, "mean", real_mean)
    outcome, message, details = H.judge("backward", buggy, correct, ref, dtype, perturbed)
    assert outcome == "fail" and details["worst"]["ratio"] > 20, message
    assert "perturbed correct run:" in message
    assert H.judge("train", buggy, correct, ref, dtype, perturbed)[0] == "fail"


def test_judge_catches_a_wrong_attention_in_mixed_precision(reference_runs, monkeypatch):
    """An attention that ignores is_causal (every query sees the future: right
    shapes, plausible values) fails Llama in bfloat16, and the per-layer search
    names block0.attn, with the layers before it passing."""
    runs = reference_runs["llama"]
    layers = reference.compute("llama", (), 1, layers=("bfloat16", False))["layers"]
    real = F.scaled_dot_product_attention

    def leaky(q, k, v, attn_mask=None, is_causal=False, scale=None):
        return real(q, k, v, attn_mask=attn_mask, is_causal=False, scale=scale)
    monkeypatch.setattr(F, "scaled_dot_product_attention", leaky)
    model = zoo.get("llama")
    plugin = H.execute(model, "cpu:0", "bfloat16")
    verdicts = {p: H.judge(p, plugin, runs["bfloat16"], runs["float64"], "bfloat16")
                for p in H.PHASES}
    for phase in ("forward", "backward", "inference", "train"):
        assert verdicts[phase][0] == "fail", (phase, verdicts[phase][:2])
    assert "x the bound" in verdicts["forward"][1]
    found = divergence.localise(model, "cpu:0", "bfloat16", layers)
    first = found["first"]
    assert (first["layer"], first["direction"], first["tensor"]) == ("block0.attn", "forward", "output")
    # bfloat16 attention runs its fused 16-bit kernel (the projections are
    # matmuls); the fault is above it, so the layer fails without fused kernels too
    assert first["ratio"] > 5 and "matmul" in first["base_ops"]
    assert first["fused_kernels"].get("cpu.sdpa_flash_bf16") and not first["without_fused"]["ok"]
    assert all(r["ok"] for r in found["rows"] if r["layer"] == "embed")  # forward and its grad
    assert "layer block0.attn" in divergence.describe(first)


def test_per_layer_search_passes_the_reference_plugin():
    layers = reference.compute("encoder", (), 1, layers=("float32", False))["layers"]
    found = divergence.localise(zoo.get("encoder"), "cpu:0", "float32", layers)
    assert found["first"] is None and len(found["rows"]) > 20
    assert {r["direction"] for r in found["rows"]} == {"forward", "backward"}
    with pytest.raises(Exception, match="has no layer 'nope'"):
        divergence.localise(zoo.get("encoder"), "cpu:0", "float32", layers, only="nope")


# ---- command line -----------------------------------------------------------

def _models(*args):
    return subprocess.run([sys.executable, "-m", "devicekit", "models", *args],
                          capture_output=True, text=True, timeout=HUNG_S)


def test_cli_usage_errors_and_list():
    assert _models().returncode == 2  # neither --device nor --plugin
    for bad in (["--device", "nosuch:0"], ["--device", "cpu:0", "--model", "nope"],
                ["--device", "cpu:0", "--dtype", "int8"], ["--plugin", "/nonexistent.so"],
                ["--device", "cpu:0", "--layer", "fc0"]):
        proc = _models(*bad)
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, (bad, proc.stderr)
    listed = _models("--list").stdout
    assert all(f"{name}:" in listed for name in zoo.NAMES) and "block0.attn" in listed


# ---- the shape-alignment advisor -------------------------------------------

def test_padding_advisor_suggests_only_measured_gains():
    from devicekit.models import align

    model = zoo.get("gpt2")
    head = [s for s in align.matmul_shapes(model, "cpu:0") if s[1] == ["head"]]
    assert head and head[0][0][1][-1] == 383  # the vocab is the head matmul's N

    def fake(pairs):  # time = work, except that multiples of 64 run twice as fast
        return [float(np.prod(a)) * b[-1] / (2.0 if a[-1] % 64 == 0 and b[-1] % 64 == 0 else 1.0)
                for a, b in pairs]
    rows = align.advise(model, "cpu:0", timer=fake)
    r = next(r for r in rows if r["size"] == 383)
    assert (r["dim"], r["padded"], r["multiple"], r["suggest"]) == ("N", 384, 128, True)
    assert abs(r["gain"] - (2 * 383 / 384 - 1)) < 1e-12  # useful work only: padding costs 1/383
    assert all(r["size"] % 128 for r in rows)  # aligned sizes get no candidates
    assert align.summary(rows)[0].startswith("pad N 383 -> 384 (multiple of 128)")
    assert not any(r["suggest"] for r in align.advise(model, "cpu:0", threshold=1.0, timer=fake))


def test_padding_advice_lands_in_the_report(tmp_path):
    proc = _models("--device", "cpu:0", "--model", "mlp", "--dtype", "float32", "--jobs", "1",
                   "--advise-padding", "--report", str(tmp_path))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    padding = json.loads((tmp_path / "report.json").read_text())["models"]["mlp"]["padding"]
    assert padding["threshold"] == 0.1 and padding["rows"]
    assert {r["size"] for r in padding["rows"]} >= {10, 96, 160}  # classes, features, hidden
    assert all(r["time_s"] > 0 and r["padded_time_s"] > 0 for r in padding["rows"])
    assert "padding advice for mlp" in proc.stdout
    assert "padding advice" in (tmp_path / "report.html").read_text()
