"""Hugging Face ``transformers`` models in the model regression (docs/models.md).

``hf-gpt2``, ``hf-llama``, ``hf-bert`` (masked LM), ``hf-vit`` (image
classifier), ``hf-resnet`` (a CNN with batch norm), ``hf-t5`` (an
encoder-decoder, teacher-forced), ``hf-moe`` (a Mixtral mixture-of-experts
decoder), ``hf-data2vec-audio`` (speech: 1-D convolutions over a waveform)
and ``hf-clip`` (vision-text contrastive) are the real
``transformers`` classes at small configs, run through ``devicekit.torch``
on the device under test (``dk:N``) and judged with the zoo's protocol
(``harness.judge``): the same five phases (and ``generate`` for the
decoders: greedy tokens equal to torch's CPU), a float64 reference, bounds from a
correct run's own error, goldens.

- Weights: Philox normals computed on the host (``base.normal``, one stream
  per parameter name), rounded once to float32, never HF's own init and never
  a device RNG, so every backend, every torch release and the float64
  reference start from the same values. Norm weights (ones in HF's init) stay
  ones; matrices and embeddings get ``init_std``, vectors 0.02.
- Precision: float32 (or float64) *master* parameters held apart from the
  module; each forward is ``torch.func.functional_call`` with the masters cast
  to the run dtype (a recorded cast: gradients land on the masters in float32),
  so bfloat16 and float16 are mixed precision with 16-bit *weights and
  activations* (not autocast: ``torch.autocast("dk")`` is not supported by
  the bridge yet).
  The loss is computed in the master dtype; ``torch.optim.AdamW`` steps the
  masters. Dropout is 0, so a training forward draws no random numbers.
- Buffers (batch norm's ``running_mean``/``running_var``/``num_batches_tracked``)
  are not masters: they stay the module's own (in the run dtype; the counter
  int64), start at torch's 0/1/0, and every training-mode forward updates them
  in place on the device, as torch does. ``inference`` (``module.eval()``)
  normalises with the statistics the ``forward`` phase left, so a wrong
  running-stat update on the device fails ``inference``.
- Reference (``float64``) and correct runs (float32, bfloat16, float16) are
  torch on the CPU in their own process (``models.reference``), never
  ``devicekit.torch``: the bridge under test takes no part in what judges it.
- When a phase fails, :func:`reference_modules` and :func:`localise` compare
  every module's output (forward hooks, in execution order) and then every
  module's input gradient (full backward hooks, in backward order) on both
  sides; the first one over its bound is the first diverging module.

Nothing here imports torch or transformers at module level: without them
every case of these models is *skipped* with :func:`missing`'s reason.
"""

import contextlib
import dataclasses
import hashlib
import json
import os
from dataclasses import dataclass

import numpy as np

from . import harness as H
from .base import Layer, normal, integers

# name -> (config class, model class, task, transformers config kwargs)
SPECS = {
    "hf-gpt2": ("GPT2Config", "GPT2LMHeadModel", "causal",
                dict(n_layer=2, n_embd=64, n_head=4, vocab_size=131, n_positions=32,
                     bos_token_id=0, eos_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0,
                     attn_pdrop=0.0)),
    "hf-llama": ("LlamaConfig", "LlamaForCausalLM", "causal",
                 dict(num_hidden_layers=2, hidden_size=64, intermediate_size=128,
                      num_attention_heads=4, num_key_value_heads=2, vocab_size=131,
                      max_position_embeddings=32, bos_token_id=0, eos_token_id=0, pad_token_id=0,
                      attention_dropout=0.0)),
    "hf-bert": ("BertConfig", "BertForMaskedLM", "masked",
                dict(num_hidden_layers=2, hidden_size=64, intermediate_size=128,
                     num_attention_heads=4, vocab_size=131, max_position_embeddings=32,
                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)),
    "hf-vit": ("ViTConfig", "ViTForImageClassification", "classify",
               dict(image_size=16, patch_size=4, num_channels=3, hidden_size=64,
                    num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                    num_labels=5, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)),
    # a CNN with batch norm: 7x7/2 stem conv + 3x3/2 max pool, two basic stages
    # (8 and 16 channels, the second strided with a 1x1 conv shortcut), adaptive
    # average pool; image_size is not a ResNetConfig field (kept as an attribute)
    # but sizes the batch and is in the config hash
    "hf-resnet": ("ResNetConfig", "ResNetForImageClassification", "classify",
                  dict(image_size=16, num_channels=3, embedding_size=8, hidden_sizes=[8, 16],
                       depths=[1, 1], layer_type="basic", hidden_act="relu", num_labels=5)),
    # an encoder-decoder: relative position buckets, T5's RMS layer norm,
    # cross-attention, tied embeddings (scaled LM head); teacher forcing
    "hf-t5": ("T5Config", "T5ForConditionalGeneration", "seq2seq",
              dict(vocab_size=131, d_model=32, d_kv=8, d_ff=64, num_layers=1,
                   num_decoder_layers=1, num_heads=4, relative_attention_num_buckets=8,
                   relative_attention_max_distance=16, dropout_rate=0.0, pad_token_id=0,
                   eos_token_id=1, decoder_start_token_id=0)),
    # a mixture-of-experts decoder: a linear router, softmax, top-2 of 4 experts
    # per token (renormalised), each expert a SwiGLU MLP; tokens gathered per
    # expert and the weighted outputs added back by index
    "hf-moe": ("MixtralConfig", "MixtralForCausalLM", "causal",
               dict(num_hidden_layers=2, hidden_size=32, intermediate_size=64,
                    num_attention_heads=4, num_key_value_heads=2, num_local_experts=4,
                    num_experts_per_tok=2, vocab_size=64, max_position_embeddings=32,
                    bos_token_id=0, eos_token_id=0, pad_token_id=0, attention_dropout=0.0,
                    router_jitter_noise=0.0, experts_implementation="eager")),
    # speech: raw waveform -> two 1-D convolutions (layer-normed, GELU) -> a
    # post-LayerNorm transformer whose position embedding is two grouped 1-D
    # convolutions -> the CTC head (a linear per frame), trained with a
    # per-frame cross-entropy (the model predates devicekit.torch's CTC loss and
    # weight-norm backward, devicekit.torch._lower_models; it keeps its goldens).
    # Data2VecAudio, not Wav2Vec2, was chosen when Wav2Vec2's (and HuBERT's)
    # weight-normed position convolution had no backward lowering. No SpecAugment
    # masking or layer drop (they draw random numbers). num_samples is not a
    # config field (kept as an attribute, as hf-resnet's image_size) but sizes
    # the batch
    "hf-data2vec-audio": ("Data2VecAudioConfig", "Data2VecAudioForCTC", "frames",
                          dict(num_samples=400, conv_dim=[16, 16], conv_kernel=[10, 3],
                               conv_stride=[5, 2], hidden_size=32, num_hidden_layers=2,
                               num_attention_heads=4, intermediate_size=64,
                               num_conv_pos_embeddings=2, conv_pos_kernel_size=5,
                               num_conv_pos_embedding_groups=4, vocab_size=32, pad_token_id=0,
                               hidden_dropout=0.0, activation_dropout=0.0, attention_dropout=0.0,
                               feat_proj_dropout=0.0, final_dropout=0.0, layerdrop=0.0,
                               mask_time_prob=0.0, mask_feature_prob=0.0)),
    # vision-text contrastive: a ViT image tower (16x16 images, 8x8 patches) and a
    # causal text tower (pooled at the highest token id: eos_token_id 2 is
    # transformers' legacy argmax pooling), both projected to 16 and compared
    # by cosine similarity times exp(logit_scale); CLIP's symmetric
    # cross-entropy over the batch (image_text_contrastive_loss)
    "hf-clip": ("CLIPConfig", "CLIPModel", "contrastive",
                dict(projection_dim=16,
                     text_config=dict(vocab_size=64, hidden_size=32, intermediate_size=64,
                                      num_hidden_layers=2, num_attention_heads=4,
                                      max_position_embeddings=16, eos_token_id=2,
                                      attention_dropout=0.0),
                     vision_config=dict(image_size=16, patch_size=8, num_channels=3,
                                        hidden_size=32, intermediate_size=64,
                                        num_hidden_layers=2, num_attention_heads=4,
                                        attention_dropout=0.0))),
}
NAMES = tuple(SPECS)
TORCH_DTYPES = ("float64", "float32", "bfloat16", "float16")


@dataclass(frozen=True)
class HFConfig:
    arch: str
    transformers: str  # the config kwargs as sorted JSON (in the hash)
    seed: int = 7
    batch: int = 4
    length: int = 16
    init_std: float = 0.1


def missing():
    """Why these models cannot run here (a line), or None when they can."""
    try:
        import torch  # noqa: F401
    except ImportError as e:
        return f"needs torch ({e}): pip install 'devicekit[torch]'"
    try:
        import transformers  # noqa: F401
    except ImportError as e:
        return f"needs transformers ({e}): pip install transformers"
    return None


class HFModel:
    """A ``transformers`` model as the model regression sees it: the zoo's
    name/title/config/hash, and ``layers()`` = its module names (empty when
    transformers is missing)."""

    hf = True

    def __init__(self, name):
        cfg_cls, model_cls, task, kwargs = SPECS[name]
        self.name, self.task = name, task
        self.generates = task == "causal"  # the decoders get the generate phase
        self.config = HFConfig(arch=model_cls, transformers=json.dumps(kwargs, sort_keys=True))
        self.title = f"transformers {model_cls} ({task}), {_describe(kwargs)}"

    def config_dict(self):
        return {"model": self.name, **dataclasses.asdict(self.config)}

    def config_hash(self):
        text = json.dumps(self.config_dict(), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def layers(self):
        if missing():
            return []
        return [Layer(n, None, (), type(m).__name__) for n, m in self.module().named_modules() if n]

    def module(self):
        """The ``transformers`` module on the CPU in float32 (its own init; the
        regression overwrites every parameter with :meth:`init_params`)."""
        import torch
        import transformers
        cfg_cls, model_cls, _, kwargs = SPECS[self.name]
        transformers.logging.set_verbosity_error()
        config = getattr(transformers, cfg_cls)(**kwargs)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)  # HF's init draws; all of it is overwritten below
            return getattr(transformers, model_cls)(config)

    def init_params(self, module=None):
        """{name: float32 numpy} over ``named_parameters()`` (tied weights once)."""
        module = module or self.module()
        out = {}
        for pname, p in module.named_parameters():
            v = p.detach().numpy()
            if np.all(v == 1.0):
                out[pname] = np.ones(v.shape, np.float32)
            else:
                std = self.config.init_std if v.ndim >= 2 else 0.02
                out[pname] = normal(v.shape, self.config.seed, f"{self.name}/{pname}", std)
        return out

    def make_data(self):
        """{name: numpy} of one batch: the model's inputs and ``labels``."""
        c, kw = self.config, SPECS[self.name][3]
        if self.task == "classify":
            shape = (c.batch, kw["num_channels"], kw["image_size"], kw["image_size"])
            return {"pixel_values": normal(shape, c.seed, "pixel_values"),
                    "labels": integers((c.batch,), c.seed, "labels", kw["num_labels"])}
        if self.task == "contrastive":  # image i goes with text i
            tk, vk = kw["text_config"], kw["vision_config"]
            shape = (c.batch, vk["num_channels"], vk["image_size"], vk["image_size"])
            return {"input_ids": integers((c.batch, c.length), c.seed, "input_ids",
                                          tk["vocab_size"]),
                    "pixel_values": normal(shape, c.seed, "pixel_values")}
        if self.task == "frames":  # a waveform; one label per frame of the feature encoder
            frames = kw["num_samples"]
            for k, st in zip(kw["conv_kernel"], kw["conv_stride"]):
                frames = (frames - k) // st + 1
            return {"input_values": normal((c.batch, kw["num_samples"]), c.seed, "input_values"),
                    "labels": integers((c.batch, frames), c.seed, "labels", kw["vocab_size"])}
        ids = integers((c.batch, c.length), c.seed, "input_ids", kw["vocab_size"])
        if self.task == "seq2seq":  # teacher forcing: the decoder reads the labels shifted right
            labels = integers((c.batch, c.length), c.seed, "labels", kw["vocab_size"])
            start = np.full((c.batch, 1), kw["decoder_start_token_id"], labels.dtype)
            return {"input_ids": ids, "decoder_input_ids": np.concatenate([start, labels[:, :-1]], 1),
                    "labels": labels}
        data = {"input_ids": ids, "labels": ids.copy()}
        if self.task == "masked":  # padded batch: the mask reaches attention, pads are ignored
            lengths = np.array([c.length, c.length - 5, c.length - 9, c.length - 2][:c.batch])
            mask = (np.arange(c.length)[None, :] < lengths[:, None]).astype(np.int64)
            data["attention_mask"] = mask
            data["labels"] = np.where(mask == 1, ids, -100)
        return data

    def __repr__(self):
        return f"<model {self.name}: {self.config.arch}>"


def _describe(kw):
    if "hidden_sizes" in kw:  # a CNN
        return (f"channels {'/'.join(map(str, kw['hidden_sizes']))}, "
                f"depths {'/'.join(map(str, kw['depths']))}")
    if "text_config" in kw:  # two towers
        t, v = kw["text_config"], kw["vision_config"]
        return (f"text dim {t['hidden_size']} x {t['num_hidden_layers']} layers, "
                f"vision {v['image_size']}x{v['image_size']}/{v['patch_size']} dim "
                f"{v['hidden_size']} x {v['num_hidden_layers']} layers, "
                f"projection {kw['projection_dim']}")
    if "conv_dim" in kw:  # speech: 1-D convolutions over the waveform, then a transformer
        return (f"{kw['num_samples']} samples, 1-D convs {'/'.join(map(str, kw['conv_dim']))}, "
                f"dim {kw['hidden_size']}, {kw['num_hidden_layers']} layers")
    dim = kw.get("n_embd", kw.get("hidden_size", kw.get("d_model")))
    layers = kw.get("n_layer", kw.get("num_hidden_layers"))
    if "num_decoder_layers" in kw:
        return f"dim {dim}, {kw['num_layers']}+{kw['num_decoder_layers']} layers"
    if "num_local_experts" in kw:  # a mixture of experts
        return (f"dim {dim}, {layers} layers of {kw['num_local_experts']} experts, "
                f"top-{kw['num_experts_per_tok']}")
    return f"dim {dim}, {layers} layers"


def get(name):
    return HFModel(name)


# ---- one run ----------------------------------------------------------------

class _Setup:
    """The module in the run dtype on ``device``, the masters, the batch."""

    def __init__(self, model, device, dtype, perturbed=False):
        import torch
        self.torch = torch
        self.dtype = getattr(torch, dtype)
        self.master_dtype = getattr(torch, H.master_dtype(dtype))
        module = model.module()
        values = model.init_params(module)
        data = model.make_data()
        if perturbed:  # as the zoo's perturbed correct run (harness.perturb, same seeds)
            values = H.perturb(values, dtype, H.PERTURB_SEED + 1)
            data = H.perturb(data, dtype)
        self.net = module.to(dtype=self.dtype).to(device)
        self.masters = {n: torch.tensor(v, dtype=torch.float64).to(self.master_dtype).to(device)
                        .requires_grad_() for n, v in values.items()}
        self.batch = {}
        for k, v in data.items():
            t = torch.from_numpy(np.ascontiguousarray(v))
            self.batch[k] = (t.to(self.dtype) if t.is_floating_point() else t).to(device)
        self.task = model.task

    def forward(self):
        params = {n: m.to(self.dtype) for n, m in self.masters.items()}
        inputs = {k: v for k, v in self.batch.items() if k != "labels"}
        out = self.torch.func.functional_call(self.net, params, (), inputs)
        return out.logits_per_text if self.task == "contrastive" else out.logits

    def loss(self, logits):
        F = self.torch.nn.functional
        if self.task == "contrastive":  # CLIP's own loss, on the master-dtype similarities
            from transformers.models.clip.modeling_clip import image_text_contrastive_loss
            return image_text_contrastive_loss(logits.to(self.master_dtype))
        lf, labels = logits.to(self.master_dtype), self.batch["labels"]
        if self.task == "causal":
            lf, labels = lf[:, :-1], labels[:, 1:]
        return F.cross_entropy(lf.reshape(-1, lf.shape[-1]), labels.reshape(-1), ignore_index=-100)


def _np(t):
    import torch
    return t.detach().to("cpu", dtype=torch.float64).numpy()


@contextlib.contextmanager
def _phase(run, name):
    """``harness._phase``, with an ATen op the bridge cannot run
    (``UnloweredOpError``) counted as not-implemented, as a NULL kernel is."""
    from ..errors import NotImplementedByPlugin, UnloweredOpError
    with H._phase(run, name) as ok:
        try:
            yield ok
        except UnloweredOpError as e:
            raise NotImplementedByPlugin(str(e)) from e


def discover(plugin):
    """Makes the development build at ``plugin`` (``--plugin PATH``) a
    discovered plugin of this process, as ``devicekit dev`` does
    (``DEVICEKIT_PLUGIN_OVERRIDE``: it shadows an installed plugin of its
    file's name): ``devicekit.torch`` numbers the discovered devices only.
    Call it before anything discovers plugins; :func:`torch_device` checks
    that the ``dk`` device is that very library."""
    from .._plugins.registry import OVERRIDE_ENV
    os.environ[OVERRIDE_ENV] = os.path.abspath(plugin)


def torch_device(device):
    """The torch device of ``device``: ``"cpu"`` (the reference side) or a
    DeviceKit device (name or object), as ``dk:N`` through ``devicekit.torch``.
    For a device object, the ``dk`` device must be that very plugin library
    (``devicekit models --plugin`` puts it into discovery: :func:`discover`),
    never an installed plugin that happens to share its device's name."""
    if device == "cpu":
        return "cpu"
    import devicekit.torch as dkt
    # dk:0 where it can be: torch's autograd engine serves dk:0 only (prefer)
    if isinstance(device, str):
        return dkt.prefer(device)
    tdev = dkt.prefer(device.name)
    got = dkt.dk_device(tdev).plugin.path
    if os.path.realpath(got) != os.path.realpath(device.plugin.path):
        from ..errors import DeviceKitError
        raise DeviceKitError(f"devicekit.torch maps {device.name} to the plugin at {got}, not to "
                             f"the one under test ({device.plugin.path}): the hf models run "
                             f"through devicekit.torch, which uses discovered plugins only")
    return tdev


def execute(model, device, dtype, steps=H.DEFAULT_STEPS, lr=H.LR, perturbed=False):
    """Every phase of ``model`` on ``device`` ("cpu" = torch's CPU) in ``dtype``, as a
    ``harness.Run``; ``perturbed``: on the nudged batch and parameters (``harness.perturb``)."""
    import torch
    tdev = torch_device(device)
    run = H.Run(model.name, str(device if isinstance(device, str) else device.name), dtype)
    s = logits = loss = None
    with _phase(run, "forward"):
        s = _Setup(model, tdev, dtype, perturbed)
        logits = s.forward()
        run.logits = _np(logits)
    with _phase(run, "loss") as ok:
        if ok:
            loss = s.loss(logits)
            run.loss = float(loss.item())
    with _phase(run, "backward") as ok:
        if ok:
            loss.backward()
            run.grads = {n: _np(m.grad) for n, m in s.masters.items()}
    with _phase(run, "inference"):
        if s is None:
            s = _Setup(model, tdev, dtype, perturbed)
        s.net.eval()
        with torch.no_grad():
            run.inference = _np(s.forward())
        s.net.train()
    with _phase(run, "train") as ok:
        if ok:
            opt = torch.optim.AdamW(s.masters.values(), lr=lr, weight_decay=H.WEIGHT_DECAY)
            curve = [float(loss.item())]
            for step in range(1, steps + 1):
                opt.step()
                opt.zero_grad()
                loss = s.loss(s.forward())
                if step < steps:
                    loss.backward()
                curve.append(float(loss.item()))
            run.curve = curve
    if model.generates and not perturbed:  # (the tokens' verdict uses no perturbed run)
        with _phase(run, H.GENERATE):
            run.tokens, run.margins = _generate(model, tdev, dtype)
    return run


def generate(model, device, dtype="float32", new_tokens=8, prompt=8):
    """Greedy decoding of a decoder (``task == "causal"``): transformers'
    ``generate(max_new_tokens=new_tokens, do_sample=False)`` with its KV cache,
    on ``device`` ("cpu" = torch's CPU) in ``dtype``, from the first ``prompt``
    tokens of each row of the batch, with the masters (cast to ``dtype``)
    loaded into the module. Returns the new tokens, (batch, new_tokens) int64
    numpy (a row that produced its eos token early is padded with it)."""
    if model.task != "causal":
        from ..errors import InvalidArgumentError
        raise InvalidArgumentError(f"DeviceKit models: {model.name} is not a decoder; only causal "
                                   f"language models generate")
    return _generate(model, torch_device(device), dtype, new_tokens, prompt)[0]


def _generate(model, tdev, dtype, new_tokens=8, prompt=8):
    """:func:`generate` on the torch device ``tdev``: (tokens, margins), margins
    being, per new token, the gap between the two largest logits of that step
    divided by the RMS of its logits (what ``harness.token_checks`` reads)."""
    import torch
    s = _Setup(model, tdev, dtype)
    with torch.no_grad():
        s.net.load_state_dict({n: m.to(s.dtype) for n, m in s.masters.items()}, strict=False)
        s.net.eval()
        ids = s.batch["input_ids"][:, :prompt]
        pad = SPECS[model.name][3]["eos_token_id"]
        out = s.net.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                             do_sample=False, pad_token_id=pad, output_scores=True,
                             return_dict_in_generate=True)
        tokens = out.sequences[:, prompt:].cpu().numpy()
        scores = torch.stack(out.scores, 1).to("cpu", torch.float64)  # (batch, new, vocab)
        top = scores.topk(2, dim=-1).values
        rms = scores.pow(2).mean(-1).sqrt()
        margins = ((top[..., 0] - top[..., 1]) / rms).numpy()
    if tokens.shape[1] < new_tokens:  # every row stopped at eos: what generate pads with
        fill = np.full((tokens.shape[0], new_tokens - tokens.shape[1]), pad, tokens.dtype)
        tokens = np.concatenate([tokens, fill], 1)
        margins = np.concatenate([margins, np.full(fill.shape, np.inf)], 1)
    return tokens, margins


def compute(name, dtypes, steps):
    """The reference side: {"runs": {dtype: Run}} on torch's CPU, float64
    included, and {"perturbed": {dtype: Run}} (the correct runs on perturbed inputs)."""
    model = get(name)
    runs = {"float64": execute(model, "cpu", "float64", steps)}
    perturbed = {}
    for dt in dtypes:
        runs[dt] = execute(model, "cpu", dt, steps)
        perturbed[dt] = execute(model, "cpu", dt, steps, perturbed=True)
    return {"runs": runs, "perturbed": perturbed, "layers": None}


# ---- the first diverging module ----------------------------------------------

def _first_tensor(o):
    import torch
    if isinstance(o, torch.Tensor):
        return o
    values = o.values() if isinstance(o, dict) else o if isinstance(o, (tuple, list)) else ()
    return next((v for v in values if isinstance(v, torch.Tensor)), None)


def trace(model, device, dtype, inference):
    """Every module's output in execution order (forward hooks) and, unless
    ``inference``, every module's input gradient in backward order (full
    backward hooks) of one forward (+ loss.backward) of ``model``:
    {"forward": [(key, array)], "backward": [(key, array)], "launched": {...}}.
    A module called twice is keyed ``name#2``."""
    import torch
    s = _Setup(model, torch_device(device), dtype)
    if inference and any(n.endswith("num_batches_tracked") for n, _ in s.net.named_buffers()):
        with torch.no_grad():  # as execute(): inference follows one training forward, which
            s.forward()        # moved batch norm's running statistics (before any hook)
    fwd, bwd, calls, handles = [], [], {}, []

    def key(table, name):
        table[name] = table.get(name, 0) + 1
        return name if table[name] == 1 else f"{name}#{table[name]}"

    bcalls, kinds, launched, marks = {}, {}, {}, {}

    def mark(name):  # what the module launches: snapshots before and after it
        marks[name] = (H._snapshot(), H._fused_snapshot())

    def launches(k, name):
        ops, fused = marks.pop(name, ({}, {}))
        launched[k] = (H._delta(H._snapshot(), ops), H._delta(H._fused_snapshot(), fused))

    for name, mod in s.net.named_modules():
        if not name:
            continue
        kinds[name] = type(mod).__name__

        def on_forward(m, i, o, name=name):
            t = _first_tensor(o)
            if t is not None and t.is_floating_point():
                k = key(calls, name)
                fwd.append((k, _np(t)))
                launches(("forward", k), name)

        def on_backward(m, gin, gout, name=name):
            t = _first_tensor(gin)
            if t is not None:
                k = key(bcalls, name)
                bwd.append((k, _np(t)))
                launches(("backward", k), "grad:" + name)

        handles.append(mod.register_forward_pre_hook(lambda m, i, name=name: mark(name)))
        handles.append(mod.register_forward_hook(on_forward))
        if not inference:
            handles.append(mod.register_full_backward_pre_hook(
                lambda m, g, name=name: mark("grad:" + name)))
            handles.append(mod.register_full_backward_hook(on_backward))
    try:
        if inference:
            s.net.eval()
            with torch.no_grad():
                s.forward()
        else:
            import warnings
            with warnings.catch_warnings():  # hooks on modules whose inputs need no grad
                warnings.simplefilter("ignore")
                s.loss(s.forward()).backward()
    finally:
        for h in handles:
            h.remove()
    return {"forward": fwd, "backward": bwd, "launched": launched, "kinds": kinds}


def reference_modules(name, dtype, inference):
    """The reference side of the module comparison (torch's CPU): the float64
    trace and the correct ``dtype`` run's."""
    model = get(name)
    return {"ref": trace(model, "cpu", "float64", inference),
            "correct": trace(model, "cpu", dtype, inference), "inference": inference}


def localise(model, device, dtype, reference, only=None):
    """Rows comparing the plugin's module outputs (then input gradients) with
    ``reference`` (from :func:`reference_modules`), in execution order, and
    the first over its bound. ``only``: one module name (the replay)."""
    got = trace(model, device, dtype, reference["inference"])
    rows = []
    for direction, what in (("forward", "output"), ("backward", "grad:input")):
        ref, cor = dict(reference["ref"][direction]), dict(reference["correct"][direction])
        mine = dict(got[direction])
        scales = H.grad_scales(ref) if direction == "backward" else {}
        for k, r in reference["ref"][direction]:
            if only is not None and k.split("#")[0] != only:
                continue
            c = H.check(what, mine.get(k, np.nan), cor.get(k, np.nan), r, dtype, scales.get(k, 0.0))
            ops, fused = got["launched"].get((direction, k), ({}, {}))
            rows.append({"layer": k, "kind": got["kinds"].get(k.split("#")[0], "module"),
                         "direction": direction, **c, "base_ops": dict(sorted(ops.items())),
                         "fused_kernels": fused})
    first = next((r for r in rows if not r["ok"]), None)
    worst = max(rows, key=lambda r: r["ratio"]) if rows else None
    return {"rows": rows, "first": first, "worst": worst, "inference": reference["inference"]}

