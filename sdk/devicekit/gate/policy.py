"""``policy.toml``: what a release requires (docs/gate.md, ci/policy.toml).

Parsed with the standard library's ``tomllib`` (Python >= 3.11) or the
``tomli`` package it came from (3.9/3.10). Validated strictly against
:data:`SCHEMA`: an unknown key, a value of the wrong type or an unknown
enumeration value is a :class:`~devicekit.gate.errors.BadPolicy` naming the
file, the key and the problem, because a typo in a release policy must not
silently relax it.
"""

import datetime
import fnmatch
import os
from dataclasses import dataclass, field
from importlib import resources
from typing import List, Optional

try:
    import tomllib
except ImportError:  # Python < 3.11: the same parser, packaged as tomli
    import tomli as tomllib

from .errors import BadPolicy, MissingInput

POLICY_VERSION = 1
LEVELS = ("core", "full")
RULES = ("conformance.level", "conformance.regression", "conformance.required",
         "models.regression", "models.required", "models.loss_band", "performance.slowdown",
         "performance.missing", "performance.repeats", "performance.machine")
# binary.sha256 is deliberately not waivable: a record that names another binary
# certifies nothing about the one being released.

# key -> (type, default, check or None); sections are nested dicts.
_STR_LIST = "list of strings"
SCHEMA = {
    "schema_version": (int, POLICY_VERSION, lambda v: v == POLICY_VERSION or
                       f"this DeviceKit reads policy schema {POLICY_VERSION}, got {v}"),
    "conformance": {
        "level": (str, "full", lambda v: v in LEVELS or f"must be one of {', '.join(LEVELS)}"),
        "required_dtypes": (_STR_LIST, ["float32"], None),
        "allow_partial": (bool, False, None),
    },
    "models": {
        "required": (_STR_LIST, [], None),
        "dtypes": (_STR_LIST, ["float32"], None),
        "loss_band": (float, 0.01, lambda v: v >= 0 or "must be >= 0"),
    },
    "performance": {
        "enabled": (bool, True, None),
        "max_slowdown": (float, 1.5, lambda v: v >= 1 or "must be >= 1 (a ratio new/old)"),
        "min_repeats": (int, 5, lambda v: v >= 1 or "must be >= 1"),
        "other_machine": (str, "skip", lambda v: v in ("skip", "refuse") or
                          "must be 'skip' or 'refuse'"),
    },
}
WAIVER = {
    "rule": (str, None, lambda v: v in RULES or f"must be one of {', '.join(RULES)}"),
    "subject": (str, None, None),
    "reason": (str, None, lambda v: bool(v.strip()) or "must say why"),
    "expires": (datetime.date, None, None),
}


@dataclass
class Waiver:
    rule: str
    subject: str  # a case/model/figure id or an fnmatch pattern over it
    reason: str
    expires: datetime.date

    def matches(self, rule, subject):
        return rule == self.rule and fnmatch.fnmatchcase(subject, self.subject)

    def expired(self, today=None):
        return (today or datetime.date.today()) > self.expires

    def describe(self):
        return f"{self.rule} {self.subject} until {self.expires.isoformat()}: {self.reason}"


@dataclass
class Policy:
    path: str
    level: str = "full"
    required_dtypes: List[str] = field(default_factory=lambda: ["float32"])
    allow_partial: bool = False
    models: List[str] = field(default_factory=list)
    model_dtypes: List[str] = field(default_factory=lambda: ["float32"])
    loss_band: float = 0.01
    perf_enabled: bool = True
    max_slowdown: float = 1.5
    min_repeats: int = 5
    other_machine: str = "skip"
    waivers: List[Waiver] = field(default_factory=list)
    raw: Optional[dict] = None


def _type_ok(kind, v):
    if kind == _STR_LIST:
        return isinstance(v, list) and all(isinstance(x, str) for x in v)
    if kind is float:
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    if kind is int:
        return isinstance(v, int) and not isinstance(v, bool)
    if kind is datetime.date:  # a TOML date, not a date-time
        return isinstance(v, datetime.date) and not isinstance(v, datetime.datetime)
    return isinstance(v, kind)


def _kind_name(kind):
    return {_STR_LIST: "a list of strings", float: "a number", int: "an integer",
            bool: "true or false", str: "a string",
            datetime.date: "a TOML date like 2027-01-31 (unquoted)"}[kind]


def _validate(path, table, schema, where, required=False):
    out = {}
    for key in table:
        if key not in schema:
            raise BadPolicy(path, f"unknown key '{where}{key}'; known keys here: "
                                  f"{', '.join(schema)}")
    for key, spec in schema.items():
        name = f"{where}{key}"
        if isinstance(spec, dict):
            sub = table.get(key, {})
            if not isinstance(sub, dict):
                raise BadPolicy(path, f"'{name}' must be a table ([{name}])")
            out[key] = _validate(path, sub, spec, name + ".")
            continue
        kind, default, check = spec
        if key not in table:
            if required:
                raise BadPolicy(path, f"'{name}' is missing")
            out[key] = default
            continue
        v = table[key]
        if not _type_ok(kind, v):
            raise BadPolicy(path, f"'{name}' must be {_kind_name(kind)}, got {v!r}")
        why = check(v) if check else True
        if why is not True:
            raise BadPolicy(path, f"'{name}' = {v!r}: {why}")
        out[key] = float(v) if kind is float else v
    return out


def parse(text, path="<policy>"):
    """A :class:`Policy` from TOML text; :class:`BadPolicy` on any problem."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise BadPolicy(path, f"not valid TOML: {e}") from None
    waivers = data.pop("waivers", [])
    if not isinstance(waivers, list) or not all(isinstance(w, dict) for w in waivers):
        raise BadPolicy(path, "'waivers' must be an array of tables ([[waivers]])")
    v = _validate(path, data, SCHEMA, "")
    ws = [Waiver(**_validate(path, w, WAIVER, f"waivers[{i}].", required=True))
          for i, w in enumerate(waivers)]
    c, m, p = v["conformance"], v["models"], v["performance"]
    return Policy(path=path, level=c["level"], required_dtypes=c["required_dtypes"],
                  allow_partial=c["allow_partial"],
                  models=m["required"], model_dtypes=m["dtypes"], loss_band=m["loss_band"],
                  perf_enabled=p["enabled"], max_slowdown=p["max_slowdown"],
                  min_repeats=p["min_repeats"], other_machine=p["other_machine"],
                  waivers=ws, raw=v)


RELEASE = "release"  # --policy release: the policy shipped in the package (ci/policy.toml)


def release_policy_path():
    return str(resources.files("devicekit.gate").joinpath("policy.toml"))


def load(path):
    """Reads a policy file; ``"release"`` is DeviceKit's release policy as installed."""
    if path == RELEASE:
        path = release_policy_path()
        if not os.path.exists(path):
            raise MissingInput(path, "the release policy is not installed with this devicekit "
                                     "(a source checkout: pass ci/policy.toml)")
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        raise MissingInput(path, "policy file not found") from None
    except OSError as e:
        raise MissingInput(path, f"cannot read the policy: {e.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BadPolicy(path, "not UTF-8 text") from None
    return parse(text, str(path))
