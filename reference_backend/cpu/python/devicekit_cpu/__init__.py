"""The reference CPU plugin's Python package: exactly what a vendor's plugin wheel ships.

A DeviceKit plugin wheel contains one shared library and this file. The wheel
registers ``cpu = "devicekit_cpu:library_path"`` in the ``devicekit.plugins``
entry-point group; DeviceKit calls ``library_path()`` and dlopens the result.
No Python code runs inside the plugin, so one wheel serves every Python version.
"""

from pathlib import Path

__all__ = ["library_path"]


def library_path() -> str:
    """Absolute path of ``libdevicekit_cpu.so``, installed next to this file."""
    return str(Path(__file__).resolve().with_name("libdevicekit_cpu.so"))
