"""The MLP classifier and the CNN (conv2d, pooling, batch norm, ResNet basic
blocks), written only with ``devicekit.nn.functional`` and ``devicekit.ops``."""

import math
from dataclasses import dataclass

from .. import ops
from ..autograd import is_grad_enabled, no_grad
from ..nn import functional as F
from .base import HALF, Layer, Model, integers, normal


@dataclass(frozen=True)
class MLPConfig:
    features: int = 96
    hidden: tuple = (192, 192, 160)
    classes: int = 10
    batch: int = 64
    seed: int = 1101


class MLP(Model):
    """x -> [linear -> GELU] * len(hidden) -> linear -> logits."""

    name = "mlp"
    title = "MLP classifier (GELU)"

    def param_specs(self):
        c, specs, fan_in = self.config, {}, self.config.features
        for i, width in enumerate((*c.hidden, c.classes)):
            tag = f"fc{i}" if i < len(c.hidden) else "head"
            specs[f"{tag}.weight"] = ((width, fan_in), ("normal", 1.0 / math.sqrt(fan_in)))
            specs[f"{tag}.bias"] = ((width,), ("normal", 0.02))
            fan_in = width
        return specs

    def make_data(self):
        c = self.config
        return {"features": normal((c.batch, c.features), c.seed, "data.features"),
                "targets": integers((c.batch,), c.seed, "data.targets", c.classes)}

    def layers(self):
        def hidden(tag, first):
            def fn(p, x, inp):
                x = inp["features"] if first else x
                return F.gelu(F.linear(x, p[f"{tag}.weight"], p[f"{tag}.bias"]))
            return Layer(tag, fn, (f"{tag}.weight", f"{tag}.bias"), "linear+gelu")

        out = [hidden(f"fc{i}", i == 0) for i in range(len(self.config.hidden))]
        out.append(Layer("head", lambda p, x, inp: F.linear(x, p["head.weight"], p["head.bias"]),
                         ("head.weight", "head.bias"), "linear"))
        return out


@dataclass(frozen=True)
class CNNConfig:
    channels: int = 3
    size: int = 16
    width: int = 16
    classes: int = 10
    batch: int = 8
    bn_momentum: float = 0.1  # torch.nn.BatchNorm2d's default
    seed: int = 1102


def batch_norm(x, weight, bias, running_mean, running_var, momentum, eps=1e-5):
    """Batch norm over (N, H, W) of NCHW ``x``, as ``torch.nn.BatchNorm2d``.

    While gradients are recorded (a training forward): the batch mean and
    biased variance normalise, and the running statistics (float32 or
    float64 tensors in a dict, ``(dict, key)`` pairs here) move toward the
    batch's mean and *unbiased* variance by ``momentum``. Under ``no_grad``
    (the inference phase): the running statistics normalise. float16/bfloat16
    are normalised in float32, like autocast does."""
    xf = x.to("float32") if str(x.dtype) in HALF else x
    (store, mean_key), (_, var_key) = running_mean, running_var
    if is_grad_enabled():
        mean = xf.mean(dim=(0, 2, 3), keepdim=True)
        d = xf - mean
        var = (d * d).mean(dim=(0, 2, 3), keepdim=True)
        y = d * ops.rsqrt(var + eps)
        with no_grad():
            n = x.numel() // x.shape[1]
            rm, rv = store[mean_key], store[var_key]
            batch_mean = mean.flatten().to(rm.dtype)
            batch_var = var.flatten().to(rv.dtype) * (n / max(n - 1, 1))
            store[mean_key] = rm * (1.0 - momentum) + batch_mean * momentum
            store[var_key] = rv * (1.0 - momentum) + batch_var * momentum
    else:
        rm, rv = (store[k].to(xf.dtype).view(1, -1, 1, 1) for k in (mean_key, var_key))
        y = (xf - rm) * ops.rsqrt(rv + eps)
    y = y * weight.to(y.dtype).view(1, -1, 1, 1) + bias.to(y.dtype).view(1, -1, 1, 1)
    return y.to(x.dtype) if y.dtype != x.dtype else y


class CNN(Model):
    """A small ResNet: conv stem + batch norm + ReLU, max pooling, a basic
    block with an identity skip, a basic block with stride 2 and a 1x1
    projection skip, global average pooling, a linear head. Batch norm keeps
    running statistics (buffers): training forwards update them, inference
    under ``no_grad`` uses them."""

    name = "cnn"
    title = "CNN (conv2d, max/avg pooling, batch norm, ResNet basic blocks)"

    def param_specs(self):
        c, w = self.config, self.config.width
        specs = {}

        def conv(name, o, i, k):
            specs[name] = ((o, i, k, k), ("normal", math.sqrt(2.0 / (i * k * k))))

        def bn(name, ch):
            specs[name + ".weight"] = ((ch,), ("ones",))
            specs[name + ".bias"] = ((ch,), ("zeros",))

        conv("stem.conv", w, c.channels, 3)
        bn("stem.bn", w)
        conv("block1.conv1", w, w, 3)
        bn("block1.bn1", w)
        conv("block1.conv2", w, w, 3)
        bn("block1.bn2", w)
        conv("block2.conv1", 2 * w, w, 3)
        bn("block2.bn1", 2 * w)
        conv("block2.conv2", 2 * w, 2 * w, 3)
        bn("block2.bn2", 2 * w)
        conv("block2.proj", 2 * w, w, 1)
        bn("block2.proj_bn", 2 * w)
        specs["head.weight"] = ((c.classes, 2 * w), ("normal", 1.0 / math.sqrt(2 * w)))
        specs["head.bias"] = ((c.classes,), ("zeros",))
        return specs

    def buffer_specs(self):
        specs = {}  # per batch norm (a "...bn..." layer with a weight), as torch initialises them
        for name, (shape, _) in self.param_specs().items():
            layer, field = name.rsplit(".", 1)
            if field == "weight" and "bn" in layer.rsplit(".", 1)[-1]:
                specs[layer + ".running_mean"] = (shape, ("zeros",))
                specs[layer + ".running_var"] = (shape, ("ones",))
        return specs

    def make_data(self):
        c = self.config
        return {"images": normal((c.batch, c.channels, c.size, c.size), c.seed, "data.images"),
                "targets": integers((c.batch,), c.seed, "data.targets", c.classes)}

    def layers(self):
        momentum = self.config.bn_momentum

        def bn(p, x, inp, name):
            store = inp["buffers"]
            return batch_norm(x, p[name + ".weight"], p[name + ".bias"],
                              (store, name + ".running_mean"), (store, name + ".running_var"),
                              momentum)

        def stem(p, x, inp):
            return F.relu(bn(p, F.conv2d(inp["images"], p["stem.conv"], padding=1), inp, "stem.bn"))

        def pool(p, x, inp):
            return F.max_pool2d(x, 2)

        def block1(p, x, inp):
            h = F.relu(bn(p, F.conv2d(x, p["block1.conv1"], padding=1), inp, "block1.bn1"))
            h = bn(p, F.conv2d(h, p["block1.conv2"], padding=1), inp, "block1.bn2")
            return F.relu(h + x)  # the identity skip connection

        def block2(p, x, inp):
            h = F.relu(bn(p, F.conv2d(x, p["block2.conv1"], stride=2, padding=1), inp, "block2.bn1"))
            h = bn(p, F.conv2d(h, p["block2.conv2"], padding=1), inp, "block2.bn2")
            skip = bn(p, F.conv2d(x, p["block2.proj"], stride=2), inp, "block2.proj_bn")
            return F.relu(h + skip)

        def head(p, x, inp):
            pooled = F.avg_pool2d(x, x.shape[-1]).flatten(1)
            return F.linear(pooled, p["head.weight"], p["head.bias"])

        names = self.param_specs()

        def params(prefix):
            return tuple(n for n in names if n.startswith(prefix + "."))
        return [Layer("stem", stem, params("stem"), "conv2d+batch_norm+relu"),
                Layer("pool", pool, (), "max_pool2d"),
                Layer("block1", block1, params("block1"), "resnet basic block (identity skip)"),
                Layer("block2", block2, params("block2"), "resnet basic block (stride 2, projection)"),
                Layer("head", head, params("head"), "avg_pool2d+linear")]
