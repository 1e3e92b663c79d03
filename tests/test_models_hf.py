"""The Hugging Face models in the model gate (``devicekit models``, ``hf-*``).

- the transformers models (GPT-2, Llama, BERT masked-LM, ViT, ResNet
  with batch norm, T5, a Mixtral mixture of experts, a Data2VecAudio speech
  model, CLIP) pass every phase in
  float32, bfloat16 and float16 on cpu:0 through ``devicekit.torch``,
  their float64 reference matches the committed goldens, and they reach the
  gate record;
- a planted bug in one of ``devicekit.torch``'s lowerings fails the models
  that use it (and only those), naming the first diverging module and the
  command that replays it;
- without transformers their cases are *skipped* with the reason, never
  passed, and a policy that requires them refuses such a record;
- the gate policy knows their names, and a baseline without them still checks.

Needs torch and transformers (skipped with the reason otherwise), except the
missing-transformers tests, which hide transformers themselves.
"""

import copy
import json
import os
import subprocess
import sys

import pytest

from devicekit.gate import check as check_mod
from devicekit.gate import policy, record
from devicekit.gate.errors import BadPolicy
from devicekit import models as zoo
from devicekit.models import harness as H
from devicekit.models import hf
from test_gate import BASE_CASES, _conf_report, write_policy
from conftest import DEVICE_API_INCLUDE, REPO_ROOT, _find_c_compiler, compile_test_plugin
from conftest import HUNG_S

HF = ("hf-gpt2", "hf-llama", "hf-bert", "hf-vit", "hf-resnet", "hf-t5", "hf-moe",
      "hf-data2vec-audio", "hf-clip")
needs_hf = pytest.mark.skipif(hf.missing() is not None, reason=f"hf models: {hf.missing()}")


def models_cli(*args, env=None, timeout=HUNG_S):
    return subprocess.run([sys.executable, "-m", "devicekit", "models", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, env=env)


def _record(tmp_path, name, models_report):
    """A gate record of ``models_report`` (the conformance part hand-made, as in test_gate.py)."""
    lib = tmp_path / "libacme.so"
    if not lib.exists():
        lib.write_bytes(b"\x7fELF acme build 1")
    perf = {"measured": False, "reason": "not measured in this test", "results": [], "skipped": []}
    rec = record.build(_conf_report(lib, BASE_CASES), models_report, perf,
                       [{"op": "add", "implemented": True, "dtypes": ["float32"]}], [])
    path = tmp_path / f"{name}.json"
    record.write(rec, path)
    return path


def _without(report, names):
    """``report`` as an older run that did not have the models ``names``."""
    old = copy.deepcopy(report)
    old["cases"] = [c for c in old["cases"] if c["op"] not in names]
    old["models"] = {m: i for m, i in old["models"].items() if m not in names}
    old["run"]["models"] = [m for m in old["run"]["models"] if m not in names]
    return old


def _policy(tmp_path, required):
    p = write_policy(tmp_path, perf=False)
    text = p.read_text().replace('required = ["mlp"]', f"required = {json.dumps(required)}")
    p.write_text(text)
    return policy.load(p)


# ---- the hf models pass on the reference plugin --------------------------

@pytest.fixture(scope="module")
def hf_run(cpu_models_run):
    """The session's run of every model on cpu:0 (conftest.cpu_models_run): the
    zoo and the hf-* models, every dtype."""
    proc, rep, _ = cpu_models_run
    return proc, rep


@needs_hf
def test_hf_models_pass_every_phase_and_dtype_on_cpu0(hf_run):
    proc, rep = hf_run
    assert proc.returncode == 0, proc.stdout[-3000:]
    s = rep["summary"]
    decoders = [m for m in HF if hf.get(m).generates]  # + the generate phase
    assert decoders == ["hf-gpt2", "hf-llama", "hf-moe"]
    assert s["passed"] and s["total"] == s["by_outcome"]["pass"] == (
        len(zoo.ALL_NAMES) * 5 + len(decoders)) * 3
    assert {c["id"] for c in rep["cases"] if c["id"].endswith("/generate")} == {
        f"models/{m}/{dt}/generate" for m in decoders for dt in ("float32", "bfloat16", "float16")}
    assert set(s["by_section"]) == set(zoo.ALL_NAMES) and set(HF) <= set(zoo.ALL_NAMES)
    for name in HF:
        info = rep["models"][name]
        assert info["golden"]["match"], (name, info["golden"])
        assert len(info["curves"]["float64"]) == 6
        for dt in ("float32", "bfloat16", "float16"):
            curve = info["curves"][dt]["plugin"]
            assert len(curve) == 6 and curve[-1] < curve[0], (name, dt, curve)
        assert info["config"]["arch"] and info["layers"]  # module names, in the report
    bert = next(c for c in rep["cases"] if c["id"] == "models/hf-bert/float32/inference")
    # the bridge sends BERT's layer norms and attention to the plugin's fused kernels
    assert "cpu.layer_norm_f32" in bert["details"]["fused_kernels"], bert["details"]
    for c in rep["cases"]:
        if c["op"] in HF and c["id"].endswith("/backward"):
            assert c["details"]["worst"]["ratio"] <= 1.0 and c["details"]["tensors"] > 10


@needs_hf
def test_hf_models_reach_the_gate_record_and_an_old_baseline_still_checks(hf_run, tmp_path):
    _, rep = hf_run
    new = _record(tmp_path, "new", rep)
    old = _record(tmp_path, "old", _without(rep, HF))  # certified before the hf models existed
    rec = record.load(new)
    for name in HF:
        for dt in ("float32", "bfloat16", "float16"):
            entry = rec["models"]["per_model"][name][dt]
            assert entry["passed"] and set(entry["phases"]) == set(
                H.phases_of(hf.get(name)))  # the decoders' generate too
    pol = _policy(tmp_path, ["mlp", *HF])
    v = check_mod.check(rec, record.load(old), pol, new, old, check_binary=False)
    assert v.admitted, [vars(r) for r in v.refusals]
    assert {g["id"].split("/")[1] for g in v.gains} == set(HF)
    # the old record itself, against a policy that now requires the hf models
    base = record.load(old)
    v = check_mod.check(base, base, pol, old, old, check_binary=False)
    assert {(r.rule, r.subject) for r in v.refusals} == {
        ("models.required", f"models/{m}/float32") for m in HF}
    # and the command line agrees: an old baseline still checks
    proc = subprocess.run([sys.executable, "-m", "devicekit", "gate", "check", new, "--baseline",
                           old, "--policy", pol.path, "--binary", tmp_path / "libacme.so"],
                          capture_output=True, text=True, timeout=HUNG_S)
    assert proc.returncode == 0 and "ADMITTED" in proc.stdout, proc.stdout + proc.stderr


@needs_hf
def test_hf_resnet_batch_norm_buffers_update_on_the_device_as_on_cpu():
    """hf-resnet's batch norm buffers are the module's own, not masters: one
    training-mode forward on dk:0 updates running_mean/var and the counter as
    torch's CPU does, and eval() then normalises with them (not the batch)."""
    import torch
    from devicekit.models.hf import _Setup, get, torch_device

    model = get("hf-resnet")
    sides = {d: _Setup(model, torch_device(d), "float32") for d in ("cpu", "cpu:0")}
    assert str(sides["cpu:0"].batch["pixel_values"].device).startswith("dk")
    for s in sides.values():
        s.train_logits = s.forward()
    bufs = {d: {n: b.detach().cpu() for n, b in s.net.named_buffers()} for d, s in sides.items()}
    assert len(bufs["cpu"]) == 3 * 6  # six batch norms (one a shortcut's): mean, var, counter
    for n, want in bufs["cpu"].items():
        got = bufs["cpu:0"][n]
        if n.endswith("num_batches_tracked"):
            assert got.dtype == torch.int64 and int(got) == int(want) == 1, n
        else:
            assert not torch.equal(want, torch.zeros_like(want) if "mean" in n
                                   else torch.ones_like(want)), n  # it moved
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6, msg=n)
    for s in sides.values():
        s.net.eval()
        with torch.no_grad():
            s.eval_logits = s.forward()
    dk, cpu = sides["cpu:0"], sides["cpu"]
    torch.testing.assert_close(dk.eval_logits.cpu(), cpu.eval_logits, rtol=1e-4, atol=1e-5)
    # eval mode really used the running statistics, not the batch's
    assert (dk.eval_logits.cpu() - dk.train_logits.detach().cpu()).abs().max() > 1e-3


@needs_hf
def test_planted_running_stat_bug_fails_only_resnet_inference_at_its_first_batch_norm(monkeypatch):
    """In this process (no worker, no reference process: fast): batch norm right
    on the batch, its running-statistics update with momentum 0.5 instead of
    0.1. Training is untouched; eval mode normalises with wrong statistics, and
    the inference trace (which, as execute(), follows one training forward)
    names the first batch norm."""
    import numpy as np
    import devicekit.torch  # noqa: F401
    from devicekit.models.hf import execute, get, localise, reference_modules

    _plant(monkeypatch, "native_batch_norm",
           lambda fn, x, w, b, rm, rv, training, momentum, eps: fn(x, w, b, rm, rv, training,
                                                                   momentum * 5, eps))
    model = get("hf-resnet")
    ref, got = execute(model, "cpu", "float32", steps=1), execute(model, "cpu:0", "float32", steps=1)
    np.testing.assert_allclose(got.logits, ref.logits, rtol=1e-4, atol=1e-5)  # training forward
    np.testing.assert_allclose(got.curve, ref.curve, rtol=1e-4)
    assert np.abs(got.inference - ref.inference).max() > 1e-2  # eval: wrong running stats
    loc = localise(model, "cpu:0", "float32", reference_modules("hf-resnet", "float32", True))
    first = loc["first"]
    assert (first["layer"], first["kind"], first["direction"]) == (
        "resnet.embedder.embedder.normalization", "BatchNorm2d", "forward"), first
    assert loc["rows"][0]["layer"] == "resnet.embedder.embedder.convolution" and loc["rows"][0]["ok"]


@needs_hf
def test_hf_moe_routes_tokens_to_the_cpus_experts_and_a_wrong_topk_fails_in_the_experts(
        monkeypatch):
    """hf-moe's routers pick, on dk:0, the same top-2 experts per token as
    torch's CPU (and not a constant choice: every expert is used); with topk
    planted to return the *least* likely experts, the router's logits still
    agree but the first diverging module is inside the first layer's experts."""
    import torch
    import devicekit.torch  # noqa: F401  (fills the table before it is patched)
    from devicekit.models.hf import _Setup, get, localise, reference_modules, torch_device

    model = get("hf-moe")
    picks = {}
    for d in ("cpu", "cpu:0"):
        s = _Setup(model, torch_device(d), "float32")
        got = []
        hooks = [m.register_forward_hook(lambda m, i, o, got=got: got.append(o[2].cpu()))
                 for n, m in s.net.named_modules() if n.endswith("mlp.gate")]
        with torch.no_grad():
            s.forward()
        for h in hooks:
            h.remove()
        picks[d] = got
    assert len(picks["cpu"]) == 2  # one router per layer
    for want, got in zip(picks["cpu"], picks["cpu:0"]):
        assert want.shape == (4 * 16, 2) and set(want.unique().tolist()) == {0, 1, 2, 3}
        assert torch.equal(got.sort(-1).values, want.sort(-1).values)

    _plant(monkeypatch, "topk", lambda fn, x, k, dim=-1, largest=True, sorted=True:
           fn(x, k, dim, not largest, sorted))
    loc = localise(model, "cpu:0", "float32", reference_modules("hf-moe", "float32", True))
    first = loc["first"]  # the first expert's activation, called on the wrong tokens
    assert (first["layer"], first["kind"], first["direction"]) == (
        "model.layers.0.mlp.experts.act_fn", "SiLUActivation", "forward"), first
    gate = next(r for r in loc["rows"] if r["layer"] == "model.layers.0.mlp.gate")
    assert gate["ok"] and gate["direction"] == "forward"  # its logits: right before the topk


@needs_hf
def test_planted_grouped_conv1d_bug_fails_the_speech_model_at_its_position_conv(monkeypatch):
    """hf-data2vec-audio's feature encoder is plain 1-D convolutions, its
    position embedding grouped ones (4 groups) with a bias: a convolution
    lowering that drops the bias of grouped convolutions only leaves the
    feature encoder right and is named at the first position convolution."""
    import devicekit.torch  # noqa: F401  (fills the table before it is patched)
    from devicekit.models.hf import get, localise, reference_modules

    _plant(monkeypatch, "convolution", lambda fn, x, w, b, *conv: fn(
        x, w, None if conv[-1] > 1 else b, *conv))  # conv[-1]: groups
    model = get("hf-data2vec-audio")
    loc = localise(model, "cpu:0", "float32", reference_modules("hf-data2vec-audio", "float32",
                                                                True))
    first = loc["first"]
    assert (first["layer"], first["kind"], first["direction"]) == (
        "data2vec_audio.encoder.pos_conv_embed.layers.0.conv", "Conv1d", "forward"), first
    ok = {r["layer"] for r in loc["rows"] if r["ok"]}
    assert {"data2vec_audio.feature_extractor.conv_layers.0.conv",
            "data2vec_audio.feature_extractor.conv_layers.1.conv"} <= ok


@needs_hf
def test_hf_clip_loss_is_clips_own_and_a_wrong_int_argmax_is_named_at_the_text_projection(
        monkeypatch):
    """hf-clip's loss on dk:0 is what ``CLIPModel(return_loss=True)`` computes
    there itself, and logits_per_text is logits_per_image transposed; the text
    tower pools at the argmax of the token ids: an integer argmax planted as
    argmin leaves every text layer right and is named at the text projection."""
    import torch
    import devicekit.torch  # noqa: F401  (fills the table before it is patched)
    from devicekit.models.hf import _Setup, get, localise, reference_modules, torch_device
    from devicekit.torch import _table

    model = get("hf-clip")
    s = _Setup(model, torch_device("cpu:0"), "float32")
    params = {n: m.detach() for n, m in s.masters.items()}
    with torch.no_grad():
        own = torch.func.functional_call(s.net, params, (), {**s.batch, "return_loss": True})
        ours = s.loss(s.forward())
    assert own.loss.device.type == "dk"
    torch.testing.assert_close(ours.cpu(), own.loss.cpu(), rtol=1e-6, atol=0)
    torch.testing.assert_close(own.logits_per_text.cpu(), own.logits_per_image.cpu().T)

    argmin = _table.LOWERINGS[torch.ops.aten.argmin.default].fn
    _plant(monkeypatch, "argmax", lambda fn, x, *a, **k: (  # x: a devicekit tensor
        argmin if "int" in str(x.dtype) else fn)(x, *a, **k))
    loc = localise(model, "cpu:0", "float32", reference_modules("hf-clip", "float32", True))
    first = loc["first"]
    assert (first["layer"], first["kind"], first["direction"]) == (
        "text_projection", "Linear", "forward"), first
    ok = {r["layer"] for r in loc["rows"] if r["ok"]}
    assert {"text_model.final_layer_norm", "visual_projection"} <= ok


@needs_hf
def test_hf_decoders_greedy_generation_on_dk_gives_the_cpus_tokens_with_no_fallback(monkeypatch):
    """hf.generate: transformers' greedy generate() (KV cache, stopping
    criteria) of hf-gpt2 and hf-llama on dk:0, with no CPU fallback, gives
    torch's CPU tokens exactly; an argmax planted as argmin changes them
    (the check can fail)."""
    import numpy as np
    import devicekit.torch as dkt
    from devicekit.errors import InvalidArgumentError
    from devicekit.models.hf import generate, get

    dkt.reset_fallback_stats()
    cpu = {}
    for name in ("hf-gpt2", "hf-llama"):
        model = get(name)
        cpu[name] = generate(model, "cpu", "float32")
        got = generate(model, "cpu:0", "float32")
        assert cpu[name].shape == (4, 8) and len(np.unique(cpu[name])) > 4, cpu[name]
        np.testing.assert_array_equal(got, cpu[name], err_msg=name)
    assert not dkt.fallback_stats(), dkt.fallback_stats()
    with pytest.raises(InvalidArgumentError, match="DeviceKit models: hf-bert is not a decoder"):
        generate(get("hf-bert"), "cpu:0")

    from devicekit.torch import _table
    argmin = _table.LOWERINGS[torch_op("argmin")].fn
    _plant(monkeypatch, "argmax", lambda fn, x, *a, **k: (  # x: a devicekit tensor
        argmin if "float" in str(x.dtype) else fn)(x, *a, **k))
    wrong = generate(get("hf-llama"), "cpu:0", "float32")
    assert not np.array_equal(wrong, cpu["hf-llama"])


@needs_hf
def test_generate_phase_fails_on_a_planted_argmax_and_passes_otherwise(monkeypatch):
    """The generate phase's judge (``harness.judge("generate")`` on
    ``hf._generate``'s tokens and margins, as ``hf.execute`` records them;
    that the phase passes in the report on cpu:0 is the session run's test
    above): hf-gpt2's greedy tokens on dk:0 pass against torch's CPU; with
    argmax planted as argmin on floating inputs (what greedy decoding picks
    the next token with) the phase fails, naming the row and step."""
    import devicekit.torch  # noqa: F401  (fills the table before it is patched)
    from devicekit.models import harness as H
    from devicekit.models.hf import _generate, _np, _Setup, get, torch_device
    from devicekit.torch import _table

    model = get("hf-gpt2")

    def side(device, dtype):
        run = H.Run(model.name, device, dtype)
        with H._phase(run, "forward"):
            run.logits = _np(_Setup(model, torch_device(device), dtype).forward())
        with H._phase(run, H.GENERATE):
            run.tokens, run.margins = _generate(model, torch_device(device), dtype)
        return run

    ref, correct = side("cpu", "float64"), side("cpu", "float32")
    assert H.judge(H.GENERATE, side("cpu:0", "float32"), correct, ref, "float32")[:2] == (
        "pass", "")
    argmin = _table.LOWERINGS[torch_op("argmin")].fn
    _plant(monkeypatch, "argmax", lambda fn, x, *a, **k: (  # x: a devicekit tensor
        argmin if "float" in str(x.dtype) else fn)(x, *a, **k))
    outcome, msg, details = H.judge(H.GENERATE, side("cpu:0", "float32"), correct, ref, "float32")
    assert outcome == "fail" and "4 of 4 rows generate other tokens than torch's CPU in " \
        "float32" in msg and "step 0" in msg, msg
    assert details["tokens"]["correct"] == correct.tokens.tolist()


def torch_op(name):
    import torch
    return getattr(torch.ops.aten, name).default


# ---- a planted bug in the bridge ---------------------------------------------

def _run_in_process(name, dtypes=("float32",), steps=2):
    """``worker.run_model`` in this process (so a monkeypatched lowering is the
    one that runs; the reference side is its own process, untouched):
    {case id: result}."""
    from devicekit.conformance.target import open_target
    from devicekit.models import get, worker

    out = {}
    worker.run_model(get(name), open_target("cpu:0"), list(dtypes), steps, "--device cpu:0",
                     lambda m: out.__setitem__(m["case"], m) if "case" in m else None)
    return out


def _plant(monkeypatch, op_name, wrong):
    """Replaces ``devicekit.torch``'s lowering of ATen ``op_name`` by
    ``wrong(original_fn, *args, **kwargs)``."""
    import torch
    from devicekit.torch import _table

    op = getattr(torch.ops.aten, op_name.split(".")[0]).default
    orig = _table.LOWERINGS[op]
    monkeypatch.setitem(_table.LOWERINGS, op, _table.Lowering(
        lambda *a, **k: wrong(orig.fn, *a, **k), orig.kind, orig.raw))


def _outcomes(results):
    return {cid.rsplit("/", 1)[1]: r["outcome"] for cid, r in results.items()}


@needs_hf
def test_planted_gelu_bug_fails_bert_names_its_first_gelu_and_spares_gpt2(monkeypatch, capsys):
    import devicekit.torch  # noqa: F401  (fills the table before it is patched)
    # erf GELU lowered as the tanh approximation: ~1e-3 off, a classic wrong lowering
    _plant(monkeypatch, "gelu", lambda fn, x, approximate="none": fn(x, approximate="tanh"))
    bert = _run_in_process("hf-bert")
    assert _outcomes(bert) == {"forward": "fail", "loss": "fail", "backward": "fail",
                               "inference": "fail", "train": "fail"}
    fwd = bert["models/hf-bert/float32/forward"]
    first = fwd["details"]["divergence"]["first"]
    assert (first["layer"], first["kind"], first["direction"]) == (
        "bert.encoder.layer.0.intermediate.intermediate_act_fn", "GELUActivation", "forward")
    assert "cpu.gelu_f32" in first["fused_kernels"] and first["ratio"] > 10
    replay = ("devicekit models --device cpu:0 --model hf-bert --dtype float32 "
              "--layer bert.encoder.layer.0.intermediate.intermediate_act_fn")
    assert fwd["details"]["layer_replay"] == replay
    assert ("first diverging module: layer bert.encoder.layer.0.intermediate.intermediate_act_fn "
            "(GELUActivation), forward output" in fwd["message"])
    assert f"replay module: {replay}" in fwd["message"]
    # GPT-2's gelu_new is written with tanh in Python: it never reaches aten.gelu
    assert set(_outcomes(_run_in_process("hf-gpt2")).values()) == {"pass"}
    # the replay: that one module, on both sides, training (forward and backward)
    from devicekit.conformance.target import open_target
    from devicekit.models import cli, get
    code = cli._replay_layer(get("hf-bert"), open_target("cpu:0"), "float32",
                             "bert.encoder.layer.0.intermediate.intermediate_act_fn", False)
    printed = capsys.readouterr().out
    assert code == cli.EXIT_FAILED and "FAIL forward" in printed and printed.endswith("FAILED\n")


@needs_hf
@pytest.mark.parametrize("op, wrong, model, module, direction", [
    # a layer norm with a wrong epsilon (1e-5 read as 0.1): GPT-2's first ln_1
    ("native_layer_norm", lambda fn, x, shape, w, b, eps: fn(x, shape, w, b, eps * 1e4),
     "hf-gpt2", "transformer.h.0.ln_1", "forward"),
    # GELU right forward, its backward the tanh approximation's: ViT's last MLP, backward
    ("gelu_backward", lambda fn, g, x, approximate="none": fn(g, x, approximate="tanh"),
     "hf-vit", "vit.layers.1.mlp.activation_fn", "backward"),
], ids=["layer_norm_eps-gpt2", "gelu_backward-vit"])
def test_planted_bug_names_the_first_diverging_module(monkeypatch, op, wrong, model, module,
                                                      direction):
    import devicekit.torch  # noqa: F401
    _plant(monkeypatch, op, wrong)
    got = _run_in_process(model)
    failed = [p for p, o in _outcomes(got).items() if o == "fail"]
    assert failed and set(_outcomes(got).values()) <= {"pass", "fail"}
    if direction == "backward":
        assert _outcomes(got)["forward"] == "pass" and "backward" in failed
    first = got[f"models/{model}/float32/{failed[0]}"]["details"]["divergence"]["first"]
    assert (first["layer"].split("#")[0], first["direction"]) == (module, direction), first


@pytest.fixture(scope="module")
def add_rel_plugin(tmp_path_factory):
    """faulty.c with FAULT=1: the reference plugin with an add 1e-3 off."""
    import devicekit_cpu
    compiler = _find_c_compiler()
    if compiler is None:
        pytest.skip("no C compiler on PATH: the faulty plugin cannot be built")
    real = f'-DREAL_PLUGIN="{devicekit_cpu.library_path()}"'
    return compile_test_plugin(compiler, REPO_ROOT / "tests" / "conformance_plugins" / "faulty.c",
                               DEVICE_API_INCLUDE, tmp_path_factory.mktemp("hf") / "faulty_add.so",
                               flags=("-Werror", "-DFAULT=1", real), libs=("-ldl", "-lm"))


@needs_hf
def test_a_vendor_plugin_with_a_wrong_add_fails_hf_llama_at_its_first_rms_norm(add_rel_plugin,
                                                                                tmp_path):
    # given by path, the plugin must be the one the bridge runs the hf model
    # on, not the installed reference plugin it wraps
    lib = add_rel_plugin
    out = tmp_path / "rep"
    proc = models_cli("--plugin", lib, "--model", "hf-llama", "--dtype", "float32",
                      "--jobs", "1", "--report", out)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
    rep = json.loads((out / "report.json").read_text())
    assert rep["plugin"]["library_path"] == str(lib)
    # every phase fails but generate: a small relative error in add moves no
    # greedy token, and generate judges the tokens
    assert {c["id"].rsplit("/", 1)[1]: c["outcome"] for c in rep["cases"]} == {
        "forward": "fail", "loss": "fail", "backward": "fail", "inference": "fail",
        "train": "fail", "generate": "pass"}
    first = rep["cases"][0]["details"]["divergence"]["first"]
    assert (first["layer"], first["kind"]) == ("model.layers.0.input_layernorm", "LlamaRMSNorm")
    assert "add" in first["base_ops"]  # the base ops the plugin launched inside that module
    assert f"replay module: devicekit models --plugin {lib} --model hf-llama" in proc.stdout
    # the printed replay, run as printed: that module only, on the plugin
    replay = rep["cases"][0]["details"]["layer_replay"].split()[2:]
    proc = models_cli(*replay)
    assert proc.returncode == 1 and "on faulty:0" in proc.stdout, proc.stdout + proc.stderr
    assert "FAIL forward  output" in proc.stdout and proc.stdout.endswith("FAILED\n")


# ---- without transformers: skipped with the reason ---------------------------

@pytest.fixture
def no_transformers(tmp_path):
    """An environment whose ``import transformers`` fails (a shadowing
    package that raises), for this process's children."""
    shim = tmp_path / "shim" / "transformers"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text(
        'raise ImportError("No module named \'transformers\' (hidden by the test)")\n')
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(shim.parent), env.get("PYTHONPATH", "")])
    return env


def test_missing_transformers_is_a_reason_not_a_crash(monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)
    assert hf.missing().startswith("needs transformers")
    monkeypatch.setitem(sys.modules, "torch", None)
    assert hf.missing().startswith("needs torch")
    assert hf.get("hf-gpt2").layers() == []  # listing needs no torch


def test_without_transformers_hf_cases_are_skipped_with_the_reason(no_transformers, tmp_path):
    out = tmp_path / "rep"
    proc = models_cli("--device", "cpu:0", "--model", "mlp,hf-gpt2", "--dtype", "float32",
                      "--jobs", "2", "--report", out, env=no_transformers)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    rep = json.loads((out / "report.json").read_text())
    cases = {c["id"]: c for c in rep["cases"]}
    for phase in ("forward", "loss", "backward", "inference", "train", "generate"):
        c = cases[f"models/hf-gpt2/float32/{phase}"]
        assert c["outcome"] == "skipped", c  # never a pass
        assert "hf-gpt2 needs transformers" in c["message"] and "hidden by the test" in c["message"]
        if phase != "generate":  # (the zoo's MLP does not generate)
            assert cases[f"models/mlp/float32/{phase}"]["outcome"] == "pass"
    assert "models/mlp/float32/generate" not in cases
    assert rep["summary"]["by_section"]["hf-gpt2"]["skipped"] == 6
    assert "needs transformers" in rep["models"]["hf-gpt2"]["skipped"]
    listed = models_cli("--list", "--model", "hf-vit", env=no_transformers)
    assert listed.returncode == 0 and "skipped: needs transformers" in listed.stdout
    # a policy that requires the model refuses such a record; one that does not, admits it
    path = _record(tmp_path, "rec", rep)
    rec = record.load(path)
    assert rec["models"]["per_model"]["hf-gpt2"]["float32"]["phases"]["forward"] == "skipped"
    v = check_mod.check(rec, rec, _policy(tmp_path, ["mlp", "hf-gpt2"]), path, path,
                        check_binary=False)
    assert {(r.rule, r.subject, r.new) for r in v.refusals} == {
        ("models.required", f"models/hf-gpt2/float32/{p}", "skipped")
        for p in ("forward", "loss", "backward", "inference", "train", "generate")}
    v = check_mod.check(rec, rec, _policy(tmp_path, ["mlp"]), path, path, check_binary=False)
    assert v.admitted, [vars(r) for r in v.refusals]


# ---- the policy knows their names --------------------------------------------

def test_policy_validation_knows_the_hf_models(tmp_path):
    pol = _policy(tmp_path, ["gpt2", *HF])
    assert pol.models == ["gpt2", *HF]
    with pytest.raises(BadPolicy, match="hf-gpt3") as e:
        _policy(tmp_path, ["hf-gpt3"])
    assert all(name in str(e.value) for name in HF)  # the error lists what is allowed
    p = write_policy(tmp_path, perf=False, extra='\n[[waivers]]\nrule = "models.required"\n'
                     'subject = "models/hf-vit/float32/*"\nreason = "pending"\n'
                     'expires = 2099-01-01\n')
    assert policy.load(p).waivers[0].subject == "models/hf-vit/float32/*"
