"""Reverse-mode automatic differentiation over the base ops.

(Placeholder: grad mode only. The tape, gradient rules and ``backward`` are
being built; see issue 3.)
"""

import contextlib
import threading

_state = threading.local()


def is_grad_enabled():
    return getattr(_state, "enabled", True)


@contextlib.contextmanager
def no_grad():
    """Operations inside record nothing for backward."""
    previous = is_grad_enabled()
    _state.enabled = False
    try:
        yield
    finally:
        _state.enabled = previous


@contextlib.contextmanager
def enable_grad():
    previous = is_grad_enabled()
    _state.enabled = True
    try:
        yield
    finally:
        _state.enabled = previous
