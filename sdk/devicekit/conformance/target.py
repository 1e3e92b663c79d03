"""Opening the device under test, from a device name or a plugin library path."""

import hashlib
import os

import devicekit as dk

from .case import Target


def open_target(device=None, plugin=None, level="full"):
    """``device`` ("acme:0") through discovery, or the plugin library at
    ``plugin`` (its device named ``device``, else its first). Raises the
    DeviceKit error that says why it cannot (load error, unknown device).
    The target's ``device.name`` and ``plugin`` (absolute) reopen the same
    device in a worker."""
    path = os.path.abspath(plugin) if plugin else None
    if plugin:
        lib = dk.load_plugin(path)
        devs = list(lib.devices)
        if device:
            name = device if ":" in device else device + ":0"
            match = [d for d in devs if d.name == name]
            if not match:
                raise dk.DeviceNotFoundError(
                    f"plugin '{plugin}' has no device '{device}'; it provides: "
                    f"{', '.join(d.name for d in devs) or 'none'}")
            dev = match[0]
        elif devs:
            dev = devs[0]
        else:
            raise dk.DeviceNotFoundError(f"plugin '{plugin}' reports no devices")
    else:
        dev = dk.device(device)
    return Target.of(dev, level, path)


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def describe(target):
    """Plugin and device facts for the report."""
    dev, p = target.device, target.device.plugin
    return {
        "devicekit_version": dk.__version__,
        "device_api_version": dk.API_VERSION,
        "plugin": {"name": p.name, "vendor": p.vendor, "version": p.version,
                   "api_version": p.api_version, "attributes": p.attributes,
                   # the optional device API parts it declares (1.5+: collectives, graphs)
                   "parts": list(getattr(p, "parts", ())),
                   "library_path": os.path.realpath(p.path), "sha256": sha256(p.path),
                   "mtime": os.path.getmtime(p.path)},
        "device": {"name": dev.name, "properties": dict(dev.properties)},
        "kernels": p.kernels(),
    }
