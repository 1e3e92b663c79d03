"""The release gate (docs/gate.md): certify a plugin binary into one record,
check a new record against the last certified one under a policy, and show
many records as a compatibility matrix.

- :mod:`.record`: the certification record (schema, build, load, write);
- :mod:`.perf`: the short performance set certify measures;
- :mod:`.policy`: ``policy.toml`` (level, model set, dtypes, thresholds, waivers);
- :mod:`.check`: the rules, the verdict and its reasons (text, JUnit, HTML);
- :mod:`.matrix`: records side by side (JSON and static HTML);
- :mod:`.cli`: ``devicekit gate certify | check | matrix``.
"""

from .errors import (BadPolicy, BadRecord, GateError, MissingInput, PluginMismatch,
                     SchemaTooNew)

__all__ = ["BadPolicy", "BadRecord", "GateError", "MissingInput", "PluginMismatch",
           "SchemaTooNew"]
