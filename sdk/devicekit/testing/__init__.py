"""Reference numerics for DeviceKit's base operators.

- :mod:`devicekit.testing.oracle`: an independent numpy float64 implementation
  of every base op, the tolerance table and :func:`assert_close`.
- :mod:`devicekit.testing.oracle_nn`: the same for the composite ops of
  ``devicekit.nn.functional`` (softmax, norms, attention, conv, losses, AdamW ...).
- :mod:`devicekit.testing.philox`: Philox4x32-10 in numpy and DeviceKit's
  element-to-counter mapping (the oracle of ``random_bits``/``random_uniform``).

Neither module imports the rest of devicekit (only numpy and ml_dtypes), so a
result is never checked against the code that produced it. The SDK's tests
and the conformance suite both use them.
"""

from . import oracle, oracle_nn, philox
from .oracle import TOLERANCES, assert_close, tolerance

__all__ = ["oracle", "oracle_nn", "philox", "assert_close", "tolerance", "TOLERANCES"]
