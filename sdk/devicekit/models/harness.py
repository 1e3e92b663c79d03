"""The model-regression protocol: one model, one device, one dtype.

:func:`execute` runs the phases in order and records what each produced:

- ``forward``: the logits of a training-mode forward (autograd recording);
- ``loss``: the cross-entropy, computed in float32 for mixed precision;
- ``backward``: every parameter's gradient;
- ``inference``: the logits again under ``no_grad``, where the plugin's fused
  kernels may run (on the initial weights; the CNN's batch norms use the
  running statistics the ``forward`` phase's training forward left);
- ``train``: ``steps`` AdamW steps from the same start; the loss curve;
- ``generate`` (decoders of the ``hf-*`` set only, :func:`phases_of`): greedy
  decoding with the KV cache from the initial weights; the new tokens, judged
  by :func:`token_checks`.

Mixed precision is the way people train: float32 *master* parameters and
optimizer state; each forward casts the masters to the run dtype (a recorded
cast, so gradients arrive on the masters in float32), activations stay in the
run dtype, and the loss is computed in float32. The float64 reference keeps
everything in float64.

:func:`judge` turns three runs into outcomes: the plugin's run, a *correct*
run of the same dtype (the reference CPU plugin), and the float64 reference.
A tensor passes when ``err(plugin) <= MULTIPLIER * max(err(correct),
err(perturbed)) + u(dtype)``, ``err`` being the relative L2 error against
float64, ``u`` the dtype's unit roundoff and *perturbed* a second correct run
whose inputs and initial parameters were each nudged by one ulp of the run
dtype (:func:`perturb`, seeded): it measures how much a legitimately
different rounding moves the tensor (docs/models.md says why).
"""

import contextlib
import math
from dataclasses import dataclass, field

import numpy as np

from .. import _core
from ..autograd import no_grad
from ..conformance.case import ERROR, FAIL, NOT_IMPLEMENTED, PASS
from ..errors import NotImplementedByPlugin
from ..nn import ParameterDict
from ..nn import functional as F
from ..optim import AdamW
from ..tensor import tensor
from .base import HALF

PHASES = ("forward", "loss", "backward", "inference", "train")
GENERATE = "generate"  # the extra phase of a model that generates (phases_of)
ALL_PHASES = PHASES + (GENERATE,)
NEEDS = {"loss": "forward", "backward": "loss", "inference": None, "train": "backward",
         GENERATE: None}
DTYPES = ("float32", "bfloat16", "float16")
MULTIPLIER = 4.0
UNIT_ROUNDOFF = {"float64": 2.0**-53, "float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8}
ZERO_GRAD_FRACTION = 1e-2
PRECISION = {"float64": 53, "float32": 24, "float16": 11, "bfloat16": 8}  # significand bits
PERTURB_SEED = 20261126
DEFAULT_STEPS = 5
LR, WEIGHT_DECAY = 3e-3, 0.01


def phases_of(model):
    """The phases ``model`` is judged on: :data:`PHASES`, and ``generate`` for a
    model that generates text (``model.generates``: the ``hf-*`` decoders)."""
    return ALL_PHASES if getattr(model, "generates", False) else PHASES


def to_numpy(t):
    return t.numpy().astype(np.float64)


def _snapshot():
    return {op: s["kernel"] for op, s in _core.dispatch_stats().items() if s.get("kernel")}


def _fused_snapshot():
    from .._fused import composite_stats
    return {k: n for s in composite_stats().values() for k, n in s["fused"].items()}


def _delta(after, before):
    return {k: n - before.get(k, 0) for k, n in after.items() if n - before.get(k, 0) > 0}


@dataclass
class Run:
    """What one model run produced, as float64 numpy, per phase."""

    model: str
    device: str
    dtype: str
    logits: object = None
    loss: object = None
    grads: dict = field(default_factory=dict)
    inference: object = None
    curve: list = field(default_factory=list)
    activations: dict = field(default_factory=dict)
    ops: dict = field(default_factory=dict)      # phase -> {base op: kernel launches}
    fused: dict = field(default_factory=dict)    # phase -> {fused kernel: launches}
    problems: dict = field(default_factory=dict)  # phase -> (outcome, message)
    tokens: object = None   # generate: the new tokens, (batch, new) int64
    margins: object = None  # generate: per new token, the top-two logit gap / the logits' RMS


@contextlib.contextmanager
def _phase(run, name):
    """Records the phase's base-op and fused-kernel launches, and what went
    wrong (not-implemented or error) instead of raising."""
    need = NEEDS.get(name)
    if need and need in run.problems:
        outcome, _ = run.problems[need]
        run.problems[name] = (outcome, f"not run: phase '{need}' did not complete")
        yield False
        return
    ops_before, fused_before = _snapshot(), _fused_snapshot()
    try:
        yield True
    except NotImplementedByPlugin as e:
        run.problems[name] = (NOT_IMPLEMENTED, str(e))
    except Exception as e:  # the plugin (or the SDK on it) raised: the phase is an error
        run.problems[name] = (ERROR, f"{type(e).__name__}: {e}")
    finally:
        run.ops[name] = _delta(_snapshot(), ops_before)
        run.fused[name] = _delta(_fused_snapshot(), fused_before)


def master_dtype(dtype):
    return "float64" if dtype == "float64" else "float32"


def perturb(values, dtype, seed=PERTURB_SEED):
    """``values`` ({name: array}) with every nonzero element of each floating
    array moved one ulp *of the run dtype* up or down (a seeded coin per
    element, the same for every run); other arrays, and zeros (often
    structural: biases, masks), unchanged. The result is float64; the run's
    cast to ``dtype`` lands one representable value away from where the
    unperturbed value lands (same binade: adding an ulp shifts the grid by one)."""
    rng = np.random.default_rng(seed)
    out = {}
    for name in sorted(values):
        a = np.asarray(values[name])
        if a.dtype.kind != "f":
            out[name] = a
            continue
        a = a.astype(np.float64)
        _, e = np.frexp(a)  # |a| = m * 2**e, m in [0.5, 1): ulp = 2**(e - p)
        ulp = np.ldexp(1.0, e - PRECISION[dtype])
        sign = rng.choice((-1.0, 1.0), size=a.shape)
        out[name] = np.where(a != 0, a + sign * ulp, a)
    return out


def device_inputs(model, device, dtype, perturbed=False):
    """The model's batch on ``device``: floats in the run dtype, ints and bools
    as they are; and the model's buffers (running statistics), if it has any,
    at ``"buffers"`` in the master dtype, as a dict the layers update.
    ``perturbed``: the floats nudged by :func:`perturb`."""
    out = {}
    data = model.make_data()
    if perturbed:
        data = perturb(data, dtype)
    for name, a in data.items():
        a = np.asarray(a)
        dt = dtype if a.dtype.kind == "f" else None
        out[name] = tensor(a, device=device, dtype=dt)
    buffers = model.init_buffers()
    if buffers:
        out["buffers"] = {n: tensor(np.asarray(a, np.float64), device=device,
                                    dtype=master_dtype(dtype)) for n, a in buffers.items()}
    return out


def master_params(model, device, dtype, values=None, perturbed=False):
    """The master parameters, a ``devicekit.nn.ParameterDict`` keyed by the
    model's names; ``perturbed``: nudged by :func:`perturb` (seed + 1)."""
    values = model.init_params() if values is None else values
    if perturbed:
        values = perturb(values, dtype, PERTURB_SEED + 1)
    return ParameterDict({n: tensor(np.asarray(a, np.float64), device=device,
                                    dtype=master_dtype(dtype)) for n, a in values.items()})


def cast_params(master, dtype, names=None):
    names = master if names is None else names
    return {n: (master[n] if str(master[n].dtype) == dtype else master[n].to(dtype)) for n in names}


def loss_of(logits, inp):
    """Cross-entropy of ``logits`` [..., C] against ``inp["targets"]``, in float32
    for float16/bfloat16 logits (as autocast does)."""
    lf = logits.to("float32") if str(logits.dtype) in HALF else logits
    return F.cross_entropy(lf.reshape(-1, lf.shape[-1]), inp["targets"].reshape(-1))


def forward(model, master, inp, dtype, record=None):
    p = cast_params(master, dtype)
    x = None
    for layer in model.layers():
        x = layer.fn(p, x, inp)
        if record is not None:
            record[layer.name] = to_numpy(x)
    return x


def execute(model, device, dtype, steps=DEFAULT_STEPS, lr=LR, record=False, perturbed=False,
            sync=None):
    """Runs every phase of ``model`` on ``device`` in ``dtype`` ("float64" is
    the reference). ``record`` keeps each layer's forward output;
    ``perturbed`` nudges the batch and the initial parameters (:func:`perturb`);
    ``sync(master)``, called after every backward, is data parallelism's
    gradient average over the ranks (``models.ddp``)."""
    run = Run(model.name, device if isinstance(device, str) else device.name, dtype)
    inp = master = logits = loss = None
    with _phase(run, "forward"):
        inp = device_inputs(model, device, dtype, perturbed)
        master = master_params(model, device, dtype, perturbed=perturbed)
        logits = forward(model, master, inp, dtype, run.activations if record else None)
        run.logits = to_numpy(logits)
    with _phase(run, "loss") as ok:
        if ok:
            loss = loss_of(logits, inp)
            run.loss = float(loss.item())
    with _phase(run, "backward") as ok:
        if ok:
            loss.backward()
            if sync is not None:
                sync(master)
            run.grads = {n: to_numpy(t.grad) for n, t in master.items()}
    with _phase(run, "inference"):
        if master is None:  # forward failed before it had them
            inp = device_inputs(model, device, dtype, perturbed)
            master = master_params(model, device, dtype, perturbed=perturbed)
        with no_grad():
            run.inference = to_numpy(forward(model, master, inp, dtype))
    with _phase(run, "train") as ok:
        if ok:
            run.curve = _train(model, master, inp, dtype, steps, lr, loss, sync)
    return run


def _train(model, master, inp, dtype, steps, lr, first_loss, sync=None):
    """``steps`` updates of the float32 (float64) masters by a
    ``devicekit.optim.AdamW`` (its moments in the masters' dtype); the curve
    is the loss before each update and after the last (steps + 1 values). The
    first step reuses the gradients of the backward phase."""
    opt = AdamW(master.parameters(), lr=lr, weight_decay=WEIGHT_DECAY)
    curve = [float(first_loss.item())]
    for step in range(1, steps + 1):
        opt.step()
        opt.zero_grad()
        loss = loss_of(forward(model, master, inp, dtype), inp)
        if step < steps:
            loss.backward()
            if sync is not None:
                sync(master)
        curve.append(float(loss.item()))
    return curve


# ---- the pass criterion -----------------------------------------------------

def rel_error(actual, ref, scale=0.0):
    """||actual - ref|| / max(||ref||, scale) (L2 over the tensor); inf when
    actual has a NaN/inf the reference does not have."""
    a, r = np.asarray(actual, np.float64), np.asarray(ref, np.float64)
    if a.shape != r.shape:
        return math.inf
    if not np.isfinite(a).all() and np.isfinite(r).all():
        return math.inf
    diff = float(np.linalg.norm((a - r).ravel()))
    norm = max(float(np.linalg.norm(r.ravel())), scale)
    return diff / norm if norm > 0 else diff


def grad_scales(ref_grads):
    """{name: scale} for :func:`rel_error`: a gradient is measured against at
    least ``ZERO_GRAD_FRACTION`` of the largest per-element RMS gradient of
    the model (times sqrt of its size). Some gradients are zero in exact
    arithmetic (a key bias under softmax's shift invariance); measured against
    their own norm, their rounding noise would be an unbounded relative error."""
    rms = max((float(np.sqrt(np.mean(g * g))) for g in ref_grads.values() if g.size), default=0.0)
    return {n: ZERO_GRAD_FRACTION * rms * math.sqrt(g.size) for n, g in ref_grads.items()}


def bound(correct_error, dtype, perturbed_error=0.0):
    """``MULTIPLIER`` times the larger of the two correct runs' errors, plus ``u``."""
    return MULTIPLIER * max(correct_error, perturbed_error) + UNIT_ROUNDOFF[dtype]


def check(name, actual, correct, ref, dtype, scale=0.0, perturbed=None):
    """One tensor's verdict as a dict (error, the correct run's error, the
    perturbed correct run's error (0 without one), bound, ratio, ok)."""
    err, cerr = rel_error(actual, ref, scale), rel_error(correct, ref, scale)
    perr = 0.0 if perturbed is None else rel_error(perturbed, ref, scale)
    b = bound(cerr, dtype, perr)
    return {"tensor": name, "error": err, "correct_error": cerr, "perturbed_error": perr,
            "bound": b, "ratio": err / b if b > 0 else math.inf, "ok": bool(err <= b)}


def curve_check(plugin, correct, ref, dtype, perturbed=None):
    """Per step: the plugin's loss within the band ``MULTIPLIER * (the larger
    of the two correct runs' largest relative loss error so far) + u`` of the
    reference curve."""
    rows, worst_c, worst_p = [], 0.0, 0.0
    perturbed = [None] * len(ref) if perturbed is None else list(perturbed)
    perturbed += [None] * (len(ref) - len(perturbed))
    for i, (p, c, r, q) in enumerate(zip(plugin, correct, ref, perturbed)):
        worst_c = max(worst_c, abs(c - r) / abs(r))
        perr = 0.0 if q is None else abs(q - r) / abs(r)
        worst_p = max(worst_p, perr)
        err = abs(p - r) / abs(r) if math.isfinite(p) else math.inf
        b = bound(worst_c, dtype, worst_p)
        rows.append({"tensor": f"loss[step {i}]", "error": err, "correct_error": abs(c - r) / abs(r),
                     "perturbed_error": perr, "bound": b, "ratio": err / b, "ok": bool(err <= b)})
    if len(plugin) != len(ref):
        rows.append({"tensor": "curve length", "error": math.inf, "correct_error": 0.0,
                     "perturbed_error": 0.0, "bound": 0.0, "ratio": math.inf, "ok": False})
    return rows


def token_checks(plugin, correct, ref, dtype):
    """Per row of the batch: the plugin's greedy tokens equal the correct run's
    (torch's CPU in the same dtype), except where the correct run itself chose
    between two near-tied logits. At the first step where the two differ, the
    correct run's top-two gap (``margins``, in units of that step's logits RMS)
    must be within ``tie = 2 * bound(forward)`` : each of the two logits may be
    off by the forward phase's bound (:func:`bound` of the correct run's
    logits error against float64), so a gap that small is a tie the dtype
    cannot decide, and the rest of the row (another context from there) is not
    compared. In float32 ``tie`` is ~1e-6: the tokens must be equal. A row:
    ``error`` the gap at the first difference (0 if none), ``bound`` the tie."""
    tie = 2.0 * bound(rel_error(correct.logits, ref.logits), dtype)
    got, want = np.asarray(plugin.tokens), np.asarray(correct.tokens)
    margins = np.asarray(correct.margins, np.float64)
    if got.shape != want.shape:
        return [{"tensor": "tokens (shape)", "error": math.inf, "correct_error": 0.0,
                 "perturbed_error": 0.0, "bound": tie, "ratio": math.inf, "ok": False}]
    rows = []
    for i in range(want.shape[0]):
        diff = np.flatnonzero(got[i] != want[i])
        gap = float(margins[i, diff[0]]) if diff.size else 0.0
        name = f"tokens[row {i}]" + (f" step {int(diff[0])}: {int(got[i, diff[0]])} for "
                                     f"{int(want[i, diff[0]])}" if diff.size else "")
        rows.append({"tensor": name, "error": gap, "correct_error": 0.0, "perturbed_error": 0.0,
                     "bound": tie, "ratio": gap / tie if diff.size else 0.0,
                     "ok": bool(gap <= tie)})
    return rows


def phase_checks(phase, plugin, correct, ref, dtype, perturbed=None):
    """The phase's per-tensor rows; ``perturbed`` (a ``Run`` or None) widens the bounds."""
    q = perturbed
    if phase == GENERATE:
        return token_checks(plugin, correct, ref, dtype)
    if phase == "forward":
        return [check("logits", plugin.logits, correct.logits, ref.logits, dtype, 0.0,
                      None if q is None else q.logits)]
    if phase == "loss":
        return [check("loss", plugin.loss, correct.loss, ref.loss, dtype, 0.0, None if q is None else q.loss)]
    if phase == "backward":
        scales = grad_scales(ref.grads)
        return [check(f"grad:{n}", plugin.grads[n], correct.grads[n], ref.grads[n], dtype, scales[n],
                      q.grads[n] if q is not None else None)
                for n in ref.grads]
    if phase == "inference":
        return [check("logits (no_grad)", plugin.inference, correct.inference, ref.inference, dtype,
                      0.0, None if q is None else q.inference)]
    return curve_check(plugin.curve, correct.curve, ref.curve, dtype, None if q is None else q.curve)


def _fmt(x):
    return "inf" if x == math.inf else f"{x:.3g}"


def judge(phase, plugin, correct, ref, dtype, perturbed=None):
    """(outcome, message, details) of one phase. ``perturbed``: the correct
    run on perturbed inputs (``execute(..., perturbed=True)`` on cpu:0), or
    None for the single-run bound of the past."""
    sides = [("the float64 reference", ref), ("the correct run on the reference CPU plugin", correct)]
    if perturbed is not None:
        sides.append(("the perturbed correct run on the reference CPU plugin", perturbed))
    for who, r in sides:
        if phase in r.problems:
            return ERROR, f"{who} failed in {phase}: {r.problems[phase][1]}", {}
    if phase in plugin.problems:
        outcome, message = plugin.problems[phase]
        return outcome, message, {}
    rows = phase_checks(phase, plugin, correct, ref, dtype, perturbed)
    worst = max(rows, key=lambda r: r["ratio"])
    details = {"checks": sorted(rows, key=lambda r: -r["ratio"])[:8], "worst": worst,
               "fused_kernels": plugin.fused.get(phase, {}), "tensors": len(rows),
               "perturbed": perturbed is not None}
    if phase == GENERATE:
        details["tokens"] = {"plugin": np.asarray(plugin.tokens).tolist(),
                             "correct": np.asarray(correct.tokens).tolist()}
    if phase == "train":
        details["curve"] = {"plugin": plugin.curve, "correct": correct.curve, "reference": ref.curve}
        if perturbed is not None:
            details["curve"]["perturbed"] = perturbed.curve
    bad = [r for r in rows if not r["ok"]]
    if not bad:
        return PASS, "", details
    if phase == GENERATE:
        return FAIL, (f"{len(bad)} of {len(rows)} rows generate other tokens than torch's CPU "
                      f"in {dtype}; worst {worst['tensor']}: the CPU's top-two logit gap there is "
                      f"{_fmt(worst['error'])} logits RMS = {_fmt(worst['ratio'])}x the near-tie "
                      f"bound {_fmt(worst['bound'])}"), details
    return FAIL, (f"{len(bad)} of {len(rows)} tensors exceed their bound; worst {worst['tensor']}: "
                  f"error {_fmt(worst['error'])} = {_fmt(worst['ratio'])}x the bound "
                  f"{_fmt(worst['bound'])} (correct {dtype} run: {_fmt(worst['correct_error'])}, "
                  f"perturbed correct run: {_fmt(worst['perturbed_error'])})"), details
