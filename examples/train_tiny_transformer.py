"""A Llama-style transformer block trained for a few AdamW steps on the
reference CPU plugin: embedding, rms_norm, causal grouped-query attention with
rotary embeddings, a SwiGLU MLP and cross-entropy, forward and backward.

Everything above the plugin's 43 base ops (the composites, their gradients)
comes from the SDK. The task is next-token prediction on a repeating
sequence, so the loss must fall; the script fails if it does not. At the end it
prints which composite calls ran a fused kernel and which were decomposed
(while gradients are recorded, composites run their decomposition).
"""

import math

import numpy as np

import devicekit as dk
import devicekit.nn.functional as F

VOCAB, DIM, HEADS, KV_HEADS, SEQ, BATCH, STEPS = 16, 32, 4, 2, 24, 4, 30
HEAD = DIM // HEADS
DEV = "cpu:0"
rng = np.random.default_rng(0)


def param(*shape, scale=None):
    scale = 1.0 / math.sqrt(shape[-1]) if scale is None else scale
    return dk.tensor((rng.standard_normal(shape) * scale).astype(np.float32), device=DEV)


params = dk.nn.ParameterDict({   # what the optimizer updates (and keeps state for)
    "embed": param(VOCAB, DIM, scale=0.5), "norm1": dk.ones(DIM, device=DEV),
    "wq": param(DIM, DIM), "wk": param(KV_HEADS * HEAD, DIM), "wv": param(KV_HEADS * HEAD, DIM),
    "wo": param(DIM, DIM), "norm2": dk.ones(DIM, device=DEV),
    "w_gate_up": param(4 * DIM, DIM), "w_down": param(DIM, 2 * DIM), "head": param(VOCAB, DIM),
})

# Rotary tables (rotate-half convention): [SEQ, HEAD].
inv = 1.0 / 10000 ** (np.arange(0, HEAD, 2) / HEAD)
ang = np.outer(np.arange(SEQ), inv)
ang = np.concatenate([ang, ang], axis=1)
cos = dk.tensor(np.cos(ang).astype(np.float32), device=DEV)
sin = dk.tensor(np.sin(ang).astype(np.float32), device=DEV)


def heads(x, n):  # [B, S, n*HEAD] -> [B, n, S, HEAD], dense: the CPU fused kernels take dense inputs
    return x.reshape(BATCH, SEQ, n, HEAD).permute(0, 2, 1, 3).contiguous()


def forward(p, ids):
    x = F.embedding(ids, p["embed"])                                  # [B, S, D]
    h = F.rms_norm(x, p["norm1"])
    q = F.rotary_embedding(heads(F.linear(h, p["wq"]), HEADS), cos, sin)
    k = F.rotary_embedding(heads(F.linear(h, p["wk"]), KV_HEADS), cos, sin)
    v = heads(F.linear(h, p["wv"]), KV_HEADS)
    a = F.scaled_dot_product_attention(q, k, v, is_causal=True)      # grouped-query heads
    x = x + F.linear(a.transpose(1, 2).flatten(2), p["wo"])
    x = x + F.linear(F.swiglu(F.linear(F.rms_norm(x, p["norm2"]), p["w_gate_up"])), p["w_down"])
    return F.linear(x, p["head"])                                     # [B, S, VOCAB]


# Next-token prediction on sequences counting upward mod VOCAB from random starts.
starts = rng.integers(0, VOCAB, BATCH)
tokens = (starts[:, None] + np.arange(SEQ + 1)[None, :]) % VOCAB
ids = dk.tensor(tokens[:, :-1].astype(np.int64), device=DEV)
target = dk.tensor(tokens[:, 1:].reshape(-1).astype(np.int64), device=DEV)

opt = dk.optim.AdamW(params.parameters(), lr=1e-2, weight_decay=0.0)
losses = []
for step in range(1, STEPS + 1):
    logits = forward(params, ids)
    loss = F.cross_entropy(logits.reshape(BATCH * SEQ, VOCAB), target)
    opt.zero_grad()
    loss.backward()
    opt.step()
    losses.append(loss.item())
    if step == 1 or step % 10 == 0:
        print(f"step {step:3d}  loss {losses[-1]:.4f}")

assert losses[-1] < 0.5 * losses[0], f"loss did not fall: {losses[0]:.4f} -> {losses[-1]:.4f}"

with dk.no_grad():  # inference: the fused kernels the plugin registers take over
    dk.reset_composite_stats()
    pred = forward(params, ids)
    accuracy = (pred.reshape(BATCH * SEQ, VOCAB).argmax(dim=1) == target).numpy().mean()
print(f"next-token accuracy after {STEPS} steps: {accuracy:.2f}")
for op, s in sorted(dk.composite_stats().items()):
    print(f"  {op:30s} fused {s['fused']}  decomposed {s['decomposed']}")
print("OK")
