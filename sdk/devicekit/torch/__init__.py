"""devicekit.torch: PyTorch models, unmodified, on any DeviceKit plugin.

``import devicekit.torch`` makes every DeviceKit device a torch device of
type ``dk``, indexed in ``devicekit.devices()`` order::

    import torch, devicekit.torch as dkt
    model = model.to("dk:0")                 # or dkt.device("cpu:0"): by DeviceKit name
    loss = model(x.to("dk:0")).sum(); loss.backward(); opt.step()

Pure Python over the SDK: no extension is compiled against libtorch, so one
DeviceKit install serves each torch release it supports (see docs/torch.md
for the torch APIs this relies on). Every ATen op reaching a dk tensor is
lowered to DeviceKit ops (the one table: ``lowered_ops()``), decomposed by
``torch._decomp``, or refused with ``UnloweredOpError``; nothing falls back
to the CPU unless ``fallback("cpu")`` says so, and then it is counted.

Where each mechanism lives: ``_device`` (the ``dk`` device, ``DKTensor``,
dtypes, host transfers, the Philox stream per device), ``_table`` (the one
lowering table, ``lowers``, wrap/unwrap), ``_dispatch`` (lookup,
decomposition, errors), ``_lower_views`` (views, copies, factories, in-place
write-through), ``_lower_ops`` (base-op lowerings), ``_lower_nn``
(composites with fused kernels, losses, random ops), ``_lower_cnn`` (batch
norm, pooling, convolution), ``_lower_select`` (bitwise, sort/topk,
multinomial, index_put: generation), ``_lower_models`` (weight norm,
histc, _grouped_mm: what model families need), ``_autocast`` (``torch.autocast("dk")``'s
cast policy, GradScaler's ops), ``_fallback``,
``_coverage``, ``_compile`` (``torch.compile(model, backend="devicekit")``:
FX graphs run by the lowering table, as device graphs), ``_distributed``
(the ``torch.distributed`` backend ``dk``, registered here, imported at the
first ``init_process_group``); ``graphs`` (public: ``DKGraph``, ``graph``,
``make_graphed_callables``: eager dk code captured into a device graph and
replayed, as ``torch.cuda.graph``); ``hf_models``
(public: small Hugging Face models for coverage, tests and ``python -m
devicekit.torch_cli``).
"""

import sys

try:
    import torch
except ImportError as e:  # pragma: no cover - the message is the point
    raise ImportError("devicekit.torch needs PyTorch: pip install 'devicekit[torch]'") from e

from .. import _core, _tracing
from . import _compile, _device
from ._compile import compile_stats, reset_compile_stats
from ._coverage import Coverage, Recorder, coverage, recording
from ._device import DKTensor, device, dk_device, prefer
from ._dispatch import clear_pending_errors, dispatch as _dispatch_op
from ._fallback import fallback, fallback_stats, reset_fallback_stats
from ._table import LOWERINGS, HostOperandError
from .graphs import DKGraph, graph, make_graphed_callables
from . import _lower_views, _lower_ops, _lower_nn, _lower_cnn, _lower_select, _lower_models  # noqa: F401,E501  (they fill LOWERINGS)
from . import _autocast  # torch.autocast("dk") policy; GradScaler's ops (in LOWERINGS)

# The wiring (STYLE 19): _device sits at the bottom and _dispatch above the
# table and the lowering modules, so DKTensor's dispatch and the factory
# kernels are handed _dispatch.dispatch here rather than importing upward.
_device.hook_dispatch(_dispatch_op)
_device.install()
_autocast.install()
_lib = torch.library.Library("aten", "IMPL")  # kept alive: it holds the registrations
_lower_views.register_factories(_lib, _dispatch_op)
_lower_nn.register_attention(_lib)
_lower_cnn.register_autograd(_lib)
_lower_models.register_autograd(_lib)  # ctc_loss with lengths on the host
# Any other op reaching the dk backend key with no kernel (a factory torch
# has no generic form of, such as tril_indices(device="dk:0")) comes to the
# same dispatch, so it is decomposed, falls back or is refused by its name.
_fallback_lib = torch.library.Library("_", "IMPL")
_fallback_lib.fallback(lambda op, *args, **kwargs: _dispatch_op(op, args, kwargs), "PrivateUse1")


def _traced_dispatch_op(func, args, kwargs):
    """DKTensor's dispatch while a devicekit.trace records: a span per ATen
    op, named as the cause of the launches it makes."""
    name = str(func)
    t0 = _tracing.now_ns()
    _core._trace_push(name)
    try:
        return _dispatch_op(func, args, kwargs)
    finally:
        _core._trace_pop()
        _tracing.add("aten", name, t0)


# devicekit.trace swaps the traced dispatch in at start and out at stop, so
# an untraced ATen call pays nothing for it (and in now, when this import
# happens while a trace records: `devicekit trace script.py`).
_tracing.hooks.append((lambda: _device.hook_dispatch(_traced_dispatch_op),
                       lambda: _device.hook_dispatch(_dispatch_op)))
if _tracing.on:
    _device.hook_dispatch(_traced_dispatch_op)


def _create_process_group(dist_backend_opts, backend_options=None):
    # The torch.distributed backend "dk" (_distributed) is imported only when
    # a process makes a group: importing devicekit.torch stays as fast.
    from ._distributed import create
    return create(dist_backend_opts, backend_options)


# torch.compile(model, backend="devicekit") (_compile): Dynamo finds the
# backend through the package's torch_dynamo_backends entry point, so this
# import does not load torch._dynamo; where it is loaded already (or the
# entry point is absent: a source tree on sys.path) it is registered here.
if "torch._dynamo" in sys.modules:
    _compile.register()

if torch.distributed.is_available():
    torch.distributed.Backend.register_backend(
        "dk", _create_process_group, extended_api=True, devices=["dk"])


def lowered_ops():
    """``{"aten.add.Tensor": kind, ...}``: every ATen overload with a DeviceKit
    lowering, and its kind (view, kernel, composite, factory, random,
    transfer, meta). In-place forms (``add_``) and ``_foreach_*`` ops are
    derived from these at first use."""
    return {str(op): low.kind for op, low in sorted(LOWERINGS.items(), key=lambda kv: str(kv[0]))}


def to_torch(t):
    """A ``dk`` torch tensor sharing the memory of DeviceKit tensor ``t``."""
    return _device.wrap(t)


def from_torch(t):
    """The DeviceKit tensor (a view of the same memory) behind a ``dk`` torch tensor."""
    if not isinstance(t, DKTensor):
        raise TypeError(f"from_torch: expected a dk tensor, got a {t.device} tensor")
    return t._dk


__all__ = ["Coverage", "DKGraph", "DKTensor", "HostOperandError", "Recorder",
           "clear_pending_errors", "compile_stats", "coverage", "device", "dk_device", "fallback",
           "fallback_stats", "from_torch", "graph",
           "lowered_ops", "make_graphed_callables", "prefer",
           "recording", "reset_compile_stats", "reset_fallback_stats", "to_torch"]
