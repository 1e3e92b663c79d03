"""The reference CUDA plugin's Python package: what a vendor's plugin wheel ships.

The wheel holds one shared library and this file. Which library depends on the
build (reference_backend/cuda/CMakeLists.txt): ``libdevicekit_cuda.so`` (the
CUDA build, plugin ``cuda``) or ``libdevicekit_cuda_sim.so`` (the emulated
build, plugin ``cuda_sim``). The wheel registers ``cuda =
"devicekit_cuda:library_path"`` in the ``devicekit.plugins`` entry-point group;
DeviceKit calls ``library_path()``, dlopens the result, and names the devices
after the library's own Plugin_GetInfo. No Python code runs inside the plugin.
"""

from pathlib import Path

__all__ = ["library_path", "built_plugin"]

_LIBRARIES = {"cuda": "libdevicekit_cuda.so", "cuda_sim": "libdevicekit_cuda_sim.so"}


def built_plugin() -> str:
    """``"cuda"`` or ``"cuda_sim"``: which build this installed package holds."""
    here = Path(__file__).resolve().parent
    found = [name for name, lib in _LIBRARIES.items() if (here / lib).is_file()]
    if len(found) != 1:
        raise FileNotFoundError(
            f"devicekit_cuda in {here} holds {len(found)} plugin libraries "
            f"({', '.join(_LIBRARIES.values())}: expected exactly one); reinstall the wheel")
    return found[0]


def library_path() -> str:
    """Absolute path of the plugin library installed next to this file."""
    return str(Path(__file__).resolve().with_name(_LIBRARIES[built_plugin()]))
