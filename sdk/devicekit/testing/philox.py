"""Philox4x32-10 in pure numpy, and DeviceKit's element-to-counter mapping.

This is the oracle for the ``random_bits`` and ``random_uniform`` base ops: it
shares no code with the SDK or any plugin, so a backend that agrees with it
bit for bit implements the spec, not a copy of our C.

The block function is Salmon et al., "Parallel Random Numbers: As Easy as 1,
2, 3" (SC11), as in the Random123 library: 10 rounds of two 32x32->64-bit
multiplies, with the key bumped by the Weyl constants between rounds. It is
checked against Random123's known-answer vectors in
``devicekit/data/philox4x32_10_kat.json`` (see :func:`kat_vectors`).

The mapping (device_api.h, DK_OP_RANDOM_BITS): element ``n`` (row-major index
in the output) is word ``n % 4`` of ``Philox(counter={lo32(c), hi32(c), 0, 0},
key={lo32(seed), hi32(seed)})`` with ``c = offset + n // 4`` (mod 2**64),
reinterpreted as int32. ``random_uniform`` is ``(w >> 8) * 2**-24`` of that
word ``w`` as uint32: exact in float32 and float64, rounded to nearest even
for float16/bfloat16 (which can round values just below 1 up to 1.0).
"""

import json
from importlib import resources

import numpy as np

from ._dtypes import round_to

__all__ = ["philox4x32_10", "random_bits", "random_uniform", "kat_vectors"]

_M0, _M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
_W0, _W1 = np.uint32(0x9E3779B9), np.uint32(0xBB67AE85)
_LO = np.uint64(0xFFFFFFFF)
_32 = np.uint64(32)


def philox4x32_10(counter, key):
    """The raw block function, vectorised over blocks.

    ``counter``: uint32 array of shape (..., 4); ``key``: uint32 array of shape
    (..., 2) broadcastable against it. Returns the uint32 (..., 4) output.
    """
    c = np.asarray(counter, dtype=np.uint32)
    k = np.asarray(key, dtype=np.uint32)
    c0, c1, c2, c3 = (c[..., i].astype(np.uint64) for i in range(4))
    k0, k1 = k[..., 0].copy(), k[..., 1].copy()
    with np.errstate(over="ignore"):  # the Weyl key schedule wraps mod 2**32 by design
        for r in range(10):
            if r:
                k0, k1 = k0 + _W0, k1 + _W1
            p0, p1 = _M0 * c0, _M1 * c2  # exact: both factors < 2**32
            hi0, lo0 = p0 >> _32, p0 & _LO
            hi1, lo1 = p1 >> _32, p1 & _LO
            c0, c1, c2, c3 = (hi1 ^ c1 ^ k0.astype(np.uint64), lo1,
                              hi0 ^ c3 ^ k1.astype(np.uint64), lo0)
    return np.stack([c0, c1, c2, c3], axis=-1).astype(np.uint32)


def _words(shape, seed, offset):
    """uint32 words for every element of ``shape``, row-major."""
    shape = tuple(int(s) for s in shape)
    n = int(np.prod(shape, dtype=np.int64))
    seed, offset = int(seed) % 2**64, int(offset) % 2**64
    blocks = (n + 3) // 4
    with np.errstate(over="ignore"):  # c = offset + n // 4 wraps mod 2**64
        c = np.uint64(offset) + np.arange(blocks, dtype=np.uint64)
    counter = np.zeros((blocks, 4), dtype=np.uint32)
    counter[:, 0] = (c & _LO).astype(np.uint32)
    counter[:, 1] = (c >> _32).astype(np.uint32)
    key = np.array([seed & 0xFFFFFFFF, seed >> 32], dtype=np.uint32)
    return philox4x32_10(counter, key).reshape(-1)[:n].reshape(shape)


def random_bits(shape, seed, offset=0):
    """What ``random_bits`` must produce: an int32 array of ``shape``."""
    return _words(shape, seed, offset).view(np.int32)


def random_uniform(shape, seed, offset=0, dtype=np.float32):
    """What ``random_uniform`` must produce for ``dtype`` (float32, float64,
    float16 or ml_dtypes.bfloat16)."""
    # p = significand bits of dtype; (w >> (32 - p)) * 2^-p is exact and < 1.
    p = {np.dtype(np.float16): 11, np.dtype(np.float32): 24, np.dtype(np.float64): 24}.get(
        np.dtype(dtype), 8)  # 8: bfloat16
    u = (_words(shape, seed, offset) >> np.uint32(32 - p)).astype(np.float64) * 2.0**-p
    return round_to(u, dtype)


def kat_vectors():
    """Random123's Philox4x32-10 known-answer vectors shipped with DeviceKit:
    a list of (counter uint32[4], key uint32[2], output uint32[4])."""
    text = resources.files("devicekit").joinpath("data/philox4x32_10_kat.json").read_text()
    return [tuple(np.array([int(w, 16) for w in v[f]], dtype=np.uint32)
                  for f in ("counter", "key", "output"))
            for v in json.loads(text)["vectors"]]
