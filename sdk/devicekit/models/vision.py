"""The MLP classifier and the CNN (conv2d, pooling, batch norm, ResNet basic
blocks), written only with ``devicekit.nn.functional`` and ``devicekit.ops``."""

import math
from dataclasses import dataclass

from .. import ops
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
    seed: int = 1102


def batch_norm(x, weight, bias, eps=1e-5):
    """Training-mode batch norm over (N, H, W) of NCHW ``x`` with the biased
    batch variance, as ``torch.nn.functional.batch_norm(training=True)``
    (no running statistics: the zoo's inference uses batch statistics too).
    float16/bfloat16 are normalised in float32, like autocast does."""
    xf = x.to("float32") if str(x.dtype) in HALF else x
    d = xf - xf.mean(dim=(0, 2, 3), keepdim=True)
    y = d * ops.rsqrt((d * d).mean(dim=(0, 2, 3), keepdim=True) + eps)
    y = y * weight.to(y.dtype).view(1, -1, 1, 1) + bias.to(y.dtype).view(1, -1, 1, 1)
    return y.to(x.dtype) if y.dtype != x.dtype else y


class CNN(Model):
    """A small ResNet: conv stem + batch norm + ReLU, max pooling, a basic
    block with an identity skip, a basic block with stride 2 and a 1x1
    projection skip, global average pooling, a linear head."""

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

    def make_data(self):
        c = self.config
        return {"images": normal((c.batch, c.channels, c.size, c.size), c.seed, "data.images"),
                "targets": integers((c.batch,), c.seed, "data.targets", c.classes)}

    def layers(self):
        def bn(p, x, name):
            return batch_norm(x, p[name + ".weight"], p[name + ".bias"])

        def stem(p, x, inp):
            return F.relu(bn(p, F.conv2d(inp["images"], p["stem.conv"], padding=1), "stem.bn"))

        def pool(p, x, inp):
            return F.max_pool2d(x, 2)

        def block1(p, x, inp):
            h = F.relu(bn(p, F.conv2d(x, p["block1.conv1"], padding=1), "block1.bn1"))
            h = bn(p, F.conv2d(h, p["block1.conv2"], padding=1), "block1.bn2")
            return F.relu(h + x)  # the identity skip connection

        def block2(p, x, inp):
            h = F.relu(bn(p, F.conv2d(x, p["block2.conv1"], stride=2, padding=1), "block2.bn1"))
            h = bn(p, F.conv2d(h, p["block2.conv2"], padding=1), "block2.bn2")
            skip = bn(p, F.conv2d(x, p["block2.proj"], stride=2), "block2.proj_bn")
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
