"""The ``torch_dynamo_backends`` entry point ``devicekit`` (pyproject.toml).

Dynamo imports this module when it first looks the backend up (at
``torch.compile(..., backend="devicekit")``), with ``torch._dynamo`` loaded:
so DeviceKit's own files join Dynamo's skip list here, before it traces
anything for this backend (``_compile.skip_devicekit_frames``), and
``import devicekit.torch`` alone still never loads Dynamo.
"""

from ._compile import backend, skip_devicekit_frames

skip_devicekit_frames()

__all__ = ["backend"]
