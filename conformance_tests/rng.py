"""Section "rng": Philox4x32-10 bit-exact.

- ``rng/philox_kat/<i>``: Random123's known-answer vectors. A vector whose
  counter words 2 and 3 are zero is reachable through the device API
  (random_bits of 4 elements, seed = key, offset = counter words 0-1) and is
  checked on the device; the others check the numpy oracle that the mapping
  cases below trust.
- ``rng/random_bits/int32/<shape>`` and ``rng/random_uniform/<dtype>/<shape>``:
  the device against that oracle, with seeds and offsets that wrap 2**32 and 2**64.
"""

import functools

import numpy as np

from devicekit import ops
from devicekit.conformance.case import Case, Section
from devicekit.conformance.registry import op_cases
from devicekit.testing import philox
from devicekit.testing import oracle as O

from ._common import run

SECTION = Section("rng", "Philox4x32-10 random numbers, bit-exact", order=30,
                  min_cases=lambda target: len(philox.kat_vectors()))

RANDOM = {"0d": ((), 0, 0), "empty": ((0,), 1, 0), "seed_max": ((5,), 2**64 - 1, 0),
          "odd": ((3, 7), 0x243F6A8885A308D3, 5), "offset_wrap64": ((257, 129), 42, 2**64 - 3),
          "offset_wrap32": ((1, 2, 3), 7, 2**32 - 1)}


def check_kat(ctx, index):
    counter, key, want = philox.kat_vectors()[index]
    if counter[2] or counter[3]:  # not expressible as (seed, offset): check the oracle
        got = philox.philox4x32_10(counter, key)
    else:  # (a NULL random_bits kernel raises NotImplementedByPlugin here)
        seed = int(key[0]) | int(key[1]) << 32
        offset = int(counter[0]) | int(counter[1]) << 32
        got = ops.random_bits((4,), seed, offset, device=ctx.device).numpy().view(np.uint32)
    assert (got == want).all(), (f"KAT vector {index}: counter {counter} key {key}: "
                                 f"got {[hex(w) for w in got]}, want {[hex(w) for w in want]}")


def check_random(ctx, op, dtype, shape):
    sh, seed, offset = RANDOM[shape]
    note = f"shape={sh} seed={seed} offset={offset}"
    if op == "random_bits":
        got = run(ctx, op, lambda: ops.random_bits(sh, seed, offset, device=ctx.device))
        O.assert_close(got, philox.random_bits(sh, seed, offset), "int32", op=op, case=note)
    else:
        got = run(ctx, op, lambda: ops.rand(sh, seed, offset, dtype=dtype, device=ctx.device))
        O.assert_close(got, philox.random_uniform(sh, seed, offset, O.np_dtype(dtype)), dtype,
                       op=op, case=note)


def _make(op, dtype, shape):
    return functools.partial(check_random, op=op, dtype=dtype, shape=shape)


def cases(target):
    out = [Case(id=f"rng/philox_kat/{i}", section="rng", fn=functools.partial(check_kat, index=i))
           for i in range(len(philox.kat_vectors()))]
    for op in ("random_bits", "random_uniform"):
        out += op_cases(target, "rng", op, list(RANDOM), _make)
    return out
