"""``--shard K/N``: which part of a run this process does (docs/scale.md).

K is 1-based (1..N), as ``CI_NODE_INDEX``/``CI_NODE_TOTAL`` in GitLab and
``--group``/``--splits`` in pytest-split count, so ``--shard 1/1`` is the
whole run and a CI matrix index maps onto K without arithmetic.

The partition is round-robin over the run's *units* in the suite's own order:
unit i (0-based) belongs to shard ``i % N + 1``. A unit is a conformance case
(cases of one op and dtype sit next to each other and cost alike, so
round-robin spreads the expensive large-shape ones evenly; shard sizes differ
by at most one) or a whole model (its dtypes and phases share one worker and
one float64 reference, so a model is never split). The order is the suite's
own, which is the same in every process and on every machine for the same
plugin, level, filters and DeviceKit. A hash of the id would keep a case on
its shard when others are added, but shards from different DeviceKit
versions never merge anyway (``report merge`` refuses), and round-robin gives
equal shards and lets the merge restore the single run's order exactly.

Each shard's report carries a ``run.shard`` block: its index and count, what
a unit is, how many units the whole run has and the sha256 of their ordered
ids. The merge interleaves the shards back and checks that sha256, so a
missing, repeated or foreign shard cannot produce a report.
"""

import hashlib
import re

_FORM = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


class ShardError(ValueError):
    """A ``--shard`` value that is not K/N with 1 <= K <= N."""


def parse(text):
    """(K, N) from ``"K/N"``; :class:`ShardError` naming the problem."""
    m = _FORM.match(text or "")
    if not m:
        raise ShardError(f"--shard {text!r}: expected K/N, e.g. 1/4 (K counts from 1)")
    k, n = int(m.group(1)), int(m.group(2))
    if n < 1:
        raise ShardError(f"--shard {text}: N must be at least 1")
    if not 1 <= k <= n:
        raise ShardError(f"--shard {text}: K must be between 1 and N={n} (K counts from 1)")
    return k, n


def pick(units, k, n):
    """The units of shard ``k`` of ``n`` (round-robin, order kept)."""
    return list(units)[k - 1::n]


def too_few(k, n, count, unit):
    """The usage error when ``n`` shards would leave one empty, else None."""
    if n > count:
        return (f"--shard {k}/{n}: the run has only {count} {unit}{'s' if count != 1 else ''}; "
                f"use at most {count} shards")
    return None


def ids_sha256(ids):
    return hashlib.sha256("\n".join(ids).encode()).hexdigest()


def block(k, n, unit, all_units, **extra):
    """The ``run.shard`` block of a shard's report."""
    return {"index": k, "count": n, "unit": unit, "units_total": len(all_units),
            "units_sha256": ids_sha256(all_units), **extra}
