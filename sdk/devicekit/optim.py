"""Optimizers that keep their own state: ``AdamW``.

``opt = devicekit.optim.AdamW(model.parameters(), lr=1e-3)``, then per step
``opt.zero_grad(); loss.backward(); opt.step()``, as in PyTorch. The update
is ``devicekit.nn.functional.adamw_step`` (one implementation, also what the
conformance suite checks); the optimizer holds the step count and the
moments ``m``, ``v`` per parameter, in float32 for float16/bfloat16
parameters (mixed precision) and in the parameter's dtype otherwise.

DeviceKit tensors have no in-place ops, so ``step()`` puts a new leaf
tensor with the updated values where each parameter was: in every
``devicekit.nn.Module`` that holds it (see ``devicekit.nn.module``) and in
``opt.params``. The ``.grad`` carries over to the new tensor until
``zero_grad()``, as PyTorch keeps it.

Like PyTorch's ``foreach`` implementation, ``step()`` updates parameters of
the same device, dtype and step count together: their gradients are packed
into one flat tensor (one copy launch each), and ``adamw_step`` runs once on
flat parameter, gradient and moment tensors (a dozen launches for the whole
model instead of a dozen per parameter). The new parameters and the moments
in ``state`` are views into those flat tensors, so the next step packs only
the gradients. The update is elementwise, so every element is computed by
exactly the operations of the per-parameter step: the results are
bit-identical. float16/bfloat16 parameters (float32 moments) take the
per-parameter path.
"""

from . import _core
from . import dtypes as _dt
from .autograd import no_grad
from .errors import InvalidArgumentError
from .nn.functional import adamw_step
from .nn.module import is_parameter, owners
from .tensor import zeros


class AdamW:
    """``torch.optim.AdamW`` (amsgrad=False, maximize=False) over the
    parameters of ``devicekit.nn.Module`` s."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
        self.params = list(params)
        if not self.params:
            raise InvalidArgumentError("AdamW: got an empty parameter list")
        for i, p in enumerate(self.params):
            if not is_parameter(p) or not p._dk_owners:  # no Module put it there
                raise InvalidArgumentError(
                    f"AdamW: parameter {i} ({p.dtype}{list(p.shape)}) is not held by a "
                    f"devicekit.nn.Module; DeviceKit tensors have no in-place update, so the "
                    f"optimizer puts the new values into the Module that holds each parameter: "
                    f"pass module.parameters() (nn.ParameterDict wraps loose tensors)")
        if lr < 0 or eps < 0 or weight_decay < 0:
            raise InvalidArgumentError(f"AdamW: lr {lr}, eps {eps} and weight_decay {weight_decay} "
                                       f"must be >= 0")
        if not all(0.0 <= b < 1.0 for b in betas) or len(betas) != 2:
            raise InvalidArgumentError(f"AdamW: betas must be two values in [0, 1), got {betas}")
        self.lr, self.betas, self.eps, self.weight_decay = float(lr), tuple(betas), eps, weight_decay
        self.state = [None] * len(self.params)  # per parameter: {"step", "m", "v"} once stepped
        self._flat = {}  # parameter indices -> the flat tensors the last step left (see step)

    def zero_grad(self):
        """Sets every parameter's ``.grad`` to None (PyTorch's default)."""
        for p in self.params:
            p.grad = None

    def step(self):
        """One update of every parameter that has a gradient."""
        groups = {}  # (device, dtype, step) -> parameter indices, updated together
        with no_grad():
            for i, p in enumerate(self.params):
                if p.grad is None:
                    continue
                st = self.state[i]
                if st is None:
                    dt = _dt.float32 if str(p.dtype) in ("float16", "bfloat16") else p.dtype
                    st = self.state[i] = {"step": 0, "m": zeros(*p.shape, dtype=dt, device=p.device),
                                          "v": zeros(*p.shape, dtype=dt, device=p.device)}
                st["step"] += 1
                flat_ok = str(st["m"].dtype) == str(p.dtype) == str(p.grad.dtype)
                key = (p.device.name, str(p.dtype), st["step"]) if flat_ok else ("one", i)
                groups.setdefault(key, []).append(i)
            flats = {}
            for idx in groups.values():
                if len(idx) == 1:
                    self._step_one(idx[0])
                else:
                    flats[tuple(idx)] = self._step_flat(idx, self._flat.get(tuple(idx)))
            self._flat = flats

    def _hp(self):
        return dict(lr=self.lr, beta1=self.betas[0], beta2=self.betas[1], eps=self.eps,
                    weight_decay=self.weight_decay)

    def _step_one(self, i):
        p, st = self.params[i], self.state[i]
        new, st["m"], st["v"] = adamw_step(p, p.grad, st["m"], st["v"], st["step"], **self._hp())
        self._put(i, p, new)

    def _step_flat(self, idx, last):
        """One ``adamw_step`` over the parameters ``idx`` packed end to end.
        ``last``: what the previous step of the same group left, reused
        where the parameters and moments are still its views."""
        ps = [self.params[i] for i in idx]
        sts = [self.state[i] for i in idx]

        def flat(name, current):
            if last is not None and all(a is b for a, b in zip(last[name + "_views"], current)):
                return last[name]
            return _core.pack(current)
        P, M, V = flat("p", ps), flat("m", [s["m"] for s in sts]), flat("v", [s["v"] for s in sts])
        G = _core.pack([p.grad for p in ps])
        P, M, V = adamw_step(P, G, M, V, sts[0]["step"], **self._hp())
        offset, m_views, v_views = 0, [], []
        for i, p, st in zip(idx, ps, sts):
            shape = list(p.shape)
            strides = [1] * len(shape)
            for d in range(len(shape) - 2, -1, -1):
                strides[d] = strides[d + 1] * shape[d + 1]
            st["m"], st["v"] = (M._view(shape, strides, offset), V._view(shape, strides, offset))
            m_views.append(st["m"])
            v_views.append(st["v"])
            self._put(i, p, P._view(shape, strides, offset))
            offset += p.numel()
        return {"p": P, "m": M, "v": V, "p_views": [self.params[i] for i in idx],
                "m_views": m_views, "v_views": v_views}

    def _put(self, i, old, new):
        new = new.detach()
        new.requires_grad = old.requires_grad
        new.grad = old.grad
        new._dk_owners = old._dk_owners  # shared: weak references, see devicekit.nn.module
        for module, name in owners(old):
            module._replace(name, new)
        self.params[i] = new


__all__ = ["AdamW"]
