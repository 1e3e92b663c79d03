"""The zoo's GPT-2-style model written twice, in DeviceKit and in PyTorch, from
the same weights and batch: what bench_models.py and bench_gpt_speed.py time.

The DeviceKit side is the model-regression harness's own forward (so the
benchmark times what the goldens check); the PyTorch side is the same
computation written as a PyTorch user would (F.scaled_dot_product_attention
on the permuted q/k/v views, torch.optim.AdamW).

Both sides run float32 or bfloat16. DeviceKit's bfloat16 is the harness's
mixed precision (float32 master weights and AdamW state, each forward casts
them to bfloat16, the loss in float32). PyTorch's has two forms a user would
pick from (TORCH_BF16): ``autocast`` (float32 weights, the forward under
``torch.autocast("cpu", dtype=torch.bfloat16)``, the same recipe as
DeviceKit's) and ``weights`` (the weights themselves in bfloat16, AdamW on
them; less work per step, as a speed yardstick).
"""

import devicekit as dk
from devicekit.models import harness as H
from devicekit.optim import AdamW


class _Trainer:
    """The training step both sides share; each defines ``loss()`` and ``opt``."""

    def step(self):
        """One training step: forward, loss, backward, AdamW. Returns the loss tensor."""
        self.opt.zero_grad()
        loss = self.loss()
        loss.backward()
        self.opt.step()
        return loss


TORCH_BF16 = ("autocast", "weights")  # PyTorch's two bfloat16 forms (see above)


class DeviceKitGPT(_Trainer):
    def __init__(self, model, device="cpu:0", lr=H.LR, weight_decay=H.WEIGHT_DECAY,
                 dtype="float32"):
        self.model, self.dtype = model, dtype
        self.master = H.master_params(model, device, dtype)
        self.inp = H.device_inputs(model, device, dtype)
        self.opt = AdamW(self.master.parameters(), lr=lr, weight_decay=weight_decay)

    def loss(self):
        return H.loss_of(H.forward(self.model, self.master, self.inp, self.dtype), self.inp)

    def infer(self):
        with dk.no_grad():
            return H.forward(self.model, self.master, self.inp, self.dtype)


class TorchGPT(_Trainer):
    """``bf16``: None (float32) or one of TORCH_BF16."""

    def __init__(self, model, lr=H.LR, weight_decay=H.WEIGHT_DECAY, bf16=None):
        import contextlib

        import torch
        assert bf16 in (None,) + TORCH_BF16, bf16
        self.torch, self.F, self.c = torch, torch.nn.functional, model.config
        wdt = torch.bfloat16 if bf16 == "weights" else torch.float32
        self.p = {n: torch.tensor(a, dtype=torch.float32).to(wdt).requires_grad_()
                  for n, a in model.init_params().items()}
        self.autocast = ((lambda: torch.autocast("cpu", dtype=torch.bfloat16))
                         if bf16 == "autocast" else contextlib.nullcontext)
        self.data = {k: torch.tensor(v) for k, v in model.make_data().items()}
        self.opt = torch.optim.AdamW(list(self.p.values()), lr=lr, weight_decay=weight_decay)

    def forward(self):
        F, tp, data = self.F, self.p, self.data
        b, n, d, h = self.c.batch, self.c.seq, self.c.dim, self.c.heads
        x = F.embedding(data["ids"], tp["wte"]) + F.embedding(data["positions"], tp["wpe"])
        for i in range(self.c.layers):
            p = lambda s, i=i: tp[f"block{i}.{s}"]  # noqa: E731 (a local shorthand)
            y = F.layer_norm(x, (d,), p("attn.ln.weight"), p("attn.ln.bias"))
            q, k, v = F.linear(y, p("attn.qkv.weight"), p("attn.qkv.bias")).split(d, -1)
            q, k, v = (t.reshape(b, n, h, d // h).transpose(1, 2) for t in (q, k, v))
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, n, d)
            x = x + F.linear(a, p("attn.proj.weight"), p("attn.proj.bias"))
            y = F.layer_norm(x, (d,), p("mlp.ln.weight"), p("mlp.ln.bias"))
            y = F.gelu(F.linear(y, p("mlp.fc.weight"), p("mlp.fc.bias")), approximate="tanh")
            x = x + F.linear(y, p("mlp.proj.weight"), p("mlp.proj.bias"))
        return F.linear(F.layer_norm(x, (d,), tp["ln_f.weight"], tp["ln_f.bias"]), tp["wte"])

    def loss(self):
        with self.autocast():
            logits = self.forward()
        logits = logits.float()  # the loss in float32, as DeviceKit's harness does
        return self.F.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                    self.data["targets"].reshape(-1))

    def infer(self):
        with self.torch.no_grad(), self.autocast():
            return self.forward()


class FunctionalGPT(_Trainer):
    """The same GPT-2 computation written as a user of ``devicekit.nn.functional``
    would write it without the model harness or ``devicekit.optim``: a dict of
    leaf tensors, the blocks spelled out with ``F.linear``, ``F.layer_norm``,
    ``F.gelu`` and ``F.scaled_dot_product_attention`` on reshaped/transposed
    q/k/v, the LM head tied to the token embedding, ``F.cross_entropy``, and
    one ``F.adamw_step`` per parameter (the user keeps the moments)."""

    def __init__(self, model, device="cpu:0", lr=H.LR, weight_decay=H.WEIGHT_DECAY,
                 dtype="float32"):
        import numpy as np
        assert dtype == "float32", "the functional style runs float32 only"
        self.c, self.lr, self.wd = model.config, lr, weight_decay
        self.p = {n: dk.tensor(np.asarray(a, np.float32), device=device, requires_grad=True)
                  for n, a in model.init_params().items()}
        self.data = {k: dk.tensor(v, device=device) for k, v in model.make_data().items()}
        self.moments = {n: (dk.zeros(*t.shape, device=device), dk.zeros(*t.shape, device=device))
                        for n, t in self.p.items()}
        self.steps = 0

    def forward(self):
        import devicekit.nn.functional as F
        tp, data = self.p, self.data
        b, n, d, h = self.c.batch, self.c.seq, self.c.dim, self.c.heads
        x = F.embedding(data["ids"], tp["wte"]) + F.embedding(data["positions"], tp["wpe"])
        for i in range(self.c.layers):
            p = lambda s, i=i: tp[f"block{i}.{s}"]  # noqa: E731 (a local shorthand)
            y = F.layer_norm(x, p("attn.ln.weight"), p("attn.ln.bias"))
            q, k, v = F.linear(y, p("attn.qkv.weight"), p("attn.qkv.bias")).split(d, dim=-1)
            q, k, v = (t.reshape(b, n, h, d // h).transpose(1, 2) for t in (q, k, v))
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, n, d)
            x = x + F.linear(a, p("attn.proj.weight"), p("attn.proj.bias"))
            y = F.layer_norm(x, p("mlp.ln.weight"), p("mlp.ln.bias"))
            y = F.gelu(F.linear(y, p("mlp.fc.weight"), p("mlp.fc.bias")), approximate="tanh")
            x = x + F.linear(y, p("mlp.proj.weight"), p("mlp.proj.bias"))
        return F.linear(F.layer_norm(x, tp["ln_f.weight"], tp["ln_f.bias"]), tp["wte"])

    def loss(self):
        import devicekit.nn.functional as F
        logits = self.forward()
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), self.data["targets"].reshape(-1))

    def step(self):
        import devicekit.nn.functional as F
        loss = self.loss()
        loss.backward()
        self.steps += 1
        for name, t in self.p.items():
            m, v = self.moments[name]
            new, m, v = F.adamw_step(t, t.grad, m, v, self.steps, self.lr, weight_decay=self.wd)
            self.moments[name] = (m, v)
            self.p[name] = new.detach().requires_grad_()
        return loss

    def infer(self):
        with dk.no_grad():
            return self.forward()


class HFGPT(_Trainer):
    """Hugging Face's ``GPT2LMHeadModel`` at a zoo config's size (dropout off,
    its tied LM head and its own loss), ``torch.optim.AdamW``, on ``device``:
    ``"dk:0"`` runs it through ``devicekit.torch`` (the bridge), ``"cpu"`` is
    torch eager on the same code. Both sides start from the same weights
    (torch's seed 0) and batch; float32 only."""

    def __init__(self, model, device, lr=H.LR, weight_decay=H.WEIGHT_DECAY):
        import torch
        import transformers
        if device.startswith("dk"):
            import devicekit.torch  # noqa: F401 (registers the dk device)
        transformers.logging.set_verbosity_error()
        c = model.config
        torch.manual_seed(0)
        self.model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
            n_layer=c.layers, n_embd=c.dim, n_head=c.heads, n_positions=c.seq,
            vocab_size=c.vocab, bos_token_id=0, eos_token_id=0, resid_pdrop=0.0,
            embd_pdrop=0.0, attn_pdrop=0.0)).to(device)
        self.torch = torch
        data = model.make_data()
        self.batch = {"input_ids": torch.tensor(data["ids"]).to(device),
                      "labels": torch.tensor(data["ids"]).to(device)}
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=lr, weight_decay=weight_decay)

    def loss(self):
        return self.model(**self.batch).loss

    def infer(self):
        with self.torch.no_grad():
            return self.model(**self.batch).logits
