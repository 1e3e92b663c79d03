"""What the fuzz section draws its cases from (not a section itself: leading
underscore): the seed set, sizes, shapes, broadcast patterns, values and
device layouts. Everything here is numpy on one ``numpy.random.Generator``
per case, so a case's inputs follow from its op, dtype and seed alone; only
:func:`place` touches the device.

- Seeds: this release's set is derived from the DeviceKit version string, so
  two runs of one release (two plugin builds, two machines) run the same
  cases and their reports compare; ``--fuzz-seed S`` starts another set at S
  (the first seed of a set is S itself, so any case replays with its seed as
  the set seed), ``--fuzz-cases N`` sets how many per (op, dtype).
- Sizes are biased to 0, 1, small primes, 2**k - 1, 2**k, 2**k + 1 and a few
  large ones (the thresholds where kernels change path: vector widths, tiles,
  parallel chunks), under a cap on the element count.
- Values: normal, small integers (ties, exact sums), many binary exponents,
  the subnormal range and large magnitudes, each with the dtype's edge values
  (NaN, +-Inf, +-0, subnormals, +-max, integer limits) sprinkled in.
- Layouts: dense, or a view of a larger buffer with permuted dims, steps, an
  offset and expanded (stride-0) dims; the gaps of the buffer hold a poison
  value (NaN, the integer maximum), so a kernel that reads past its view is
  seen. An op whose kernel does not declare strided inputs gets them
  materialised by the SDK (the copy kernel then reads the view).
"""

import math
import zlib
from dataclasses import dataclass
from typing import Optional

import numpy as np

import devicekit as dk
from devicekit.conformance.registry import fuzz_settings
from devicekit.testing import oracle as O
from devicekit.testing.inputs import edges

#: Cases per (op, dtype) at level full, unless --fuzz-cases says otherwise.
DEFAULT_CASES = 12
FLOATS = O.FLOATS


# ---- seeds ----------------------------------------------------------------------------

def release_seed(version=None):
    """The first seed of this DeviceKit release's set (a function of its version)."""
    return zlib.crc32(f"devicekit {version or dk.__version__} fuzz".encode())


def seed_set(base, n):
    """n seeds starting with ``base`` itself."""
    return ([base] + [zlib.crc32(f"{base}/{i}".encode()) for i in range(1, n)])[:max(n, 0)]


def seeds():
    """The seeds of this run: the configured (or this release's) set, plus the
    seeds of fuzz ids asked for by --case (replays of another set)."""
    seed, n, replay = fuzz_settings()
    chosen = seed_set(release_seed() if seed is None else seed, DEFAULT_CASES if n is None else n)
    return chosen + [s for s in replay if s not in chosen]


def generator(op, dtype, seed):
    """The one generator of case (op, dtype, seed)."""
    return np.random.default_rng([seed, zlib.crc32(op.encode()), zlib.crc32(str(dtype).encode())])


# ---- sizes and shapes -------------------------------------------------------------------

SMALL = (0, 1, 1, 1, 2, 2, 3, 3, 4, 1)  # 0 about one dim in 30
PRIMES = (5, 7, 11, 13, 19, 31, 37, 61, 127, 257)
POWERS = (15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 255, 256, 257)
LARGE = (511, 513, 1023, 1025, 4095, 4097, 8193, 65535, 65537)
FAMILIES, WEIGHTS = (SMALL, PRIMES, POWERS, LARGE), (0.3, 0.3, 0.3, 0.1)


def size(rng, limit=None):
    """One dimension, at most ``limit``."""
    fam = FAMILIES[rng.choice(len(FAMILIES), p=WEIGHTS)]
    pool = [s for s in fam if limit is None or s <= limit] or [s for s in SMALL if s <= max(limit, 1)]
    return int(rng.choice(pool))


def shape(rng, rank=None, cap=1 << 17, min_rank=0, max_rank=5):
    """A shape of ``rank`` (default: 0-5, biased to 1-3) with at most ``cap``
    elements; the dims are drawn in random order, each within what the cap leaves."""
    if rank is None:
        p = np.array([0.08, 0.22, 0.3, 0.2, 0.12, 0.08][min_rank:max_rank + 1])
        rank = min_rank + int(rng.choice(len(p), p=p / p.sum()))
    out, left = [1] * rank, cap
    for d in rng.permutation(rank):
        out[d] = size(rng, left)
        left = max(1, left // max(out[d], 1))
    return tuple(out)


def broadcast_from(rng, full, p_one=0.3, p_drop=0.3):
    """A shape that broadcasts to ``full``: some dims 1, some leading dims dropped."""
    lead = int(rng.integers(0, len(full) + 1)) if full and rng.random() < p_drop else 0
    return tuple(1 if rng.random() < p_one else s for s in full[lead:])


# ---- values ---------------------------------------------------------------------------

def finfo(dtype):
    import ml_dtypes
    return ml_dtypes.finfo(O.np_dtype(dtype))


def values(rng, dtype, shape, kinds=None, p_edges=0.4):
    """Random values of ``dtype``: one distribution ("normal", "small": integral
    in [-3, 3], "scales": many binary exponents, "tiny": subnormal range,
    "huge": up to the maximum; integers "full" range or "small"), with the
    dtype's edge values sprinkled in with probability ``p_edges``."""
    d = O.np_dtype(dtype)
    if d == np.bool_:
        return rng.random(shape) < rng.uniform(0.1, 0.9)
    if str(dtype) in FLOATS:
        kind = rng.choice(kinds or ("normal", "normal", "small", "scales", "tiny", "huge"))
        x = rng.standard_normal(shape)
        f = finfo(dtype)
        with np.errstate(over="ignore"):  # (float64 "huge" may overflow: +-inf, specified)
            x = {"normal": x, "small": np.round(x * 2),
                 "scales": x * np.exp2(rng.integers(-24, 24, shape).astype(np.float64)),
                 "tiny": x * float(f.tiny) * rng.uniform(0.01, 2, shape),
                 "huge": x * float(f.max) / 4}[kind]
        x = O.round_to(x, dtype)
    else:
        kind = rng.choice(kinds or ("full", "small"))
        i = np.iinfo(d)
        lo, hi = (int(i.min), int(i.max)) if kind == "full" else (max(int(i.min), -3), 3)
        x = rng.integers(lo, hi, size=shape, endpoint=True).astype(d)
    if x.size and rng.random() < p_edges:
        x = np.array(x)
        hit = rng.random(x.shape) < rng.uniform(0.01, 0.2)
        x[hit] = rng.choice(edges(dtype), size=int(hit.sum()))
    return x


def clip_finite(x, limit):
    """x with finite |values| above ``limit`` replaced by +-limit (NaN and Inf kept)."""
    v = x.astype(np.float64)
    with np.errstate(invalid="ignore"):
        big = np.isfinite(v) & (np.abs(v) > limit)
    return O.round_to(np.where(big, np.sign(v) * limit, v), x.dtype) if big.any() else x


def sum_limit(dtype, n):
    """The largest |term| of a sum of n terms that cannot overflow ``dtype``
    in any order (overflow depends on the order: the bound does not)."""
    if str(dtype) not in FLOATS:
        return None
    return min(1e4, float(finfo(dtype).max) / (4 * max(n, 1)))


# ---- layouts --------------------------------------------------------------------------

@dataclass(frozen=True)
class Layout:
    """A view of a buffer: dims in memory order ``perm`` (outermost first), a
    step per dim, an offset (elements), and ``expanded`` dims read with stride 0."""

    perm: tuple
    steps: tuple
    offset: int
    expanded: tuple

    def __str__(self):
        parts = [f"perm={list(self.perm)}"] if list(self.perm) != sorted(self.perm) else []
        parts += [f"steps={list(self.steps)}"] if any(s > 1 for s in self.steps) else []
        parts += [f"offset={self.offset}"] if self.offset else []
        parts += [f"expanded={list(self.expanded)}"] if self.expanded else []
        return f"view({', '.join(parts) or 'dense'})"


@dataclass
class Operand:
    """One input: its logical value and its device layout (None: dense)."""

    value: np.ndarray
    layout: Optional[Layout] = None

    def __str__(self):
        return f"{self.value.dtype}{list(self.value.shape)} {self.layout or 'dense'}"


def layout(rng, shape, expand=True):
    """A random view layout for ``shape``, or None (dense) for an empty or 0-d one."""
    nd = len(shape)
    if nd == 0 or math.prod(shape) == 0:
        return None
    perm = tuple(int(p) for p in rng.permutation(nd)) if rng.random() < 0.5 else tuple(range(nd))
    steps = [1] * nd
    for d in rng.choice(nd, size=int(rng.integers(0, min(nd, 2) + 1)), replace=False):
        steps[d] = int(rng.integers(2, 4))
    expanded = tuple(d for d in range(nd) if expand and shape[d] > 1 and rng.random() < 0.15)
    offset = int(rng.integers(1, 40)) if rng.random() < 0.5 else 0
    if perm == tuple(range(nd)) and max(steps) == 1 and not offset and not expanded:
        return None  # that would be dense
    return Layout(perm, tuple(steps), offset, expanded)


def operand(rng, shape, fill, p_view=0.6, expand=True):
    """An Operand of ``shape`` whose values are ``fill(shape)``: with
    probability ``p_view`` laid out as a random view, whose expanded dims hold
    one value each (filled at size 1, then broadcast)."""
    lay = layout(rng, shape, expand) if rng.random() < p_view else None
    stored = tuple(1 if lay and d in lay.expanded else s for d, s in enumerate(shape))
    v = np.asarray(fill(stored))
    if stored != tuple(shape):
        v = np.ascontiguousarray(np.broadcast_to(v, shape))
    return Operand(v, lay)


def _poison(dtype):
    d = np.dtype(dtype)
    if d == np.bool_:
        return True
    return np.iinfo(d).max if d.kind in "iu" else np.nan


def _dense(a):
    return np.array(a, order="C")  # (np.ascontiguousarray makes a 0-d array 1-d)


def place(device, opnd):
    """The device tensor of ``opnd`` (an Operand, or a plain array: dense)."""
    if not isinstance(opnd, Operand):
        return dk.tensor(_dense(opnd), device=device)
    a, lay = opnd.value, opnd.layout
    if lay is None:
        return dk.tensor(_dense(a), device=device)
    stored = a[tuple(slice(0, 1) if d in lay.expanded else slice(None) for d in range(a.ndim))]
    mem_shape = [stored.shape[p] * lay.steps[p] for p in lay.perm]
    grid = tuple(slice(None, None, lay.steps[p]) for p in lay.perm)
    buf = np.full(lay.offset + math.prod(mem_shape), _poison(a.dtype), a.dtype)
    buf[lay.offset:].reshape(mem_shape)[grid] = stored.transpose(lay.perm)
    t = dk.tensor(buf, device=device)[lay.offset:].reshape(mem_shape)[grid]
    return t.permute(*[int(i) for i in np.argsort(lay.perm)]).expand(*a.shape)
