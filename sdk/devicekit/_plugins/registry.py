"""Plugin discovery and the process-wide registry of loaded plugins.

Candidates come from three places, in this order:

1. ``DEVICEKIT_PLUGIN_OVERRIDE``: development builds that take precedence
   over installed plugins (``devicekit dev`` sets it). An installed plugin
   of the same name is not loaded; its record says which build shadows it;
2. the entry-point group ``devicekit.plugins``: each entry point names a
   callable returning the plugin library's path (installed plugin wheels);
3. ``DEVICEKIT_PLUGIN_PATH``: ``os.pathsep``-separated library files or
   folders (every shared library in a folder), for development builds that
   add plugins; one whose name is already installed is refused as a
   duplicate. Entries of both variables are file-system paths (relative to
   the current folder), never names for the dynamic linker to search.

Every candidate is vetted by a probe in a subprocess (devicekit._plugins.probe; its
successes are cached by devicekit._plugins.probe_cache) before it is loaded into this
process, and loaded independently: a failure, crash or hang is recorded with
its real cause and never stops the others. Nothing falls back silently.

Loading is lazy per plugin name: ``device("cpu:0")`` loads only the candidate
that provides ``cpu`` (found by its cached probe, entry-point name or file
name; everything is probed when none of those names it). ``plugins()``,
``devices()`` and ``device(None)`` load every candidate.
"""

import os
import sys
import threading
import warnings
from dataclasses import dataclass, field
from importlib import metadata
from typing import List, Optional

# _probe (subprocess, signal) and concurrent.futures are imported only when a
# probe has to run: a warm start-up should not pay for their import.
from .. import _core
from . import probe_cache as _probe_cache
from ..errors import DeviceKitError, DeviceNotFoundError, PluginLoadError

ENTRY_POINT_GROUP = "devicekit.plugins"
PATH_ENV = "DEVICEKIT_PLUGIN_PATH"
OVERRIDE_ENV = "DEVICEKIT_PLUGIN_OVERRIDE"
_LIB_SUFFIXES = {"darwin": (".dylib", ".so"), "win32": (".dll",)}.get(sys.platform, (".so",))
_MAX_PARALLEL_PROBES = 8


@dataclass
class PluginRecord:
    """One discovered candidate: loaded (``plugin`` set) or not (``error`` set).

    ``probe`` says how the library was vetted before it was loaded here:
    ``"cached"`` (an earlier probe of this exact file), ``"probed"`` (a probe
    subprocess ran now), ``"loaded"`` (this process had loaded it already),
    ``"failed"`` (the probe, or an earlier load in this process, found the
    error), or None (nothing to probe: a missing file, a duplicate listing, an
    unresolved entry point).
    """

    name: str
    path: Optional[str]
    source: str
    plugin: Optional[object] = None
    error: Optional[str] = None
    error_type: Optional[str] = None
    devices: List[object] = field(default_factory=list)
    probe: Optional[str] = None
    _pending: bool = field(default=True, repr=False, compare=False)

    @property
    def loaded(self):
        return self.plugin is not None


_lock = threading.RLock()
_discovery = None


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
            yield ep.name, os.path.abspath(os.fspath(path)), source, None
        except Exception as e:  # a broken plugin package must not break discovery
            yield ep.name, None, source, PluginLoadError(
                f"entry point '{ep.name}' = '{ep.value}' could not be resolved to a library "
                f"path: {type(e).__name__}: {e}")


def _path_candidates(env=PATH_ENV):
    for item in os.environ.get(env, "").split(os.pathsep):
        if not item:
            continue
        if os.path.isdir(item):
            libs = sorted(f for f in os.listdir(item) if f.endswith(_LIB_SUFFIXES))
            if not libs:
                yield os.path.basename(item.rstrip(os.sep)), item, env, PluginLoadError(
                    f"folder '{item}' (from {env}) contains no plugin library "
                    f"({', '.join(_LIB_SUFFIXES)})")
            for f in libs:
                yield _stem(f), os.path.abspath(os.path.join(item, f)), env, None
        else:
            # abspath: "libx.so" is ./libx.so, never a search through LD_LIBRARY_PATH.
            yield _stem(os.path.basename(item)), os.path.abspath(item), env, None


def _stem(filename):
    name = filename.split(".")[0]
    return name[3:] if name.startswith("lib") else name


def _file_id(path):
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def _vet(path, fresh=None):
    """Make sure the library at ``path`` may enter this process: already
    loaded here, or vouched for by the probe cache, or probed now (``fresh``:
    a probe already run for it). Returns (how, plugin name): how is "loaded",
    "cached", "probed", or None when there is no file to probe (loading then
    reports why). Raises the probe's error."""
    loaded = _core.find_loaded_plugin(path)  # raises the load error it had, if any
    if loaded is not None:
        return "loaded", loaded.name
    if not os.path.isfile(path):
        return None, None
    hit = _probe_cache.lookup(path)
    if hit is not None:
        return "cached", hit[0]
    from . import probe as _probe

    result = fresh if fresh is not None else _probe.probe(path)
    if not result.ok:
        raise result.exception()
    why_not = _probe_cache.store(path, result.info)
    if why_not is not None:
        _warn_cache_unwritable(why_not)
    return "probed", result.info.get("name")


_warned_cache = False


def _warn_cache_unwritable(why_not):
    # Not an error (the plugin loads), but every start-up now pays for a
    # probe: say so once per process rather than silently.
    global _warned_cache
    if not _warned_cache:
        _warned_cache = True
        warnings.warn(f"devicekit: {why_not}; plugins will be probed again at every start-up "
                      f"(set {_probe_cache.CACHE_ENV} to a writable folder, or to 'off')",
                      RuntimeWarning, stacklevel=2)


def _probe_uncached(pending):
    """Probe, in parallel, the pending candidates that need a probe (each is
    a subprocess, and a hanging plugin should cost one time limit, not one
    per plugin). Returns {path: ProbeResult}."""
    to_probe, seen = [], set()
    for rec in pending:
        file_id = _file_id(rec.path)
        if file_id is None or file_id in seen or not os.path.isfile(rec.path):
            continue
        seen.add(file_id)
        try:
            if _core.find_loaded_plugin(rec.path) is not None:
                continue
        except DeviceKitError:
            continue
        if _probe_cache.lookup(rec.path) is None:
            to_probe.append(rec.path)
    if len(to_probe) < 2:
        return {}  # one probe runs in _vet, like any single load
    import concurrent.futures

    from . import probe as _probe

    workers = min(_MAX_PARALLEL_PROBES, len(to_probe))
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
        return dict(zip(to_probe, pool.map(_probe.probe, to_probe)))


class _Discovery:
    """The candidates of one discovery and what became of each. Candidates are
    resolved (vetted, then loaded) on demand, in a fixed order; a plugin name
    belongs to the first candidate loaded with it."""

    def __init__(self):
        self.records = []
        for stem, path, source, err in [*_path_candidates(OVERRIDE_ENV),
                                        *_entry_point_candidates(), *_path_candidates()]:
            rec = PluginRecord(name=stem, path=path, source=source)
            if err is not None:
                rec.error, rec.error_type, rec._pending = str(err), type(err).__name__, False
            self.records.append(rec)
        self.by_name = {}
        self.by_file = {}
        self.fresh = {}  # path -> ProbeResult, from resolve_all's parallel probes

    def resolve(self, rec):
        if not rec._pending:
            return
        rec._pending = False
        # Two de-duplications, each doing what the other cannot. This one
        # refuses a second listing of a file (a hard link, both variables)
        # before it is probed, so a broken or hanging library costs one probe
        # and the record says "listed twice". The core's (Plugin::load,
        # find_loaded_plugin) keys on the loaded library, so every way in
        # (devicekit.load_plugin, _core.load_plugin, discovery) shares one
        # Plugin_Initialize; it cannot see a file that is not loaded yet.
        file_id = _file_id(rec.path)
        if file_id is not None:
            first = self.by_file.setdefault(file_id, rec)
            if first is not rec:
                rec.error_type = "PluginLoadError"
                rec.error = f"'{rec.path}' is the same library as '{first.path}', listed twice"
                return
        try:
            rec.probe, name = _vet(rec.path, self.fresh.pop(rec.path, None))
        except DeviceKitError as e:
            rec.error, rec.error_type, rec.probe = str(e), type(e).__name__, "failed"
            return
        # A second provider of a name is refused before it enters the process.
        owner = self.by_name.get(name) if name is not None else None
        if owner is None:
            try:
                plugin = _core.load_plugin(rec.path)
            except DeviceKitError as e:
                rec.error, rec.error_type = str(e), type(e).__name__
                return
            name = plugin.name
            owner = self.by_name.get(name)
        rec.name = name
        if owner is not None and owner.source == OVERRIDE_ENV and rec.source != OVERRIDE_ENV:
            rec.error_type = "PluginLoadError"
            rec.error = (f"plugin '{name}' from '{rec.path}' ({rec.source}) is shadowed by the "
                         f"development build '{owner.path}' ({OVERRIDE_ENV}), which takes "
                         f"precedence; this one is not used")
            return
        if owner is not None:
            rec.error_type = "PluginLoadError"
            rec.error = (f"plugin name '{name}' from '{rec.path}' is already provided by "
                         f"'{owner.path}' ({owner.source}); device names must be unique, so "
                         f"this one is not used")
            return
        rec.plugin = plugin
        rec.devices = list(plugin.devices)
        self.by_name[plugin.name] = rec

    def resolve_all(self):
        pending = [r for r in self.records if r._pending]
        self.fresh.update(_probe_uncached(pending))
        for rec in pending:  # loading into this process: sequential, in order
            self.resolve(rec)

    def _hint(self, rec):
        """The plugin name a pending candidate most likely has: its cached
        probe's, else its entry-point or file name."""
        if rec.path and os.path.isfile(rec.path):
            hit = _probe_cache.lookup(rec.path)
            if hit is not None:
                return hit[0]
        return rec.name

    def provider(self, name):
        """The record that provides plugin ``name``, loading as little as
        possible; None when no candidate does."""
        if name in self.by_name:
            return self.by_name[name]
        for rec in self.records:  # overrides first, whatever their file names say
            if rec._pending and rec.source == OVERRIDE_ENV:
                self.resolve(rec)
        if name in self.by_name:
            return self.by_name[name]
        for rec in self.records:
            if rec._pending and self._hint(rec) == name:
                self.resolve(rec)
                if name in self.by_name:
                    return self.by_name[name]
        self.resolve_all()
        return self.by_name.get(name)


def _current():
    global _discovery
    if _discovery is None:
        _discovery = _Discovery()
    return _discovery


def records():
    with _lock:
        d = _current()
        d.resolve_all()
        return d.records


def reload_plugins():
    """Run discovery again (e.g. after changing DEVICEKIT_PLUGIN_PATH).
    Libraries already loaded stay loaded (their Plugin_Initialize never runs
    again); their devices keep working."""
    global _discovery
    with _lock:
        _discovery = None
    return records()


def plugins():
    """Every discovered plugin candidate, loaded or not, as PluginRecord."""
    return list(records())


def devices():
    """Every device of every loaded plugin."""
    return [d for r in records() if r.plugin is not None for d in r.devices]


def device(spec=None):
    """Resolve ``"cpu:0"``, ``"cpu"`` (index 0) or a Device to a Device.
    A name loads only the plugin that provides it."""
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
    with _lock:
        rec = _current().provider(name.split(":")[0])
    for d in rec.devices if rec is not None else ():
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
    """Load one plugin library outside discovery and return it (raises on
    failure). ``path`` is a file-system path; the library is probed in a
    subprocess first (unless the probe cache vouches for it), and loaded once
    per process whatever path names it."""
    path = os.path.abspath(os.fspath(path))
    _vet(path)
    return _core.load_plugin(path)
