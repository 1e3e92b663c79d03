"""Plugin discovery and the process-wide registry of loaded plugins.

Candidates come from two places, in this order:

1. the entry-point group ``devicekit.plugins``: each entry point names a
   callable returning the plugin library's path (installed plugin wheels);
2. ``DEVICEKIT_PLUGIN_PATH``: ``os.pathsep``-separated library files or
   folders (every shared library in a folder), for development builds.

Every candidate is loaded independently; a failure is recorded with its real
cause and never stops the others. Nothing falls back silently.
"""

import os
import sys
import threading
from dataclasses import dataclass, field
from importlib import metadata
from typing import List, Optional

from . import _core
from .errors import DeviceKitError, DeviceNotFoundError, PluginLoadError

ENTRY_POINT_GROUP = "devicekit.plugins"
PATH_ENV = "DEVICEKIT_PLUGIN_PATH"
_LIB_SUFFIXES = {"darwin": (".dylib", ".so"), "win32": (".dll",)}.get(sys.platform, (".so",))


@dataclass
class PluginRecord:
    """One discovered candidate: loaded (``plugin`` set) or not (``error`` set)."""

    name: str
    path: Optional[str]
    source: str
    plugin: Optional[object] = None
    error: Optional[str] = None
    error_type: Optional[str] = None
    devices: List[object] = field(default_factory=list)

    @property
    def loaded(self):
        return self.plugin is not None


_lock = threading.Lock()
_records: Optional[List[PluginRecord]] = None


def _entry_point_candidates():
    try:
        eps = metadata.entry_points(group=ENTRY_POINT_GROUP)
    except TypeError:  # Python < 3.10
        eps = metadata.entry_points().get(ENTRY_POINT_GROUP, [])
    for ep in sorted(eps, key=lambda e: e.name):
        source = f"entry point '{ep.name}'"
        try:
            target = ep.load()
            path = target() if callable(target) else target
            yield ep.name, os.fspath(path), source, None
        except Exception as e:  # a broken plugin package must not break discovery
            yield ep.name, None, source, PluginLoadError(
                f"entry point '{ep.name}' = '{ep.value}' could not be resolved to a library "
                f"path: {type(e).__name__}: {e}")


def _path_candidates():
    for item in os.environ.get(PATH_ENV, "").split(os.pathsep):
        if not item:
            continue
        if os.path.isdir(item):
            libs = sorted(f for f in os.listdir(item) if f.endswith(_LIB_SUFFIXES))
            if not libs:
                yield os.path.basename(item.rstrip(os.sep)), item, PATH_ENV, PluginLoadError(
                    f"folder '{item}' (from {PATH_ENV}) contains no plugin library "
                    f"({', '.join(_LIB_SUFFIXES)})")
            for f in libs:
                yield _stem(f), os.path.join(item, f), PATH_ENV, None
        else:
            yield _stem(os.path.basename(item)), item, PATH_ENV, None


def _stem(filename):
    name = filename.split(".")[0]
    return name[3:] if name.startswith("lib") else name


def _discover():
    records = []
    by_name = {}
    seen_paths = {}
    for stem, path, source, err in [*_entry_point_candidates(), *_path_candidates()]:
        rec = PluginRecord(name=stem, path=path, source=source)
        records.append(rec)
        if err is not None:
            rec.error, rec.error_type = str(err), type(err).__name__
            continue
        real = os.path.realpath(path)
        if real in seen_paths:
            rec.error_type = "PluginLoadError"
            rec.error = f"'{path}' is the same library as '{seen_paths[real]}', listed twice"
            continue
        seen_paths[real] = path
        try:
            plugin = _core.load_plugin(path)
        except DeviceKitError as e:
            rec.error, rec.error_type = str(e), type(e).__name__
            continue
        rec.name = plugin.name
        if plugin.name in by_name:
            rec.error_type = "PluginLoadError"
            rec.error = (f"plugin name '{plugin.name}' from '{path}' is already provided by "
                         f"'{by_name[plugin.name].path}' ({by_name[plugin.name].source}); "
                         f"device names must be unique, so this one is not used")
            continue
        rec.plugin = plugin
        rec.devices = list(plugin.devices)
        by_name[plugin.name] = rec
    return records


def records():
    global _records
    with _lock:
        if _records is None:
            _records = _discover()
        return _records


def reload_plugins():
    """Run discovery again (e.g. after changing DEVICEKIT_PLUGIN_PATH).
    Libraries already loaded stay loaded; their devices keep working."""
    global _records
    with _lock:
        _records = None
    return records()


def plugins():
    """Every discovered plugin candidate, loaded or not, as PluginRecord."""
    return list(records())


def devices():
    """Every device of every loaded plugin."""
    return [d for r in records() if r.plugin is not None for d in r.devices]


def device(spec=None):
    """Resolve ``"cpu:0"``, ``"cpu"`` (index 0) or a Device to a Device."""
    if isinstance(spec, _core.Device):
        return spec
    if spec is None:
        all_devices = devices()
        if not all_devices:
            raise DeviceNotFoundError(_no_devices_message())
        return all_devices[0]
    if not isinstance(spec, str):
        raise DeviceNotFoundError(f"expected a device name like 'cpu:0' or a Device, got {spec!r}")
    name = spec if ":" in spec else spec + ":0"
    for d in devices():
        if d.name == name:
            return d
    available = ", ".join(d.name for d in devices()) or "none"
    raise DeviceNotFoundError(f"no device '{spec}'; available devices: {available}"
                              + _load_errors_hint(spec.split(":")[0]))


def _load_errors_hint(type_name):
    failed = [r for r in records() if r.error and r.name == type_name]
    return "".join(f"\n  plugin '{r.name}' failed to load: {r.error}" for r in failed)


def _no_devices_message():
    failed = [r for r in records() if r.error]
    msg = "no DeviceKit device is available"
    if failed:
        msg += "; plugins that failed to load:" + "".join(f"\n  {r.name}: {r.error}" for r in failed)
    else:
        msg += f" (no plugin found via entry points '{ENTRY_POINT_GROUP}' or {PATH_ENV})"
    return msg


def load_plugin(path):
    """Load one plugin library outside discovery and return it (raises on failure)."""
    return _core.load_plugin(os.fspath(path))
