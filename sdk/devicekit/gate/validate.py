"""Reading a record safely: before any rule runs, a record (or baseline) is
checked for size (before it is read), nesting depth and its schema, and
refused with one line naming the first bad field by its path
(``conformance.cases[12].outcome: expected one of pass, fail, ...``).

The schema is ``record.schema.json`` beside this file (JSON Schema 2020-12,
checked with ``jsonschema``): it types every field a rule of ``gate check``
or ``gate matrix`` reads, and doubles as the record's machine-readable
documentation. It describes the on-disk form (cases as rows).
"""

import json
from importlib import resources

from .._util.bounded import truncated_or_corrupted
from .errors import BadRecord

# Refused before reading: the reference CPU plugin's record is under 1 MiB; a
# real accelerator's, with every dtype, a few MiB.
MAX_BYTES = 256 * 1024 * 1024
# Deeper than any field of a record (a performance row's shapes: 5 levels);
# checked without recursion, so a hostile file cannot exhaust the stack later.
MAX_DEPTH = 32

_validator = None


def read_json(path, role, stream, size):
    """The parsed JSON of a file opened as ``stream`` of ``size`` bytes
    (from stat), within :data:`MAX_BYTES` and :data:`MAX_DEPTH`."""
    if size > MAX_BYTES:
        raise BadRecord(path, f"{role} is {_size(size)}, larger than the {_size(MAX_BYTES)} a "
                              f"record may be (refused unread)")
    raw = stream.read(MAX_BYTES + 1)  # a file that grows, or a device, stops here too
    if len(raw) > MAX_BYTES:
        raise BadRecord(path, f"{role} is larger than the {_size(MAX_BYTES)} a record may be")
    try:
        doc = json.loads(raw.decode("utf-8"))
    except RecursionError:
        raise BadRecord(path, f"{role} is nested too deeply to be a record (more than "
                              f"{MAX_DEPTH} levels)") from None
    except (UnicodeDecodeError, ValueError) as e:  # JSONDecodeError, over-long integers
        raise BadRecord(path, f"{role} is not valid JSON ({truncated_or_corrupted(raw, e)}?): "
                              f"{e}") from None
    where = too_deep(doc)
    if where is not None:
        raise BadRecord(path, f"{where}: nested deeper than {MAX_DEPTH} levels")
    return doc


def _size(n):
    return f"{n / 2**20:.0f} MiB" if n >= 2**20 else f"{n} bytes"


def too_deep(doc, limit=MAX_DEPTH):
    """The path of the first value nested deeper than ``limit``, or None."""
    stack = [(doc, 0, ())]
    while stack:
        value, depth, path = stack.pop()
        if depth > limit:
            return field_path(path) or "(the document)"
        if isinstance(value, dict):
            stack.extend((v, depth + 1, (*path, k)) for k, v in value.items())
        elif isinstance(value, list):
            stack.extend((v, depth + 1, (*path, i)) for i, v in enumerate(value))
    return None


_CASE_FIELDS = ("id", "section", "op", "dtype", "required", "outcome")


def field_path(parts):
    """``conformance.cases[12].outcome`` for ('conformance', 'cases', 12, 5):
    a case row's column by its case_fields name."""
    out = ""
    parts = list(parts)
    for i, p in enumerate(parts):
        if isinstance(p, int):
            in_row = i >= 2 and parts[i - 1] != "cases" and parts[i - 2] == "cases" and \
                p < len(_CASE_FIELDS)
            out += f".{_CASE_FIELDS[p]}" if in_row else f"[{p}]"
        else:
            out += f".{p}" if out else str(p)
    return out


def _json_type(value):
    if value is None:
        return "null"
    for kind, name in ((bool, "a boolean"), (int, "an integer"), (float, "a number"),
                       (str, "a string"), (list, "an array"), (dict, "an object")):
        if isinstance(value, kind):
            return name
    return type(value).__name__


def _show(value):
    """'a string "x"', 'an array': what was found instead."""
    if isinstance(value, (dict, list)):
        return _json_type(value)
    text = json.dumps(value)
    return f"{_json_type(value)} {text if len(text) <= 60 else text[:57] + '...'}"


def _value(value):
    text = json.dumps(value) if not isinstance(value, (dict, list)) else _json_type(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _message(err):
    """One line for a jsonschema error: path, what was expected, what was there."""
    path = field_path(err.absolute_path) or "(the document)"
    v, arg, got = err.validator, err.validator_value, err.instance
    if v == "required":
        missing = next((k for k in arg if isinstance(got, dict) and k not in got), "?")
        sub = f"{path}.{missing}" if err.absolute_path else missing
        return f"{sub}: missing"
    if v == "dependentRequired":
        return f"{path}: a signed record must have content_sha256"
    if v == "type":
        kinds = [arg] if isinstance(arg, str) else list(arg)
        return f"{path}: expected {' or '.join(kinds)}, got {_show(got)}"
    if v == "enum":
        return f"{path}: expected one of {', '.join(map(str, arg))}, got {_value(got)}"
    if v == "const":
        return f"{path}: expected {json.dumps(arg)}, got {_value(got)}"
    if v == "pattern":
        return f"{path}: expected a sha256 (64 lowercase hex digits), got {_value(got)}"
    if v in ("minimum", "exclusiveMinimum"):
        return f"{path}: expected a number {'>' if v == 'exclusiveMinimum' else '>='} {arg}, " \
               f"got {_value(got)}"
    if v in ("minItems", "maxItems") and err.absolute_path and \
            list(err.absolute_path)[-2:-1] == ["cases"]:
        return f"{path}: expected a row of {len(_CASE_FIELDS)} fields ({', '.join(_CASE_FIELDS)})"
    return f"{path}: {' '.join(err.message.split())[:200]}"


def schema():
    return json.loads(resources.files("devicekit.gate").joinpath("record.schema.json")
                      .read_text())


def check_schema(doc, path):
    """Raises :class:`BadRecord` naming the first field of ``doc`` that the
    schema refuses (in document order)."""
    global _validator
    if _validator is None:
        import jsonschema

        _validator = jsonschema.Draft202012Validator(schema())
    errors = list(_validator.iter_errors(doc)) if not _validator.is_valid(doc) else []
    if errors:
        first = min(errors, key=lambda e: _order(doc, e))
        raise BadRecord(path, _message(first))


def _order(doc, err):
    """Where ``err`` sits in the document, as a sortable key (fields in file order)."""
    key, node = [], doc
    for p in err.absolute_path:
        if isinstance(node, dict):
            key.append(list(node).index(p) if p in node else len(node))
        else:
            key.append(p if isinstance(p, int) else 0)
        try:
            node = node[p]
        except (KeyError, IndexError, TypeError):
            break
    return key
