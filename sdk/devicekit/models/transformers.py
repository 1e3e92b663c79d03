"""The transformer models of the zoo, each shaped like its original: a
GPT-2-style decoder, a Llama-style decoder, a BERT-style encoder and a
ViT-style image encoder, written only with ``devicekit.nn.functional`` and
``devicekit.ops``.

Layer boundaries: ``embed``, then per block ``block{i}.attn`` (norm,
attention and its residual add) and ``block{i}.mlp`` (norm, MLP and its
residual add), then ``head``. Sizes keep real head dims (32, 64), several
layers and heads, and vocabularies that are not powers of two, at a batch
small enough for the whole suite to run in about a minute on 2 CPU cores.
"""

import math
from dataclasses import dataclass
from functools import partial

import numpy as np

from .. import ops
from ..nn import functional as F
from .base import Layer, Model, integers, normal


def _split_heads(x, heads, head_dim):
    """[B, L, heads*head_dim] -> [B, heads, L, head_dim], a permuted view (rows
    unit-stride), as attention code writes it: a fused attention kernel may
    read such views in place (the reference CPU plugin's does); otherwise the
    decomposition runs on them. ``reshape``, not ``view``: a piece of
    ``qkv.split`` is strided, and DeviceKit's ``view`` takes only contiguous
    tensors; ``reshape`` gives a view of the piece too (splitting its last,
    unit-stride dim), so no copy is made."""
    b, n, _ = x.shape
    return x.reshape(b, n, heads, head_dim).transpose(1, 2)


def _merge_heads(x):
    """[B, heads, L, head_dim] -> [B, L, heads*head_dim]."""
    return x.transpose(1, 2).flatten(2)


def _linear(p, x, name):
    """The linear layer whose parameters are ``name.weight`` and ``name.bias``."""
    return F.linear(x, p[name + ".weight"], p[name + ".bias"])


def _layer_norm(p, x, name, eps):
    return F.layer_norm(x, p[name + ".weight"], p[name + ".bias"], eps=eps)


def _lm_data(c, seed):
    """Token ids [B, L+1] -> inputs [B, L] and next-token targets [B, L]."""
    tokens = integers((c.batch, c.seq + 1), seed, "data.tokens", c.vocab)
    return {"ids": tokens[:, :-1].copy(), "targets": tokens[:, 1:].copy()}


def _block_params(names, i):
    return {kind: tuple(n for n in names if n.startswith(f"block{i}.{kind}")) for kind in ("attn", "mlp")}


# ---- GPT-2 ------------------------------------------------------------------

@dataclass(frozen=True)
class GPT2Config:
    vocab: int = 383          # not a power of two, like GPT-2's 50257
    seq: int = 32
    dim: int = 128
    heads: int = 4            # head dim 32
    layers: int = 3
    batch: int = 4
    seed: int = 1103


class GPT2(Model):
    """Learned positions, pre-LayerNorm blocks, fused qkv projection, causal
    attention, tanh-GELU MLP (4x), final LayerNorm, LM head tied to the token
    embedding; next-token cross-entropy."""

    name = "gpt2"
    title = "GPT-2-style decoder (learned positions, LayerNorm, GELU, causal attention, tied embeddings)"

    def param_specs(self):
        c, d = self.config, self.config.dim
        proj_std = 0.02 / math.sqrt(2 * c.layers)  # GPT-2's scaled init of residual projections
        s = {"wte": ((c.vocab, d), ("normal", 0.02)), "wpe": ((c.seq, d), ("normal", 0.01))}
        for i in range(c.layers):
            b = f"block{i}"
            s.update({
                f"{b}.attn.ln.weight": ((d,), ("ones",)), f"{b}.attn.ln.bias": ((d,), ("zeros",)),
                f"{b}.attn.qkv.weight": ((3 * d, d), ("normal", 0.02)),
                f"{b}.attn.qkv.bias": ((3 * d,), ("zeros",)),
                f"{b}.attn.proj.weight": ((d, d), ("normal", proj_std)),
                f"{b}.attn.proj.bias": ((d,), ("zeros",)),
                f"{b}.mlp.ln.weight": ((d,), ("ones",)), f"{b}.mlp.ln.bias": ((d,), ("zeros",)),
                f"{b}.mlp.fc.weight": ((4 * d, d), ("normal", 0.02)),
                f"{b}.mlp.fc.bias": ((4 * d,), ("zeros",)),
                f"{b}.mlp.proj.weight": ((d, 4 * d), ("normal", proj_std)),
                f"{b}.mlp.proj.bias": ((d,), ("zeros",)),
            })
        s["ln_f.weight"], s["ln_f.bias"] = ((d,), ("ones",)), ((d,), ("zeros",))
        return s

    def make_data(self):
        c = self.config
        data = _lm_data(c, c.seed)
        data["positions"] = np.broadcast_to(np.arange(c.seq), (c.batch, c.seq)).copy()
        return data

    def layers(self):
        c = self.config
        hd = c.dim // c.heads
        names = list(self.param_specs())

        def embed(p, x, inp):
            return F.embedding(inp["ids"], p["wte"]) + F.embedding(inp["positions"], p["wpe"])

        def attn(i):
            b = f"block{i}.attn"

            def fn(p, x, inp):
                h = F.layer_norm(x, p[f"{b}.ln.weight"], p[f"{b}.ln.bias"])
                qkv = F.linear(h, p[f"{b}.qkv.weight"], p[f"{b}.qkv.bias"])
                q, k, v = (_split_heads(t, c.heads, hd) for t in qkv.split(c.dim, dim=2))
                a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                return x + F.linear(_merge_heads(a), p[f"{b}.proj.weight"], p[f"{b}.proj.bias"])
            return fn

        def mlp(i):
            b = f"block{i}.mlp"

            def fn(p, x, inp):
                h = F.layer_norm(x, p[f"{b}.ln.weight"], p[f"{b}.ln.bias"])
                h = F.gelu(F.linear(h, p[f"{b}.fc.weight"], p[f"{b}.fc.bias"]), approximate="tanh")
                return x + F.linear(h, p[f"{b}.proj.weight"], p[f"{b}.proj.bias"])
            return fn

        def head(p, x, inp):
            return F.linear(F.layer_norm(x, p["ln_f.weight"], p["ln_f.bias"]), p["wte"])

        out = [Layer("embed", embed, ("wte", "wpe"), "embedding+positions")]
        for i in range(c.layers):
            ps = _block_params(names, i)
            out.append(Layer(f"block{i}.attn", attn(i), ps["attn"], "layer_norm+causal attention"))
            out.append(Layer(f"block{i}.mlp", mlp(i), ps["mlp"], "layer_norm+gelu mlp"))
        out.append(Layer("head", head, ("ln_f.weight", "ln_f.bias", "wte"),
                         "layer_norm+tied lm head"))
        return out


# ---- Llama ------------------------------------------------------------------

@dataclass(frozen=True)
class LlamaConfig:
    vocab: int = 317
    seq: int = 32
    dim: int = 128
    heads: int = 4            # head dim 32
    kv_heads: int = 2         # grouped-query attention: 2 query heads per k/v head
    hidden: int = 256         # SwiGLU width
    layers: int = 3
    rope_base: float = 10000.0
    batch: int = 4
    seed: int = 1104


def rotary_tables(seq, head_dim, base):
    """cos, sin [seq, head_dim] in the rotate-half convention (float64)."""
    inv = 1.0 / base ** (np.arange(0, head_dim, 2) / head_dim)
    ang = np.outer(np.arange(seq), inv)
    ang = np.concatenate([ang, ang], axis=1)
    return np.cos(ang), np.sin(ang)


class Llama(Model):
    """RMSNorm pre-norm blocks, rotary embeddings, grouped-query causal
    attention without biases, SwiGLU MLP, final RMSNorm, untied LM head."""

    name = "llama"
    title = "Llama-style decoder (RMSNorm, rotary, grouped-query attention, SwiGLU)"

    def param_specs(self):
        c, d = self.config, self.config.dim
        hd = d // c.heads
        s = {"embed": ((c.vocab, d), ("normal", 0.02))}
        for i in range(c.layers):
            b = f"block{i}"
            s.update({
                f"{b}.attn.norm": ((d,), ("ones",)),
                f"{b}.attn.wq": ((d, d), ("normal", 0.02)),
                f"{b}.attn.wk": ((c.kv_heads * hd, d), ("normal", 0.02)),
                f"{b}.attn.wv": ((c.kv_heads * hd, d), ("normal", 0.02)),
                f"{b}.attn.wo": ((d, d), ("normal", 0.02 / math.sqrt(2 * c.layers))),
                f"{b}.mlp.norm": ((d,), ("ones",)),
                f"{b}.mlp.w_gate_up": ((2 * c.hidden, d), ("normal", 0.02)),
                f"{b}.mlp.w_down": ((d, c.hidden), ("normal", 0.02 / math.sqrt(2 * c.layers))),
            })
        s["norm"] = ((d,), ("ones",))
        s["lm_head"] = ((c.vocab, d), ("normal", 0.02))
        return s

    def make_data(self):
        c = self.config
        data = _lm_data(c, c.seed)
        data["cos"], data["sin"] = rotary_tables(c.seq, c.dim // c.heads, c.rope_base)
        return data

    def layers(self):
        c = self.config
        hd = c.dim // c.heads
        names = list(self.param_specs())

        def embed(p, x, inp):
            return F.embedding(inp["ids"], p["embed"])

        def attn(i):
            b = f"block{i}.attn"

            def fn(p, x, inp):
                h = F.rms_norm(x, p[f"{b}.norm"])
                q = F.rotary_embedding(_split_heads(F.linear(h, p[f"{b}.wq"]), c.heads, hd),
                                       inp["cos"], inp["sin"])
                k = F.rotary_embedding(_split_heads(F.linear(h, p[f"{b}.wk"]), c.kv_heads, hd),
                                       inp["cos"], inp["sin"])
                v = _split_heads(F.linear(h, p[f"{b}.wv"]), c.kv_heads, hd)
                a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                return x + F.linear(_merge_heads(a), p[f"{b}.wo"])
            return fn

        def mlp(i):
            b = f"block{i}.mlp"

            def fn(p, x, inp):
                h = F.rms_norm(x, p[f"{b}.norm"])
                return x + F.linear(F.swiglu(F.linear(h, p[f"{b}.w_gate_up"])), p[f"{b}.w_down"])
            return fn

        def head(p, x, inp):
            return F.linear(F.rms_norm(x, p["norm"]), p["lm_head"])

        out = [Layer("embed", embed, ("embed",), "embedding")]
        for i in range(c.layers):
            ps = _block_params(names, i)
            out.append(Layer(f"block{i}.attn", attn(i), ps["attn"],
                             "rms_norm+rotary+grouped-query causal attention"))
            out.append(Layer(f"block{i}.mlp", mlp(i), ps["mlp"], "rms_norm+swiglu mlp"))
        out.append(Layer("head", head, ("norm", "lm_head"), "rms_norm+lm head"))
        return out


# ---- BERT-style encoder -----------------------------------------------------

@dataclass(frozen=True)
class EncoderConfig:
    vocab: int = 263
    seq: int = 24
    dim: int = 128
    heads: int = 2            # head dim 64
    layers: int = 2
    classes: int = 5
    lengths: tuple = (24, 17, 9, 20)  # the batch; shorter sequences are padded
    pad_id: int = 0
    seed: int = 1105


class Encoder(Model):
    """BERT-style: token + learned position embeddings and LayerNorm,
    post-LN blocks with bidirectional attention under a padding mask (padded
    keys are invisible), GELU MLP, a tanh pooler over the first token and a
    classifier; sequence-classification cross-entropy."""

    name = "encoder"
    title = "BERT-style encoder (bidirectional attention, padding mask, post-LayerNorm)"

    def param_specs(self):
        c, d = self.config, self.config.dim
        s = {"tok": ((c.vocab, d), ("normal", 0.02)), "pos": ((c.seq, d), ("normal", 0.02)),
             "emb_ln.weight": ((d,), ("ones",)), "emb_ln.bias": ((d,), ("zeros",))}
        for i in range(c.layers):
            b = f"block{i}"
            for part, shape in (("attn.q", (d, d)), ("attn.k", (d, d)), ("attn.v", (d, d)),
                                ("attn.o", (d, d)), ("mlp.fc", (4 * d, d)), ("mlp.proj", (d, 4 * d))):
                s[f"{b}.{part}.weight"] = (shape, ("normal", 0.02))
                s[f"{b}.{part}.bias"] = ((shape[0],), ("zeros",))
            for part in ("attn.ln", "mlp.ln"):
                s[f"{b}.{part}.weight"], s[f"{b}.{part}.bias"] = ((d,), ("ones",)), ((d,), ("zeros",))
        s["pooler.weight"], s["pooler.bias"] = ((d, d), ("normal", 0.02)), ((d,), ("zeros",))
        s["cls.weight"], s["cls.bias"] = ((c.classes, d), ("normal", 0.02)), ((c.classes,), ("zeros",))
        return s

    def make_data(self):
        c = self.config
        b = len(c.lengths)
        ids = 1 + integers((b, c.seq), c.seed, "data.tokens", c.vocab - 1)  # 0 is the pad id
        valid = np.arange(c.seq)[None, :] < np.array(c.lengths)[:, None]
        ids = np.where(valid, ids, c.pad_id)
        return {"ids": ids, "positions": np.broadcast_to(np.arange(c.seq), (b, c.seq)).copy(),
                "key_mask": valid[:, None, None, :].copy(),  # [B, 1, 1, L]: True = attend
                "targets": integers((b,), c.seed, "data.targets", c.classes)}

    def layers(self):
        c = self.config
        hd = c.dim // c.heads
        names = list(self.param_specs())

        lin, ln = _linear, partial(_layer_norm, eps=1e-12)  # BERT's epsilon

        def embed(p, x, inp):
            h = F.embedding(inp["ids"], p["tok"]) + F.embedding(inp["positions"], p["pos"])
            return ln(p, h, "emb_ln")

        def attn(i):
            b = f"block{i}.attn"

            def fn(p, x, inp):
                q, k, v = (_split_heads(lin(p, x, f"{b}.{n}"), c.heads, hd) for n in "qkv")
                a = F.scaled_dot_product_attention(q, k, v, attn_mask=inp["key_mask"])
                return ln(p, x + lin(p, _merge_heads(a), f"{b}.o"), f"{b}.ln")
            return fn

        def mlp(i):
            b = f"block{i}.mlp"

            def fn(p, x, inp):
                h = lin(p, F.gelu(lin(p, x, f"{b}.fc")), f"{b}.proj")
                return ln(p, x + h, f"{b}.ln")
            return fn

        def head(p, x, inp):
            pooled = ops.tanh(lin(p, x[:, 0], "pooler"))  # the first ([CLS]) token
            return lin(p, pooled, "cls")

        out = [Layer("embed", embed, ("tok", "pos", "emb_ln.weight", "emb_ln.bias"),
                     "embedding+positions+layer_norm")]
        for i in range(c.layers):
            ps = _block_params(names, i)
            out.append(Layer(f"block{i}.attn", attn(i), ps["attn"],
                             "bidirectional attention (padding mask)+layer_norm"))
            out.append(Layer(f"block{i}.mlp", mlp(i), ps["mlp"], "gelu mlp+layer_norm"))
        out.append(Layer("head", head, ("pooler.weight", "pooler.bias", "cls.weight", "cls.bias"),
                         "tanh pooler+classifier"))
        return out


# ---- ViT-style encoder --------------------------------------------------------

@dataclass(frozen=True)
class ViTConfig:
    channels: int = 3
    size: int = 16
    patch: int = 4            # 16 patches + the class token = 17 tokens (not a power of two)
    dim: int = 128
    heads: int = 2            # head dim 64
    layers: int = 2
    classes: int = 10
    batch: int = 8
    seed: int = 1106


class ViT(Model):
    """ViT (Dosovitskiy et al.): a patch-embedding conv (kernel = stride =
    patch), a learned class token prepended, learned positions, pre-LayerNorm
    blocks with bidirectional attention (no mask: every patch sees every
    patch) and an erf-GELU MLP, a final LayerNorm and a linear head on the
    class token; image-classification cross-entropy."""

    name = "vit"
    title = "ViT-style encoder (patch-embedding conv, class token, pre-LayerNorm, bidirectional attention)"

    def param_specs(self):
        c, d = self.config, self.config.dim
        tokens = (c.size // c.patch) ** 2 + 1
        fan_in = c.channels * c.patch * c.patch
        s = {"patch.weight": ((d, c.channels, c.patch, c.patch), ("normal", 1.0 / math.sqrt(fan_in))),
             "patch.bias": ((d,), ("zeros",)), "cls_token": ((1, 1, d), ("normal", 0.02)),
             "pos": ((tokens, d), ("normal", 0.02))}
        for i in range(c.layers):
            b = f"block{i}"
            for part, shape in (("attn.qkv", (3 * d, d)), ("attn.proj", (d, d)),
                                ("mlp.fc", (4 * d, d)), ("mlp.proj", (d, 4 * d))):
                s[f"{b}.{part}.weight"] = (shape, ("normal", 0.02))
                s[f"{b}.{part}.bias"] = ((shape[0],), ("zeros",))
            for part in ("attn.ln", "mlp.ln"):
                s[f"{b}.{part}.weight"], s[f"{b}.{part}.bias"] = ((d,), ("ones",)), ((d,), ("zeros",))
        s["norm.weight"], s["norm.bias"] = ((d,), ("ones",)), ((d,), ("zeros",))
        s["head.weight"], s["head.bias"] = ((c.classes, d), ("normal", 0.02)), ((c.classes,), ("zeros",))
        return s

    def make_data(self):
        c = self.config
        return {"images": normal((c.batch, c.channels, c.size, c.size), c.seed, "data.images"),
                "targets": integers((c.batch,), c.seed, "data.targets", c.classes)}

    def layers(self):
        c = self.config
        hd = c.dim // c.heads
        names = list(self.param_specs())

        lin, ln = _linear, partial(_layer_norm, eps=1e-6)  # ViT's epsilon

        def embed(p, x, inp):
            x = F.conv2d(inp["images"], p["patch.weight"], p["patch.bias"], stride=c.patch)
            x = x.flatten(2).transpose(1, 2)                     # [B, patches, D]
            cls = p["cls_token"].expand(x.shape[0], -1, -1)
            return ops.cat([cls, x], dim=1) + p["pos"]

        def attn(i):
            b = f"block{i}.attn"

            def fn(p, x, inp):
                qkv = lin(p, ln(p, x, f"{b}.ln"), f"{b}.qkv")
                q, k, v = (_split_heads(t, c.heads, hd) for t in qkv.chunk(3, dim=-1))
                a = F.scaled_dot_product_attention(q, k, v)
                return x + lin(p, _merge_heads(a), f"{b}.proj")
            return fn

        def mlp(i):
            b = f"block{i}.mlp"

            def fn(p, x, inp):
                h = F.gelu(lin(p, ln(p, x, f"{b}.ln"), f"{b}.fc"))
                return x + lin(p, h, f"{b}.proj")
            return fn

        def head(p, x, inp):
            return lin(p, ln(p, x, "norm")[:, 0], "head")  # the class token

        out = [Layer("embed", embed, ("patch.weight", "patch.bias", "cls_token", "pos"),
                     "patch-embedding conv2d+class token+positions")]
        for i in range(c.layers):
            ps = _block_params(names, i)
            out.append(Layer(f"block{i}.attn", attn(i), ps["attn"],
                             "layer_norm+bidirectional attention"))
            out.append(Layer(f"block{i}.mlp", mlp(i), ps["mlp"], "layer_norm+gelu mlp"))
        out.append(Layer("head", head, ("norm.weight", "norm.bias", "head.weight", "head.bias"),
                         "layer_norm+classifier on the class token"))
        return out
