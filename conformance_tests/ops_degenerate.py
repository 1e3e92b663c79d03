"""Section "ops", part 4: degenerate sizes the header allows that the SDK
never sends, called on the kernel directly (``_raw``, below the SDK).

``ops/matmul/<dtype>/k0_direct``: a contraction over zero elements, [3, 0] @
[0, 4] and [2, 5, 0] @ [2, 0, 7]. The SDK fills such an output with zeros
itself and launches no matmul kernel, so no other case reaches a kernel's K=0
path; but the header allows the call (only all-empty outputs are never
launched), another caller may make it, and a kernel that returns early on
"nothing to multiply" leaves its output unwritten. The outputs are pre-filled
with canary bytes inside guard bands: they must come back all zeros, the
guards untouched, and the launch and the stream's synchronize clean.

``ops/matmul/<dtype>/empty_direct``: calls whose output has no element, [0, 4]
@ [4, 3], [3, 4] @ [4, 0] and a batch of none, [0, 2, 3] @ [0, 3, 5]. The SDK
launches no kernel whose outputs are all empty, but the header makes such a
call valid: the kernel must accept it, write nothing (the guard bands stay
intact) and leave the stream clean.
"""

import functools

import numpy as np

from devicekit.conformance.case import Skip
from devicekit.conformance.registry import op_cases

from . import _raw
from ._common import O

# Section "ops" (defined by ops_elementwise.py); this file only adds cases.
from .ops_elementwise import SECTION  # noqa: F401

SHAPES = {"k0_direct": [((3, 0), (0, 4)), ((2, 5, 0), (2, 0, 7))],
          "empty_direct": [((0, 4), (4, 3)), ((3, 4), (4, 0)), ((0, 2, 3), (0, 3, 5))]}


def check_matmul_k0(ctx, op, dtype, shape):
    if not _raw.available():
        raise Skip("this DeviceKit's core has no raw_kernel_call")
    dev = ctx.device
    for sa, sb in SHAPES[shape]:
        sc = sa[:-1] + sb[-1:]
        a = _raw.operand(dev, np.zeros(sa, O.np_dtype(dtype)), dtype)
        b = _raw.operand(dev, np.zeros(sb, O.np_dtype(dtype)), dtype)
        out = _raw.output(dev, sc, dtype)
        try:
            lc, lmsg, scode, smsg = _raw.call(dev, "matmul", [a.view(), b.view()], [out.view()])
            got, guards = out.fetch()
        finally:
            for o in (a, b, out):
                o.free()
        what = f"matmul {dtype} {list(sa)} @ {list(sb)} called directly"
        valid = "K = 0" if shape == "k0_direct" else "an empty output"
        assert lc == 0 and scode == 0, (f"{what}: the launch returned {lc} ({lmsg}) and the "
                                        f"synchronize {scode} ({smsg}); {valid} is a valid call")
        assert guards, f"{what}: bytes outside the output were written"
        ctx.ran.add(("matmul", dtype))
        O.assert_close(got, np.zeros(sc, O.np_dtype(dtype)), dtype, op="matmul",
                       case=f"{what}: a sum over nothing is 0 (the output was filled with canary "
                            f"bytes first)", tol=(0.0, 0.0))


def cases(target):
    return op_cases(target, "ops", "matmul", list(SHAPES),
                    lambda op, dtype, shape: functools.partial(check_matmul_k0, op=op, dtype=dtype,
                                                               shape=shape))
