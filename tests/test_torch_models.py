"""devicekit.torch: Hugging Face models, unmodified, train on ``dk:0``
(GPT-2, Llama, BERT masked-LM, ViT classifier).

Needs torch and transformers (skipped with the reason otherwise). Small
configs with random weights (``devicekit.torch.hf_models``; no download): the
same weights and batch on torch's CPU and on ``dk:0`` (the reference CPU
plugin), several AdamW steps (foreach and for-loop), the losses compared step
by step. The plugin's fused kernels must be the ones that ran.
"""

import pytest

torch = pytest.importorskip("torch", reason="devicekit.torch needs torch: pip install "
                                            "'devicekit[torch]'")
pytest.importorskip("transformers", reason="the model tests build transformers models: "
                                           "pip install transformers")
import devicekit  # noqa: E402
import devicekit.torch as dkt  # noqa: E402
from devicekit.torch import hf_models as _models  # noqa: E402

STEPS = 4
# float32 end to end; the two sides sum in different orders (fused kernels,
# blocked matmuls), so the losses agree to a few float32 ulps per step and the
# optimizer carries that forward. Measured over four steps (torch 2.13): at
# most 2.4e-7 for GPT-2 and Llama, 4.5e-6 for BERT, 2.7e-6 for ViT.
ATOL = 5e-5


@pytest.fixture(autouse=True)
def quiet_transformers():
    import transformers
    transformers.logging.set_verbosity_error()


@pytest.mark.parametrize("foreach", [True, False], ids=["foreach", "for-loop"])
def test_gpt2_trains_like_torch_cpu(cpu, foreach):
    ref = _models.run_steps("gpt2", "cpu", STEPS, foreach=foreach, dropout=False)
    devicekit.reset_composite_stats()
    got = _models.run_steps("gpt2", "dk:0", STEPS, foreach=foreach, dropout=False)
    assert len(got) == STEPS and got[-1] < got[0]
    for step, (r, g) in enumerate(zip(ref, got)):
        assert abs(r - g) <= ATOL, f"step {step}: torch cpu {r}, dk:0 {g} (all: {ref} vs {got})"
    stats = devicekit.composite_stats()
    # GPT-2's layer norms and attention, forward and backward, on the plugin's fused kernels
    for op in ("layer_norm", "layer_norm_backward", "scaled_dot_product_attention",
               "scaled_dot_product_attention_backward"):
        assert stats[op]["fused"] and not stats[op]["decomposed"], (op, stats[op])


@pytest.mark.parametrize("name", ["llama", "bert", "vit"])
def test_more_models_train_like_torch_cpu(cpu, name):
    ref = _models.run_steps(name, "cpu", 3, dropout=False)
    got = _models.run_steps(name, "dk:0", 3, dropout=False)
    for step, (r, g) in enumerate(zip(ref, got)):
        assert abs(r - g) <= ATOL, f"{name} step {step}: torch cpu {r}, dk:0 {g}"


def test_gpt2_with_dropout_draws_on_the_device(cpu):
    # Dropout on: torch picks its math attention and DeviceKit's Philox draws
    # every mask; the same seed gives the same losses, another seed others.
    first = _models.run_steps("gpt2", "dk:0", 2, seed=1)
    again = _models.run_steps("gpt2", "dk:0", 2, seed=1)
    assert first == again
    no_dropout = _models.run_steps("gpt2", "dk:0", 2, seed=1, dropout=False)
    assert first != no_dropout


def test_coverage_of_gpt2_lists_every_op_and_how(cpu):
    report = dkt.coverage(lambda d: _models.run_steps("gpt2", d, 1, dropout=False), "cpu:0")
    assert report.error is None and report.missing() == []
    how = {r["op"]: r["how"] for r in report.rows}
    assert "fused kernel" in how["aten.native_layer_norm.default"]
    assert "fused kernel" in how["aten._scaled_dot_product_fused_attention_overrideable.default"]
    assert how["aten.view.default"] == {"view": how["aten.view.default"]["view"]}
    assert "plugin kernel" in how["aten.addmm.default"]
    for op in ("mm", "embedding_dense_backward", "nll_loss_forward", "nll_loss_backward",
               "_log_softmax_backward_data", "native_layer_norm_backward", "tanh_backward",
               "addcdiv_", "lerp_", "_local_scalar_dense"):
        assert any(r.startswith(f"aten.{op}.") for r in how), op
