"""Every base op through the SDK on the reference CPU plugin (cpu:0).

The op-by-dtype-by-shape checks against the independent numpy oracle are the
shipped conformance suite (devicekit.conformance_tests, sections ops and rng),
run here in-process on cpu:0 so the SDK's CI keeps them; a failure names the
case id, which replays with ``devicekit conformance --device cpu:0 --case ID``.
What stays here is SDK surface above the base ops: the oracle's own Philox
checks, type promotion, Python operators, and error messages.
"""

import re

import numpy as np
import pytest

import devicekit as dk
from devicekit import ops
from devicekit.conformance import registry
from devicekit.conformance.case import PASS, Target, run_case
from devicekit.testing import oracle as O
from devicekit.testing import philox
from devicekit.testing.inputs import rand, seed_of

try:
    TARGET = Target.of(dk.device("cpu:0"))
    # (not the tensors past 2**31 elements: 2 GiB each, opt-in or gated by memory; the
    # full conformance run in test_conformance_catches.py runs them in a worker)
    CASES = [c for c in registry.build(TARGET)[0]
             if c.section in ("ops", "rng") and not c.id.endswith("/huge_2g")]
except dk.DeviceKitError:  # no cpu:0: test_runtime's cpu fixture says why
    TARGET, CASES = None, []


def dtypes_of(op):
    return registry.spec_dtypes(op)[0]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_conformance_case_on_cpu(case):
    result = run_case(case, TARGET)
    assert result["outcome"] == PASS, f"{result['outcome']}: {result['message']}"


def test_philox_known_answers():
    """The numpy Philox4x32-10 against Random123's KAT vectors, bit-exact."""
    vectors = philox.kat_vectors()
    assert len(vectors) >= 3
    for counter, key, want in vectors:
        got = philox.philox4x32_10(counter, key)
        assert (got == want).all(), f"counter {counter} key {key}: got {got}, want {want}"


def test_philox_element_to_counter_mapping():
    """Element n is word n % 4 of the block at counter offset + n // 4 (mod
    2**64), key = the seed's two halves; uniform = (w >> 8) * 2**-24."""
    seed, offset = 0x0123456789ABCDEF, 2**64 - 2
    words = philox.random_bits((3, 3), seed, offset).reshape(-1).view(np.uint32)
    for n, w in enumerate(words):
        c = (offset + n // 4) % 2**64
        block = philox.philox4x32_10([c & 0xFFFFFFFF, c >> 32, 0, 0], [seed & 0xFFFFFFFF, seed >> 32])
        assert w == block[n % 4], f"element {n}: {w:#x} != word {n % 4} of {block}"
    u = philox.random_uniform((3, 3), seed, offset, np.float32).reshape(-1)
    assert (u == (words >> 8) * 2.0**-24).all()


@pytest.mark.parametrize("dtype", dtypes_of("random_uniform"))
def test_uniform_is_below_one_and_exact_in_every_float_dtype(dtype):
    # 2^16 samples hit words near 2^32, where rounding a 24-bit fraction to
    # float16/bfloat16 would give exactly 1.0.
    u = ops.rand((1 << 16,), seed=3, dtype=getattr(dk, dtype)).numpy().astype(np.float64)
    assert u.min() >= 0.0 and u.max() < 1.0, (u.min(), u.max())
    assert len(np.unique(u)) > 100


# -- the SDK surface on top: promotion, operators, errors --------------------

PROMOTE = [("int8", "uint8", "add", "int32"), ("float16", "bfloat16", "mul", "float32"),
           ("int32", "float16", "sub", "float16"), ("bool", "int8", "add", "int8"),
           ("int64", "float32", "maximum", "float32"), ("float32", "float64", "add", "float64"),
           ("uint8", "int64", "mul", "int64"), ("int32", "int32", "div", "float32"),
           ("int8", "int8", "pow", "float32"), ("bool", "bool", "add", "bool"),
           ("int8", 3, "add", "int8"), ("int8", 1.5, "mul", "float32"),
           ("float16", 2.5, "mul", "float16"), ("bool", 1.5, "add", "float32")]


@pytest.mark.parametrize("da,db,op,want", PROMOTE, ids=lambda v: str(v))
def test_type_promotion(da, db, op, want):
    rng = np.random.default_rng(seed_of(da, db, op))
    a = rand(da, (7, 13), rng, "small")
    b = rand(db, (7, 13), rng, "small") if isinstance(db, str) else db
    tb = dk.tensor(b) if isinstance(db, str) else db
    got = getattr(ops, op)(dk.tensor(a), tb).numpy()
    bw = O.cast(b, want) if isinstance(db, str) else O.cast(np.array(db), want)
    O.assert_close(got, O.binary(op, O.cast(a, want), bw), want, op=op, case=f"{da} {op} {db}")


def test_float_only_unary_on_integers_computes_in_float32():
    x = np.arange(-3, 9, dtype=np.int32)
    for op in ("exp", "sqrt", "sin"):
        got = getattr(ops, op)(dk.tensor(x)).numpy()
        O.assert_close(got, O.unary(op, x.astype(np.float32)), "float32", op=op, case="int32 input")


def test_tensor_methods_and_operators_match_ops():
    rng = np.random.default_rng(11)
    a, b = rand("float32", (7, 13), rng), rand("float32", (7, 13), rng, "positive")
    ta, tb = dk.tensor(a), dk.tensor(b)
    pairs = {"+": (ta + tb, ops.add(ta, tb)), "-": (ta - tb, ops.sub(ta, tb)),
             "*": (ta * tb, ops.mul(ta, tb)), "/": (ta / tb, ops.div(ta, tb)),
             "**": (tb ** ta, ops.pow(tb, ta)), "@": (ta @ tb.T, ops.matmul(ta, tb.T)),
             "neg": (-ta, ops.neg(ta)), "abs": (abs(ta), ops.abs(ta)), "==": (ta == tb, ops.eq(ta, tb)),
             "!=": (ta != tb, ops.ne(ta, tb)), "<": (ta < tb, ops.lt(ta, tb)),
             "<=": (ta <= tb, ops.le(ta, tb)), ">": (ta > tb, ops.gt(ta, tb)),
             ">=": (ta >= tb, ops.ge(ta, tb)), "sum": (ta.sum(1, True), ops.sum(ta, 1, True)),
             "max": (ta.amax(0), ops.max(ta, 0)), "min": (ta.min(), ops.min(ta)),
             "argmax": (ta.argmax(1), ops.argmax(ta, 1)), "exp": (ta.exp(), ops.exp(ta)),
             "tanh": (ta.tanh(), ops.tanh(ta))}
    for name, (method, fn) in pairs.items():
        m, f = method.numpy(), fn.numpy()
        assert m.dtype == f.dtype and m.shape == f.shape and np.array_equal(m, f, equal_nan=True), name


def test_shape_mismatch_names_both_shapes():
    with pytest.raises(dk.InvalidArgumentError) as info:
        ops.add(dk.tensor(np.zeros((3, 4), np.float32)), dk.tensor(np.zeros((5,), np.float32)))
    msg = str(info.value)
    assert re.search(r"3, 4", msg) and re.search(r"\b5\b", msg), msg
