"""Why the gate could not judge: one class per kind of bad input, each with
its own exit code (docs/gate.md), all under :class:`devicekit.DeviceKitError`.

A *refusal* is not an error: it is a verdict (exit 1) with reasons. These
errors mean the inputs themselves are unusable, and the message is one line
that names the file and the problem.
"""

from ..errors import InputFileError


class GateError(InputFileError):
    """Base of the gate's input errors; ``exit_code`` is what the CLI returns."""


class MissingInput(GateError):
    """A record, baseline, policy or binary that does not exist or cannot be read."""

    exit_code = 3


class BadRecord(GateError):
    """A record that cannot be read as one: not valid JSON (corrupted,
    truncated), too large or too deeply nested, a field missing or of the
    wrong type or value (named by its path), or content that does not match
    its hashes (edited or damaged)."""

    exit_code = 4


class SchemaTooNew(GateError):
    """A record written by a newer DeviceKit (a schema version this one does not know)."""

    exit_code = 5


class BadPolicy(GateError):
    """A policy file with a TOML error, an unknown key or a value of the wrong type."""

    exit_code = 6


class PluginMismatch(GateError):
    """The new record and the baseline certify different plugins."""

    exit_code = 7


class SignatureRefused(GateError):
    """``--trust``: a record or baseline that is unsigned, signed by a key not
    trusted, or whose signature does not verify or covers other content."""

    exit_code = 8


class BadKey(GateError):
    """A ``--sign``/``--trust`` key file that is not an Ed25519 PEM key of the
    right kind, or signing asked for without the ``cryptography`` package."""

    exit_code = 2
