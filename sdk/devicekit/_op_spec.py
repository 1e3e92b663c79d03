"""The op spec (device_api/spec/base_ops.json): reading it, and the base ops
each device API version has. A leaf: ``scaffold`` (the templates' op table)
and ``api_target`` (``devicekit upgrade-api``) both read it from here."""

import json
from pathlib import Path

from .errors import DeviceKitError


class OpSpecError(DeviceKitError):
    """The op spec is missing or unreadable: a broken installation."""

    exit_code = 6  # as ``devicekit new``'s other broken-installation error


def load_spec() -> dict:
    """The op spec (device_api/spec/base_ops.json) as shipped in devicekit/data,
    the file conformance reads too; in a source tree, the spec itself."""
    here = Path(__file__).resolve().parent
    for candidate in (here / "data" / "base_ops.json",
                      here.parent.parent / "device_api" / "spec" / "base_ops.json"):
        if candidate.is_file():
            try:
                return json.loads(candidate.read_text())
            except (OSError, ValueError) as e:
                raise OpSpecError(f"cannot read the op spec {candidate}: {e}; "
                                  f"reinstall devicekit") from e
    raise OpSpecError(f"op spec not found at {here / 'data' / 'base_ops.json'}; "
                      f"reinstall devicekit")


def since(op) -> tuple:
    return tuple(map(int, op["since"].split(".")))


def base_ops(major: int, minor: int, spec=None) -> list:
    """Every base op of API major.minor, in DK_OpId order, from the op spec
    (``spec``: a loaded spec; default: the shipped one): the kernel table the
    templates generate is exactly as long as the header's for that version."""
    spec = load_spec() if spec is None else spec
    ops = []
    for value, o in enumerate(spec["ops"]):
        if since(o) > (major, minor):
            break  # append-only: every later op is newer still
        attrs = f"attrs {o['attrs']}" if o["attrs"] else "no attrs"
        ops.append({"name": o["name"], "since": o["since"], "id": o["name"].upper(),
                    "value": value, "signature": f"{o['name']}({', '.join(o['inputs'])}) -> "
                                                 f"{', '.join(o['outputs'])}; {attrs}"})
    return ops


def op_count_macro(major: int, minor: int, spec=None) -> str:
    """The header macro counting the base ops of API major.minor: the
    DK_OP_COUNT_<major>_<m> of the newest minor m <= minor that added ops (a
    minor that added none, like 1.2, has no count of its own)."""
    ops = base_ops(major, minor, spec)
    if not ops:
        raise OpSpecError(f"the op spec has no base op of device API {major}.{minor}; "
                          f"reinstall devicekit")
    newest = max(since(op) for op in ops)
    return f"DK_OP_COUNT_{newest[0]}_{newest[1]}"
