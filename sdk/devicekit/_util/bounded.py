"""Reading an untrusted input file with its size bounded before it is read.

Policies, shard reports and records come from outside: a device, a FIFO or a
2 GiB file must be refused by looking at it (``stat``), not by reading it.
Each caller maps :class:`Unreadable`'s ``kind`` to its own error and exit code.
"""

import os
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
