"""The release gate (docs/gate.md): certify a plugin binary into one record,
check a new record against the last certified one under a policy, and show
many records as a compatibility matrix.

- :mod:`.record`: the certification record (build, load, write; its content hash);
- :mod:`.validate`: reading a record safely (size, nesting, ``record.schema.json``);
- :mod:`.sign`: signed records (a DSSE envelope, Ed25519 keys);
- :mod:`.perf`: the short performance set certify measures;
- :mod:`.parts`: certify's parts as child processes within one deadline;
- :mod:`.policy`: ``policy.toml`` (level, model set, dtypes, thresholds, waivers);
- :mod:`.check`: the rules, the verdict and its reasons (text, JUnit, HTML);
- :mod:`.matrix`: records side by side (JSON and static HTML);
- :mod:`.cli`: ``devicekit gate certify | check | matrix | sign``.
"""

from .errors import (BadKey, BadPolicy, BadRecord, GateError, MissingInput, PluginMismatch,
                     SchemaTooNew, SignatureRefused)

__all__ = ["BadKey", "BadPolicy", "BadRecord", "GateError", "MissingInput", "PluginMismatch",
           "SchemaTooNew", "SignatureRefused"]
