"""``torch.autocast("dk")`` and ``torch.amp.GradScaler("dk")``.

Autocast. torch 2.13 registers its cast policy (which ops run in 16 bits,
which in float32) for its own autocast keys only (CUDA, CPU, XPU, MPS, ...):
for ``AutocastPrivateUse1``, the key ``dk`` tensors carry, it registers a
fallthrough and no op at all (``torch._C._dispatch_has_kernel_for_dispatch_key
(op, "AutocastPrivateUse1")`` is False for every op below). So ``install``
registers torch's CUDA policy there, op by op, from the lists in torch's
``ATen/autocast_mode.h`` (copied below, 2.13), with the semantics of its C++
wrappers (``cached_cast``, ``promote_type``, ``set_opt_dtype``): only floating
dk tensors other than float64 are cast, lists of tensors included. An op
torch itself registers for the key (a later torch) is left to torch. Not
done: torch's cast cache (a weight cast once per autocast region); here a
weight is cast at each use.

``torch.dk`` gains ``get_amp_supported_dtype`` (what ``torch.autocast``
asks); a dtype other than bfloat16/float16 is a DeviceKit DTypeError, where
torch would warn and silently disable autocast.

GradScaler. ``_amp_foreach_non_finite_check_and_unscale_`` and
``_amp_update_scale_`` are lowered in DeviceKit base ops, on the device (no
read-back), with the semantics of torch's CUDA kernels
(aten/src/ATen/native/cuda/AmpKernels.cu).
"""

import torch

from .. import bridge
from .. import dtypes as _dt
from .. import ops
from ..errors import DTypeError
from . import _device
from ._table import KERNEL, lowers

aten = torch.ops.aten
KEY = "AutocastPrivateUse1"
SUPPORTED = (torch.bfloat16, torch.float16)

# ---- torch's CUDA policy (ATen/autocast_mode.h, torch 2.13) ------------------------------
# "name" or "name.overload", as in torch's AT_FORALL_* lists.

LOWER_PRECISION_FP = (
    "_convolution.deprecated", "_convolution", "conv1d", "conv2d", "conv3d", "conv_tbc",
    "conv_transpose1d", "conv_transpose2d.input", "conv_transpose3d.input", "convolution",
    "prelu", "addmm", "addmv", "addr", "matmul", "einsum", "mm", "mv", "linalg_vecdot",
    "linear", "addbmm", "baddbmm", "bmm", "chain_matmul", "linalg_multi_dot",
    "_thnn_fused_lstm_cell", "_thnn_fused_gru_cell", "lstm_cell", "gru_cell", "rnn_tanh_cell",
    "rnn_relu_cell", "_scaled_dot_product_flash_attention", "scaled_dot_product_attention")

FP32 = (
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p",
    "reciprocal", "rsqrt", "sinh", "tan", "pow.Tensor_Scalar", "pow.Tensor_Tensor", "pow.Scalar",
    "softplus", "layer_norm", "native_layer_norm", "rms_norm", "group_norm", "frobenius_norm.dim",
    "nuclear_norm", "nuclear_norm.dim", "cosine_similarity", "poisson_nll_loss",
    "cosine_embedding_loss", "nll_loss", "nll_loss2d", "hinge_embedding_loss", "kl_div",
    "l1_loss", "smooth_l1_loss", "huber_loss", "mse_loss", "margin_ranking_loss",
    "multilabel_margin_loss", "soft_margin_loss", "triplet_margin_loss", "multi_margin_loss",
    "binary_cross_entropy_with_logits", "dist", "pdist", "cdist", "renorm", "logsumexp",
    "upsample_nearest1d", "_upsample_nearest_exact1d", "upsample_nearest2d",
    "_upsample_nearest_exact2d", "upsample_nearest3d", "_upsample_nearest_exact3d",
    "upsample_linear1d", "upsample_bilinear2d", "_upsample_bilinear2d_aa",
    "upsample_trilinear3d", "upsample_bicubic2d", "_upsample_bicubic2d_aa")

FP32_SET_OPT_DTYPE = (
    "prod", "prod.dim_int", "softmax.int", "log_softmax.int", "cumprod", "cumsum",
    "linalg_vector_norm", "linalg_matrix_norm", "linalg_matrix_norm.str_ord", "sum",
    "sum.dim_IntList")

# AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE: redispatched to the overload with a dtype.
FP32_APPEND_DTYPE = {"norm.Scalar": "norm.ScalarOpt_dtype",
                     "norm.ScalarOpt_dim": "norm.ScalarOpt_dim_dtype"}

PROMOTE = ("addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "vdot", "grid_sampler",
           "index_put", "tensordot", "scatter_add")

# torch refuses these under CUDA autocast (binary_cross_entropy_banned).
BANNED = ("binary_cross_entropy",)


def _resolve(name):
    packet, _, overload = name.partition(".")
    return getattr(getattr(aten, packet, None), overload or "default", None)


# ---- the casts ---------------------------------------------------------------------------

def _eligible(x):
    """torch's ``is_eligible`` for PrivateUse1: a dk tensor, floating, not float64."""
    return (isinstance(x, torch.Tensor) and x.device.type == _device.BACKEND
            and x.is_floating_point() and x.dtype != torch.float64)


def _cast(x, dtype):
    if _eligible(x) and x.dtype != dtype:
        return x.to(dtype)
    if type(x) in (list, tuple):
        return type(x)(_cast(v, dtype) for v in x)
    return x


def _widest(args, low):
    """torch's ``promote_type``: float32 when any eligible operand is float32."""
    for x in args:
        if type(x) in (list, tuple):
            low = _widest(x, low)
        elif _eligible(x) and x.dtype == torch.float32:
            return torch.float32
    return low


_EXCLUDE = torch._C.DispatchKeySet(getattr(torch._C.DispatchKey, KEY))


def _lower_precision(op):
    def kernel(*args, **kwargs):
        dtype = torch.get_autocast_dtype(_device.BACKEND)
        with torch._C._ExcludeDispatchKeyGuard(_EXCLUDE):
            return op(*_cast(args, dtype), **{k: _cast(v, dtype) for k, v in kwargs.items()})
    return kernel


def _fp32(op):
    def kernel(*args, **kwargs):
        with torch._C._ExcludeDispatchKeyGuard(_EXCLUDE):
            return op(*_cast(args, torch.float32),
                      **{k: _cast(v, torch.float32) for k, v in kwargs.items()})
    return kernel


def _promote(op):
    def kernel(*args, **kwargs):
        to = _widest(list(args) + list(kwargs.values()), torch.get_autocast_dtype(_device.BACKEND))
        with torch._C._ExcludeDispatchKeyGuard(_EXCLUDE):
            return op(*_cast(args, to), **{k: _cast(v, to) for k, v in kwargs.items()})
    return kernel


def _fp32_set_opt_dtype(op):
    """The op with ``dtype=float32`` (unless given) when its first operand is
    eligible; its tensors are not cast (the op upcasts inside)."""
    at = [a.name for a in op._schema.arguments].index("dtype")

    def kernel(*args, **kwargs):
        with torch._C._ExcludeDispatchKeyGuard(_EXCLUDE):
            if args and _eligible(args[0]):
                if at < len(args):
                    if args[at] is None:
                        args = args[:at] + (torch.float32,) + args[at + 1:]
                elif kwargs.get("dtype") is None:
                    kwargs = {**kwargs, "dtype": torch.float32}
            return op(*args, **kwargs)
    return kernel


def _fp32_append_dtype(op, to):
    def kernel(*args, **kwargs):
        with torch._C._ExcludeDispatchKeyGuard(_EXCLUDE):
            if args and _eligible(args[0]):
                return to(*args, **kwargs, dtype=torch.float32)
            return op(*args, **kwargs)
    return kernel


def _banned(op):
    def kernel(*args, **kwargs):
        raise RuntimeError(
            f"devicekit.torch: {op} is unsafe to autocast on dk, as on CUDA (torch's message: "
            "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to "
            "autocast. Many models use a sigmoid layer right before the binary cross entropy "
            "layer. In this case, combine the two layers using "
            "torch.nn.functional.binary_cross_entropy_with_logits or torch.nn.BCEWithLogitsLoss, "
            "which are safe to autocast.)")
    return kernel


class _AmpDtypes(list):
    """What ``torch.dk.get_amp_supported_dtype()`` returns: torch asks ``dtype
    in`` it and, for any other dtype, warns and runs the region without
    autocast; here that is an error that says why."""

    def __contains__(self, dtype):
        if not list.__contains__(self, dtype):
            raise DTypeError(
                f"devicekit.torch: torch.autocast('{_device.BACKEND}') runs in torch.bfloat16 or "
                f"torch.float16 (torch's CUDA cast policy lowers ops to one of those), not {dtype}; "
                f"pass dtype=torch.bfloat16 or torch.float16, or enabled=False")
        return True


def get_amp_supported_dtype():
    return _AmpDtypes(SUPPORTED)


_registered = []  # the names this module registered for AutocastPrivateUse1
_lib = None
_fallthrough = None


def install():
    """Registers the policy for AutocastPrivateUse1 (once per process) and
    ``torch.dk.get_amp_supported_dtype``."""
    global _lib
    if _lib is not None:
        return
    _lib = torch.library.Library("aten", "IMPL")  # kept alive: it holds the registrations
    # torch 2.13 registers no fallthrough for this key either (it does for
    # AutocastCUDA/CPU/...): without one, every other op on a dk tensor inside
    # the region stops at "Could not run ... from the 'Autocastdk' backend".
    global _fallthrough
    _fallthrough = torch.library.Library("_", "IMPL")
    try:
        _fallthrough.fallback(torch.library.fallthrough_kernel, KEY)
    except RuntimeError:  # a later torch registers it: that is the one wanted
        pass
    getattr(torch, _device.BACKEND).get_amp_supported_dtype = get_amp_supported_dtype
    table = [(n, _lower_precision) for n in LOWER_PRECISION_FP]
    table += [(n, _fp32) for n in FP32]
    table += [(n, _fp32_set_opt_dtype) for n in FP32_SET_OPT_DTYPE]
    table += [(n, _promote) for n in PROMOTE]
    table += [(n, _banned) for n in BANNED]
    table += [(n, lambda op, to=to: _fp32_append_dtype(op, _resolve(to)))
              for n, to in FP32_APPEND_DTYPE.items()]
    for name, policy in table:
        op = _resolve(name)
        if op is None:  # not in this torch release
            continue
        qual = "aten::" + name
        if torch._C._dispatch_has_kernel_for_dispatch_key(qual, KEY):
            continue  # torch registers it itself
        _lib.impl(op, policy(op), KEY)
        _registered.append(name)


def registered():
    """The ``aten`` overloads whose autocast policy on dk this module registered."""
    return list(_registered)


# ---- GradScaler ------------------------------------------------------------------------

def _any_non_finite(t):
    """A 0-d bool DeviceKit tensor: does ``t`` hold an inf or a NaN (``t * 0``
    is NaN exactly there)."""
    z = ops.mul(t, 0.0)
    return ops.gt(ops.sum(bridge.cast(ops.ne(z, z), _dt.float32.id)), 0.0)


@lowers("_amp_foreach_non_finite_check_and_unscale_.default", kind=KERNEL, raw=True)
def amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale):
    """torch's semantics: ``found_inf`` becomes 1.0 when any grad holds an inf
    or NaN (else it is left as it is); every grad is multiplied by
    ``inv_scale`` in float32 and rounded back to its dtype."""
    fi, inv = found_inf._dk, inv_scale._dk
    if found_inf.numel() != 1 or inv_scale.numel() != 1 or found_inf.dtype != torch.float32 \
            or inv_scale.dtype != torch.float32:
        raise DTypeError("devicekit.torch: _amp_foreach_non_finite_check_and_unscale_ needs "
                         "found_inf and inv_scale as 1-element float32 tensors, as torch does")
    flags = fi
    for g in grads:
        t = g._dk
        flags = ops.where(_any_non_finite(t), 1.0, flags)
        f32 = bridge.cast(t, _dt.float32.id) if t.dtype != _dt.float32 else t
        bridge.copy_into(t, bridge.cast(ops.mul(f32, inv.reshape(*([1] * t.ndim))), bridge.dtype_id(t)))
    bridge.copy_into(fi, bridge.cast(flags, _dt.float32.id).reshape(*fi.shape))


@lowers("_amp_update_scale_.default", kind=KERNEL, raw=True)
def amp_update_scale_(scale, growth_tracker, found_inf, growth_factor, backoff_factor,
                      growth_interval):
    """torch's ``_amp_update_scale_``: on an inf/NaN the scale is multiplied by
    ``backoff_factor`` and the tracker reset; otherwise the tracker counts up
    and, at ``growth_interval`` successful steps, the scale is multiplied by
    ``growth_factor`` (kept only when finite) and the tracker reset."""
    s, tr, fi = scale._dk, growth_tracker._dk, found_inf._dk
    found = ops.ne(bridge.cast(fi, _dt.float32.id), 0.0)
    succ = ops.add(tr, 1)
    at_interval = ops.eq(succ, int(growth_interval))
    grown = ops.mul(s, float(growth_factor))
    grown_ok = ops.eq(ops.mul(grown, 0.0), 0.0)  # finite
    new_s = ops.where(found, ops.mul(s, float(backoff_factor)),
                      ops.where(ops.logical_and(at_interval, grown_ok), grown, s))
    new_tr = ops.where(ops.logical_or(found, at_interval), 0, succ)
    bridge.copy_into(s, bridge.cast(new_s, bridge.dtype_id(s)))
    bridge.copy_into(tr, bridge.cast(new_tr, bridge.dtype_id(tr)))
    return scale
