"""``policy.toml``: what a release requires (docs/gate.md, ci/policy.toml).

Parsed with the standard library's ``tomllib`` (Python >= 3.11) or the
``tomli`` package it came from (3.9/3.10), after a look at the file itself
(a regular file of at most :data:`MAX_BYTES`: a policy is a page of text).
Validated strictly against :data:`SCHEMA` before any rule runs: an unknown
key, a value of the wrong type, a dtype, model, op, level or rule the SDK
does not know (checked against its own lists: ``devicekit.dtypes``, the op
spec, the model zoo, the conformance sections), a threshold that is not a
finite number in its range (``inf`` would switch a rule off), or a waiver
whose subject can match nothing, is a :class:`~devicekit.gate.errors.BadPolicy`
naming the file, the key and the allowed values, because a typo in a release
policy must not silently relax it. The checks are explicit code over one table
rather than a JSON Schema: the table is small, TOML has dates JSON Schema
does not, and every message names the allowed values in the policy's words.
"""

import datetime
import fnmatch
import functools
import math
import os
from dataclasses import dataclass, field
from importlib import resources
from typing import List, Optional

try:
    import tomllib
except ImportError:  # Python < 3.11: the same parser, packaged as tomli
    import tomli as tomllib

from .._util.bounded import Unreadable, read_bounded
from .errors import BadPolicy, MissingInput

POLICY_VERSION = 1
LEVELS = ("core", "full")
RULES = ("conformance.level", "conformance.regression", "conformance.required",
         "models.regression", "models.required", "models.loss_band", "performance.slowdown",
         "performance.missing", "performance.repeats", "performance.machine")
# binary.sha256 is deliberately not waivable: a record that names another binary
# certifies nothing about the one being released.
TIMINGS = ("alternate", "recorded")  # performance.timing: see docs/gate.md, "Performance"
MAX_BYTES = 1 << 20  # a policy is a page of text; anything larger is not one
MAX_ROUNDS = 1000


@functools.lru_cache(maxsize=None)
def known():
    """{kind: allowed values}: the SDK's own lists, so a policy can name only
    what a record can contain."""
    from .. import _core, _op_facts
    from .. import models as zoo
    from ..conformance.registry import sections
    from ..models import harness

    return {"dtype": tuple(name for name, _ in _core.DTYPES),
            "op": tuple(_op_facts.OPS),
            "model": tuple(zoo.ALL_NAMES),  # the zoo and the hf-* models
            "model dtype": tuple(harness.DTYPES),
            "phase": tuple(harness.ALL_PHASES),
            "section": tuple(dict.fromkeys(s.name for s, _ in sections()))}


def _listing(values):
    return ", ".join(str(v) for v in values)


def _a(kind):
    return ("an " if kind[0] in "aeiou" else "a ") + kind


def _one_of(values):
    return lambda v: v in values or f"must be one of {_listing(values)}"


def _each_known(kind):
    """A check that every element of a list is a known ``kind``, listed once."""
    def check(v):
        allowed = known()[kind]
        for x in v:
            if x not in allowed:
                return f"'{x}' is not {_a(kind)} DeviceKit knows; allowed: {_listing(allowed)}"
        twice = [x for i, x in enumerate(v) if x in v[:i]]
        return not twice or f"'{twice[0]}' is listed twice"
    return check


def _finite(lo, hi, why=""):
    """A check that a number is finite and in [lo, hi] (``inf`` or ``nan``
    would switch the rule off; a negative band or a slowdown below 1 means
    nothing)."""
    def check(v):
        try:
            v = float(v)
        except OverflowError:  # an integer beyond any float
            v = math.inf
        if not math.isfinite(v) or not lo <= v <= hi:
            return f"must be a finite number from {lo:g} to {hi:g}{why}"
        return True
    return check


# key -> (type, default, check or None); sections are nested dicts.
_STR_LIST = "list of strings"
SCHEMA = {
    "schema_version": (int, POLICY_VERSION, lambda v: v == POLICY_VERSION or
                       f"this DeviceKit reads policy schema {POLICY_VERSION}, got {v}"),
    "conformance": {
        "level": (str, "full", _one_of(LEVELS)),
        "required_dtypes": (_STR_LIST, ["float32"], _each_known("dtype")),
        "allow_partial": (bool, False, None),
        "part_sections": (_STR_LIST, [], _each_known("section")),
    },
    "models": {
        "required": (_STR_LIST, [], _each_known("model")),
        "dtypes": (_STR_LIST, ["float32"], _each_known("model dtype")),
        "loss_band": (float, 0.01, _finite(0, 1, " (a relative change per step)")),
    },
    "performance": {
        "enabled": (bool, True, None),
        "timing": (str, "alternate", _one_of(TIMINGS)),
        "max_slowdown": (float, 1.5, _finite(1, 100, " (a ratio new/old)")),
        "min_repeats": (int, 5, lambda v: 1 <= v <= MAX_ROUNDS or
                        f"must be from 1 to {MAX_ROUNDS}"),
        "rounds": (int, 15, lambda v: 1 <= v <= MAX_ROUNDS or f"must be from 1 to {MAX_ROUNDS}"),
        "other_machine": (str, "skip", _one_of(("skip", "refuse"))),
    },
}
WAIVER = {
    "rule": (str, None, _one_of(RULES)),
    "subject": (str, None, lambda v: bool(v.strip()) or "must name a case, model or figure "
                                                         "(fnmatch patterns allowed)"),
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
    #: sections named after an optional device API part (collectives): a
    #: plugin whose record declares the part must have run the section
    part_sections: List[str] = field(default_factory=list)
    models: List[str] = field(default_factory=list)
    model_dtypes: List[str] = field(default_factory=lambda: ["float32"])
    loss_band: float = 0.01
    perf_enabled: bool = True
    perf_timing: str = "alternate"
    max_slowdown: float = 1.5
    min_repeats: int = 5
    rounds: int = 15
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


def _short(v, width=60):
    """``repr(v)``, cut to fit in a one-line message."""
    text = repr(v)
    return text if len(text) <= width else text[:width - 3] + "..."


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
            out[key] = list(default) if isinstance(default, list) else default
            continue
        v = table[key]
        if not _type_ok(kind, v):
            raise BadPolicy(path, f"'{name}' must be {_kind_name(kind)}, got {_short(v)}")
        why = check(v) if check else True
        if why is not True:
            raise BadPolicy(path, f"'{name}' = {_short(v)}: {why}")
        out[key] = float(v) if kind is float else v
    return out


# The subjects each rule's reasons carry (check.py), as positions of their
# '/'-separated parts: (literal subjects, [(first part, kinds of the parts after it)]).
_CASE = [("ops", ("op", "dtype")), ("kernels", ("op", "dtype|invalid")), ("*", ())]
_FIGURE = ("op", "dtype")
_SUBJECTS = {
    "conformance.level": (("conformance",), []),
    "conformance.regression": ((), _CASE),
    "conformance.required": (("corpus",), _CASE),
    "models.regression": ((), [("models", ("model", "model dtype", "phase"))]),
    "models.required": ((), [("models", ("model", "model dtype", "phase"))]),
    "models.loss_band": ((), [("", ("model", "model dtype"))]),
    "performance.slowdown": ((), [("", _FIGURE)]),
    "performance.missing": (("performance",), [("", _FIGURE)]),
    "performance.repeats": ((), [("", _FIGURE)]),
    "performance.machine": (("performance",), []),
}


def _part_problem(pattern, kind):
    """Why one '/'-part of a subject pattern matches no value of ``kind``, or None."""
    if kind is None:
        return None
    allowed = tuple(v for k in kind.split("|") for v in (known().get(k) or (k,)))
    if any(fnmatch.fnmatchcase(v, pattern) for v in allowed):
        return None
    return (f"'{pattern}' is not {_a(kind.split('|')[0])} DeviceKit knows; "
            f"allowed: {_listing(allowed)}")


def subject_problem(rule, subject):
    """Why a waiver's ``subject`` (an fnmatch pattern) can match no subject of
    ``rule``, or None. Parts are checked from the left up to the first one with
    a '*' (which may span '/'): ``ops/erf/flaot16/*`` and ``models/mpl/*`` are
    typos; ``ops/er*/float16/*`` and ``*`` are patterns."""
    literals, forms = _SUBJECTS[rule]
    if any(fnmatch.fnmatchcase(lit, subject) for lit in literals):
        return None
    if not forms:
        return f"this rule's only subject is {_listing(literals)}"
    parts = subject.split("/")
    if "*" in parts[0]:
        return None
    for first, kinds in forms:
        if first == "*":  # any other conformance section: its name is all we know
            return _part_problem(parts[0], "section")
        if first and not fnmatch.fnmatchcase(first, parts[0]):
            continue
        for part, kind in zip(parts[1:] if first else parts, kinds):
            if "*" in part:
                return None
            why = _part_problem(part, kind)
            if why:
                return why
        return None
    return f"'{parts[0]}' starts no subject of this rule (e.g. {forms[0][0]}/...)"


def _deep(value, limit):
    """Whether ``value`` nests lists/dicts deeper than ``limit`` (no recursion)."""
    todo = [(value, 0)]
    while todo:
        v, d = todo.pop()
        if isinstance(v, (list, dict)):
            if d >= limit:
                return True
            todo.extend((x, d + 1) for x in (v.values() if isinstance(v, dict) else v))
    return False


def parse(text, path="<policy>"):
    """A :class:`Policy` from TOML text; :class:`BadPolicy` on any problem."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise BadPolicy(path, f"not valid TOML: {e}") from None
    except RecursionError:  # tomllib recurses per nesting level
        raise BadPolicy(path, "nests arrays or tables too deeply to be a policy") from None
    if _deep(data, 8):
        raise BadPolicy(path, "nests arrays or tables deeper than a policy does (at most "
                              "[[waivers]] of plain values)")
    waivers = data.pop("waivers", [])
    if not isinstance(waivers, list) or not all(isinstance(w, dict) for w in waivers):
        raise BadPolicy(path, "'waivers' must be an array of tables ([[waivers]])")
    v = _validate(path, data, SCHEMA, "")
    p = v["performance"]
    if p["rounds"] < p["min_repeats"]:
        raise BadPolicy(path, f"'performance.rounds' = {p['rounds']} is below "
                              f"'performance.min_repeats' = {p['min_repeats']}")
    ws = []
    for i, w in enumerate(waivers):
        w = _validate(path, w, WAIVER, f"waivers[{i}].", required=True)
        why = subject_problem(w["rule"], w["subject"])
        if why:
            raise BadPolicy(path, f"'waivers[{i}].subject' = {w['subject']!r} can match nothing "
                                  f"{w['rule']} refuses: {why}")
        ws.append(Waiver(**w))
    c, m = v["conformance"], v["models"]
    return Policy(path=path, level=c["level"], required_dtypes=c["required_dtypes"],
                  allow_partial=c["allow_partial"], part_sections=c["part_sections"],
                  models=m["required"], model_dtypes=m["dtypes"], loss_band=m["loss_band"],
                  perf_enabled=p["enabled"], perf_timing=p["timing"],
                  max_slowdown=p["max_slowdown"], min_repeats=p["min_repeats"],
                  rounds=p["rounds"], other_machine=p["other_machine"], waivers=ws, raw=v)


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
    try:  # look before reading: a huge file or a device must not be read whole
        raw = read_bounded(path, MAX_BYTES)
    except Unreadable as e:
        if e.kind == "missing":
            raise MissingInput(path, "policy file not found") from None
        if e.kind == "unreadable":
            raise MissingInput(path, f"cannot read the policy: {e.reason}") from None
        if e.kind == "not_regular":
            raise BadPolicy(path, "not a regular file (a policy is a TOML file)") from None
        size = f"{e.size} bytes: larger" if e.size is not None else "larger"
        raise BadPolicy(path, f"{size} than a policy can be ({MAX_BYTES} bytes)") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BadPolicy(path, "not UTF-8 text") from None
    return parse(text, str(path))
