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
"""

from . import dtypes as _dt
from .autograd import no_grad
from .errors import InvalidArgumentError
from .nn.functional import adamw_step
from .nn.module import is_parameter
from .tensor import zeros


class AdamW:
    """``torch.optim.AdamW`` (amsgrad=False, maximize=False) over the
    parameters of ``devicekit.nn.Module`` s."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
        self.params = list(params)
        if not self.params:
            raise InvalidArgumentError("AdamW: got an empty parameter list")
        for i, p in enumerate(self.params):
            if not is_parameter(p) or not p._dk_owners:
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

    def zero_grad(self):
        """Sets every parameter's ``.grad`` to None (PyTorch's default)."""
        for p in self.params:
            p.grad = None

    def step(self):
        """One update of every parameter that has a gradient."""
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
                new, st["m"], st["v"] = adamw_step(
                    p, p.grad, st["m"], st["v"], st["step"], lr=self.lr, beta1=self.betas[0],
                    beta2=self.betas[1], eps=self.eps, weight_decay=self.weight_decay)
                self._put(i, p, new)

    def _put(self, i, old, new):
        new = new.detach()
        new.requires_grad = old.requires_grad
        new.grad = old.grad
        new._dk_owners = old._dk_owners
        for module, name in old._dk_owners:
            module._replace(name, new)
        self.params[i] = new


__all__ = ["AdamW"]
