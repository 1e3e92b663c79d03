"""Section "ops", part 3: tensors past 2**31 elements (level full).

Index arithmetic done in 32 bits (an ``int`` offset, ``row * stride`` in
int32) is right for every tensor the other cases make and wrong only past
about 2**31 elements or index values. These cases make such tensors of 1-byte
elements (about 2 GiB each):

- ``ops/gather/int8/huge_2g``: a table of 2**31 + 229,379 int8 (a pattern of
  period 251, so a wrong element is seen) gathered flat at index values past
  2**31, and as [32771, 65537] rows past the 2**31st element, with a dense
  index and with an embedding's (one row id expanded along the row);
- ``ops/iota/int8/huge_2g``: an iota of shape [2**23 + 17, 256] along axis
  1 (each row -128 .. 127, the last rows past element 2**31; ``arange`` is
  1-D and its values must fit the dtype, so this calls the op with its shape
  and axis, as ``arange`` does);
- ``ops/cumsum/float16/huge_2g``: a scan over 2**31 + 4099 elements of +1/-1
  (every prefix exact). It needs 8 GiB of device memory and 8 GiB of host
  memory and takes minutes on a CPU, so it runs only when asked for:
  ``DEVICEKIT_CONFORMANCE_HUGE=1`` (else skipped, saying so).

A case needs its bytes on the device (its ``total_memory`` less what is in
use) and, on the host, its own bytes plus the device's (a device may be host
memory, as the CPU plugin's is), with headroom; where either falls short it
is skipped with the figures.
"""

import functools
import os

import numpy as np

from devicekit import _core, ops
from devicekit.conformance.case import Case, Section, Skip

from ._common import O, dk, run

SECTION = Section("ops", "Base ops against the float64 oracle", order=22)

ROWS, COLS = 32771, 65537  # rows * cols = 2**31 + 229,379: the last rows start past 2**31
N = ROWS * COLS
PERIOD = 251  # the table's pattern: prime, so no power-of-two wrap of an offset hides
HEADROOM = 1.25
OPT_IN = "DEVICEKIT_CONFORMANCE_HUGE"


def _host_available():
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _need(ctx, device_bytes, host_bytes):
    dev = ctx.device
    free = int(dev.properties["total_memory"]) - int(dev.memory_stats()["bytes_in_use"])
    host = _host_available()
    gib = 2.0 ** 30
    if free < device_bytes * HEADROOM:
        raise Skip(f"needs {device_bytes / gib:.1f} GiB of device memory (with headroom "
                   f"{device_bytes * HEADROOM / gib:.1f}); the device has {free / gib:.1f} GiB free")
    both = host_bytes + device_bytes
    if host is not None and host < both * HEADROOM:
        raise Skip(f"needs {host_bytes / gib:.1f} GiB of host memory to build and read back its "
                   f"tensors, plus the device's {device_bytes / gib:.1f} GiB if the device is "
                   f"host memory; {host / gib:.1f} GiB are available")


def _pattern():
    return ((np.arange(PERIOD) * 37) % PERIOD - 125).astype(np.int8)


def gather_huge(ctx, op, dtype, shape):
    _need(ctx, N + (8 << 20), N + (8 << 20))
    dev, pat = ctx.device, _pattern()
    table = dk.tensor(np.resize(pat, N), device=dev)  # x[i] = pat[i % PERIOD]
    rng = ctx.rng()
    flat = np.array([N - 1, N - 2, 2**31, 2**31 - 1, 2**31 + 1, 2**32 % N, 0, 7], np.int64)
    flat = np.concatenate([flat, rng.integers(2**31, N, 57)])
    got = run(ctx, "gather", lambda: ops.gather(table, 0, dk.tensor(flat, device=dev)))
    O.assert_close(got, pat[flat % PERIOD], "int8", op="gather",
                   case=f"flat table of {N} int8, index values past 2**31")
    rows = table.reshape(ROWS, COLS)
    last = rng.integers(2**31 // COLS, ROWS, (2, COLS))  # rows that start past element 2**31
    want = pat[(last * COLS + np.arange(COLS)) % PERIOD]
    got = run(ctx, "gather", lambda: ops.gather(rows, 0, dk.tensor(last, device=dev)))
    O.assert_close(got, want, "int8", op="gather", case=f"[{ROWS}, {COLS}] table, rows past 2**31")
    ids = np.array([[ROWS - 1], [2**31 // COLS + 1]], np.int64)  # an embedding: a row id per row
    want = pat[(ids * COLS + np.arange(COLS)) % PERIOD]
    got = run(ctx, "gather",
              lambda: ops.gather(rows, 0, dk.tensor(ids, device=dev).expand(2, COLS)))
    O.assert_close(got, want, "int8", op="gather",
                   case=f"[{ROWS}, {COLS}] table, expanded row ids past 2**31")


def iota_huge(ctx, op, dtype, shape):
    rows, cols = 2**23 + 17, 256  # 2**31 + 4352 elements; each row start, start + 1, ...
    n = rows * cols
    _need(ctx, n, n)
    start = -128
    got = run(ctx, "iota", lambda: _core.iota(ctx.device, [rows, cols], dk.int8.id, 1, start, 1))
    row = np.arange(start, start + cols, dtype=np.int8)
    bad = np.flatnonzero((got.view(np.uint64) != row.view(np.uint64)).any(axis=1))  # 8 at a time
    assert got.shape == (rows, cols) and not bad.size, (
        f"iota int8 of shape [{rows}, {cols}] along axis 1 from {start}: row {bad[0]} (element "
        f"{bad[0] * cols}) is {got[bad[0], :8].tolist()}..., expected {start}, {start + 1}, ...")


def cumsum_huge(ctx, op, dtype, shape):
    n = 2**31 + 4099
    if os.environ.get(OPT_IN) != "1":
        raise Skip(f"opt-in: needs 8 GiB of device and 8 GiB of host memory and minutes on a "
                   f"CPU; set {OPT_IN}=1 to run it")
    _need(ctx, 4 * n, 4 * n)
    x = dk.tensor(np.resize(np.array([1, -1], np.float16), n), device=ctx.device)
    got = run(ctx, "cumsum", lambda: ops.cumsum(x, 0))
    odd, even = np.flatnonzero(got[0::2] != 1), np.flatnonzero(got[1::2] != 0)
    first = min(2 * odd[0] if odd.size else n, 2 * even[0] + 1 if even.size else n)
    assert first == n, (f"cumsum float16 of {n} alternating +1/-1: the prefix at element "
                        f"{first} is {got[first]}, expected {1 - first % 2}")


def _released(fn):
    """``fn``, then its device memory back to the device (not kept in the cache)."""
    @functools.wraps(fn)
    def case(ctx, **kw):
        try:
            return fn(ctx, **kw)
        finally:
            import gc
            gc.collect()
            ctx.device.empty_cache()
    return case


HUGE = {("gather", "int8"): gather_huge, ("iota", "int8"): iota_huge,
        ("cumsum", "float16"): cumsum_huge}


def cases(target):
    out = []
    for (op, dtype), fn in HUGE.items():
        have = target.declared.get(op, ())
        why = None if dtype in have else f"the plugin does not declare {dtype} for '{op}'"
        out.append(Case(id=f"ops/{op}/{dtype}/huge_2g", section="ops", op=op, dtype=dtype,
                        required=False, not_implemented=why, level="full",
                        fn=functools.partial(_released(fn), op=op, dtype=dtype, shape="huge_2g")))
    return out
