"""Reading an untrusted input file with its size bounded before it is read.

Policies, shard reports and records come from outside: a device, a FIFO or a
2 GiB file must be refused by looking at it (``stat``), not by reading it.
Each caller maps :class:`Unreadable`'s ``kind`` to its own error and exit code,
and :func:`truncated_or_corrupted` says which of the two a file that does not
parse as JSON looks like.
"""

import json
import os
import re
import stat


class Unreadable(Exception):
    """Why a file was not read: ``kind`` is ``"missing"``, ``"unreadable"``
    (an OS error; ``reason`` is its text), ``"not_regular"`` or
    ``"too_large"`` (``size`` is what ``stat`` said, or None when the file grew
    while it was read)."""

    def __init__(self, kind, reason="", size=None):
        super().__init__(kind)
        self.kind, self.reason, self.size = kind, reason, size


def read_bounded(path, cap):
    """The bytes of the regular file ``path``, at most ``cap`` of them, else :class:`Unreadable`."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise Unreadable("missing") from None
    except OSError as e:
        raise Unreadable("unreadable", e.strerror or str(e)) from None
    if not stat.S_ISREG(info.st_mode):
        raise Unreadable("not_regular")
    if info.st_size > cap:
        raise Unreadable("too_large", size=info.st_size)
    try:
        with open(path, "rb") as f:
            raw = f.read(cap + 1)  # the file may have grown since the stat
    except OSError as e:
        raise Unreadable("unreadable", e.strerror or str(e)) from None
    if len(raw) > cap:
        raise Unreadable("too_large")
    return raw


_CUT_TOKEN = re.compile(r"[-+0-9.eE]*|t(r(ue?)?)?|f(a(l(se?)?)?)?|n(u(ll?)?)?|\\?(u[0-9a-fA-F]{0,4})?")


def truncated_or_corrupted(raw, e):
    """Why ``raw`` (bytes) did not parse as JSON (``e``): "truncated" when the
    text ended before the JSON did (the parser failed at its end, wherever the
    cut fell: after an inner "}" too, or inside a multi-byte character), else
    "corrupted"."""
    if isinstance(e, json.JSONDecodeError):
        # an open string runs to the end, or what is left from the failure on
        # is nothing or the start of a literal, number or escape
        ended = (e.msg.startswith("Unterminated string")
                 or _CUT_TOKEN.fullmatch(e.doc[e.pos:].strip()) is not None)
        return "truncated" if ended else "corrupted"
    if isinstance(e, UnicodeDecodeError):
        return "truncated" if e.end >= len(raw) else "corrupted"
    return "corrupted"  # a ValueError of a complete text: an integer too long
