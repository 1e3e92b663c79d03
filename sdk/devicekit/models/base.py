"""What a zoo model is: a config, Philox-seeded parameters and data, and a
list of named layers.

A model is a chain of :class:`Layer` s. Each layer is ``fn(p, x, inp) -> y``:
``p`` maps the model's parameter names to tensors already in the compute
dtype, ``x`` is the previous layer's output (``None`` for the first layer,
which reads ``inp``), ``inp`` holds the batch (ids, images, masks, rotary
tables) on the device. Because a layer only sees its input and its
parameters, the harness can run any one layer alone with identical inputs on
two devices: that is how it finds the first layer that diverges.

Weights and data come from Philox4x32-10 computed on the host
(``devicekit.testing.philox``, the oracle of the ``random_uniform`` op), one
counter range per tensor name, then rounded once to float32. They never go
through a plugin's RNG kernel, so every backend starts from identical bits
(and a plugin whose RNG is wrong still gets a meaningful model result).
"""

import dataclasses
import hashlib
import json
import math
import zlib
from dataclasses import dataclass
from typing import Callable, Tuple

import numpy as np

from ..testing import philox

HALF = ("float16", "bfloat16")


@dataclass(frozen=True)
class Layer:
    """One named layer boundary: ``fn(p, x, inp) -> y`` using ``params``."""

    name: str
    fn: Callable
    params: Tuple[str, ...]
    kind: str = ""


def _stream(name):
    """The Philox counter offset of tensor ``name``: 2**32 counters (4 * 2**32
    elements) per name, so tensors never share counters."""
    return zlib.crc32(name.encode()) << 32


def uniform(shape, seed, name):
    """float64 uniforms in [0, 1) (24-bit, exact in float32)."""
    return philox.random_uniform(shape, seed, _stream(name), np.float64)


def normal(shape, seed, name, std=1.0):
    """Box-Muller normals from two Philox streams, rounded to float32 (so the
    float64 reference and a float32 run start from the same values)."""
    u1 = uniform(shape, seed, name + "#u1")
    u2 = uniform(shape, seed, name + "#u2")
    z = np.sqrt(-2.0 * np.log1p(-u1)) * np.cos(2.0 * math.pi * u2)
    return (z * std).astype(np.float32)


def integers(shape, seed, name, high):
    """Uniform integers in [0, high), int64."""
    return np.minimum((uniform(shape, seed, name) * high).astype(np.int64), high - 1)


class Model:
    """Base of the zoo's models. Subclasses set ``name``, ``title`` and
    ``config`` (a frozen dataclass with a ``seed`` field) and implement
    ``param_specs``, ``make_data`` and ``layers``."""

    name = ""
    title = ""

    def __init__(self, config):
        self.config = config

    # -- what a subclass provides -------------------------------------------
    def param_specs(self):
        """{name: (shape, init)} with init ``("normal", std)``, ``("ones",)`` or ``("zeros",)``."""
        raise NotImplementedError

    def make_data(self):
        """{name: numpy array} of one batch; must contain ``targets`` (int64 class ids)."""
        raise NotImplementedError

    def layers(self):
        raise NotImplementedError

    def buffer_specs(self):
        """{name: (shape, init)} of state that is not trained by gradients
        (BatchNorm's running statistics); the harness puts it, in the master
        dtype, at ``inp["buffers"]``, where layers read and update it."""
        return {}

    # -- derived ---------------------------------------------------------------
    def init_params(self):
        """{name: float32 numpy array}, identical on every machine and backend."""
        return self._init(self.param_specs())

    def init_buffers(self):
        return self._init(self.buffer_specs())

    def _init(self, specs):
        out = {}
        for pname, (shape, init) in specs.items():
            if init[0] == "normal":
                out[pname] = normal(shape, self.config.seed, pname, init[1])
            elif init[0] == "ones":
                out[pname] = np.ones(shape, np.float32)
            elif init[0] == "zeros":
                out[pname] = np.zeros(shape, np.float32)
            else:
                raise ValueError(f"{self.name}: unknown init {init!r} for parameter {pname}")
        return out

    def config_dict(self):
        return {"model": self.name, **dataclasses.asdict(self.config)}

    def config_hash(self):
        text = json.dumps(self.config_dict(), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def layer(self, name):
        for layer in self.layers():
            if layer.name == name:
                return layer
        raise KeyError(name)

    def __repr__(self):
        return f"<model {self.name}: {self.config}>"
