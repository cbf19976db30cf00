"""Backward validation: an op's gradients judged as outputs of their own (``grad = ["x", "weight"]``).

Most numerical bugs that ship in training kernels are in the backward pass, and the usual test feeds it
``grad_output = ones_like(out)``, which hides a backward that forgets to multiply by the upstream
gradient. Here the upstream gradient of every forward output is a generated input of its own, drawn per
case from (op, seed, output) by :class:`Upstream` from finite distributions only (never only ones: zeros,
sparse, per-row constant and per-element varying included), in the output's dtype.

The op runs forward and backward under PyTorch's autograd (``torch.autograd.grad``); its results are the
forward outputs plus ``grad_<input>`` for each differentiated input. The float64 reference does the same
with its own autograd (``reference_framework = "pytorch"``), or, for a numpy reference,
``reference_grad = "module:function"`` computes the input gradients from the inputs and the upstream
gradients. Both sides get the very same upstream values
(the op in the output dtype, the reference those values in float64), so every gradient is an ordinary
output: compared, tiered, diagnosed, stored and replayed like any other.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from .. import dtypes as dt
from ..cases.rng import Stream
from .frameworks import get_adapter
from .runners import CallableRunner, CallError, Runner, as_outputs, load_callable, named_values

#: What an upstream gradient is drawn from (finite only; never ``masked_rows``/``special``, never only ones).
UPSTREAM_DISTRIBUTIONS = ("normal", "uniform", "small", "wide", "zeros", "sparse", "row_constant", "varying")
#: The prefix of a gradient output's name: ``grad_x`` is d(sum(upstream * outputs))/dx.
GRAD_PREFIX = "grad_"


class Upstream:
    """The upstream gradients of one case: drawn once per forward output, shared by op and reference.

    The first caller (the op, which runs first) fixes each output's draw at its output's shape and dtype;
    the reference gets those values in float64. A reference whose output has another shape gets a fresh
    draw of its own shape (the forward comparison then fails on the shape anyway)."""

    def __init__(self, op: str, seed: int, outputs: tuple[str, ...] = ()) -> None:
        self.op = op
        self.seed = seed
        # a runner names its outputs result/result0.. before they are renamed to the op's ``outputs``: each draw
        # is keyed by the final name, the one a stored failure and a standalone reproduction know it by
        positional = ["result"] if len(outputs) == 1 else [f"result{i}" for i in range(len(outputs))]
        self.aliases = dict(zip(positional, outputs))
        self.drawn: dict[str, np.ndarray] = {}
        self.kinds: dict[str, str] = {}
        self.jitter: tuple[float, int] | None = None  # (eps, run): the reference's draws moved by up to eps

    @contextlib.contextmanager
    def jittered(self, eps: float, run: int) -> Iterator[None]:
        """The reference's upstream gradients moved by relative amounts up to ``eps`` (random, per element, the
        same on every machine) while inside: the working-precision evaluations of run.case move every input."""
        self.jitter = (eps, run)
        try:
            yield
        finally:
            self.jitter = None

    def for_op(self, name: str, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        got = self.drawn.get(name)
        if got is None or got.shape != shape:
            got = self._draw(name, shape, dtype)
            self.drawn[name] = got
        return got

    def for_reference(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        got = self.drawn.get(name)
        if got is None or got.shape != shape:
            got = self._draw(name, shape, np.dtype(np.float64))
        values = got.astype(np.float64)
        if self.jitter is not None and values.size:
            eps, run = self.jitter
            u = 2.0 * Stream("sensitivity", self.op, self.seed, f"upstream:{name}", run).uniform(values.size) - 1.0
            values = values * (1.0 + eps * u.reshape(values.shape))
        return values

    def _draw(self, name: str, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        name = self.aliases.get(name, name)
        stream = Stream("upstream", self.op, self.seed, name)
        kind = stream.choice(UPSTREAM_DISTRIBUTIONS)
        self.kinds.setdefault(name, kind)
        n = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if kind == "zeros":
            values = np.zeros(n)
        elif kind == "uniform":
            values = stream.uniform(n) * 2 - 1
        elif kind == "small":
            values = stream.normal(n) * 1e-3
        elif kind == "wide":
            values = stream.normal(n) * 10
        elif kind == "sparse":  # most zero, a few normal: a mean over a few tokens, ignored positions
            values = np.where(stream.uniform(n) < 0.1, stream.normal(n), 0.0)
        elif kind == "row_constant":  # each row one value: a loss averaged per row
            rows = shape[0] if len(shape) >= 2 else 1
            values = np.repeat(stream.normal(rows), n // max(rows, 1)) if n else np.zeros(0)
        elif kind == "varying":  # per-element scale spanning decades: a backward that reads the wrong element
            values = stream.normal(n) * np.exp2(np.floor(stream.uniform(n) * 12) - 6)
        else:
            values = stream.normal(n)
        out = values.reshape(shape)
        return out.astype(dtype) if dt.is_float(dt.dtype_name(dtype)) else out.astype(np.float64)


class _Backward(Runner):
    """What both autograd runners share: the case's upstream draw, as the op or the reference takes it."""

    def __init__(self, inner: CallableRunner, grad: tuple[str, ...], *, reference: bool = False) -> None:
        self.inner = inner
        self.where = inner.where
        self.adapter = inner.adapter
        self.who = inner.who
        self.grad = grad
        self.reference = reference
        self.upstream: Upstream | None = None

    def _upstream(self, name: str, like: np.ndarray) -> np.ndarray:
        assert self.upstream is not None, "the case sets the upstream gradients before calling"
        if self.reference:  # float64, or the dtype of a working-precision evaluation (run/case.py)
            up = self.upstream.for_reference(name, like.shape)
            return up.astype(like.dtype) if like.dtype.kind == "f" else up
        return self.upstream.for_op(name, like.shape, like.dtype)


class GradRunner(_Backward):
    """An in-process op (or float64 reference), ``inner``, run forward and backward under PyTorch's autograd.

    ``upstream`` is set per case by the caller (:func:`run_case`). ``reference``: the upstream values are
    taken in float64 (the reference's side)."""

    def call(self, inputs: dict[str, np.ndarray], kwargs: dict[str, Any]) -> dict[str, np.ndarray]:
        torch = self.adapter.torch  # type: ignore[attr-defined]
        args, backs, leaves = [], [], []
        for name in self.inner.order:
            tensor, back = self.adapter.place(inputs[name])
            if back is not None:
                backs.append(back)
            if name in self.grad:
                tensor = tensor.detach().requires_grad_(True)  # still the engine's memory: writes are seen
                leaves.append(tensor)
            args.append(tensor)
        try:
            with torch.enable_grad():
                value = self.inner.invoke(args, kwargs)
                named = dict(named_values(value))
                forward = {n: self.adapter.to_numpy(t) for n, t in named.items()}
                pairs = [(t, n) for n, t in named.items() if isinstance(t, torch.Tensor) and t.requires_grad]
                if not pairs:
                    raise CallError(
                        "bad_output",
                        f"{self.who}'s outputs carry no gradient (none requires grad): does it call its "
                        "autograd Function (.apply), and not detach or return numpy?",
                    )
                ups = [self.adapter.place(np.ascontiguousarray(self._upstream(n, forward[n])))[0] for t, n in pairs]
                grads = torch.autograd.grad([t for t, _ in pairs], leaves, grad_outputs=ups, allow_unused=True)
            value = self.adapter.synchronize(grads)
        except CallError:
            raise
        except BaseException as exc:  # SystemExit and KeyboardInterrupt from user code are results too
            raise self._raised(exc) from None
        finally:
            for back in backs:
                back()
        out = as_outputs(named, self.adapter, self.who)
        for name, leaf, g in zip(self.grad_order(), leaves, grads):
            out[GRAD_PREFIX + name] = (
                self.adapter.to_numpy(g) if g is not None else np.zeros(leaf.shape, self.adapter.to_numpy(leaf).dtype)
            )
        return out

    def grad_order(self) -> list[str]:
        """The differentiated inputs in call order (the order their leaves are made in)."""
        return [n for n in self.inner.order if n in self.grad]

    def _raised(self, exc: BaseException) -> CallError:
        text = str(exc)
        if "leaf Variable that requires grad" in text or "a view of a leaf Variable" in text:
            return CallError(
                "raised",
                f"{self.who} writes in place into an input it is differentiated by (grad): gpuemu makes each input "
                "of `grad` a leaf that requires grad, and autograd forbids writing into one; clone inside the "
                f"op, or leave that input out of `grad` ({type(exc).__name__}: {text})",
            )
        return self.inner.call_error(exc)


class JaxGradRunner(_Backward):
    """A JAX op, ``inner``, differentiated through ``jax.vjp`` with the case's upstream gradients (its cotangent
    in the structure the op returns: one array, a tuple, or a dict)."""

    def call(self, inputs: dict[str, np.ndarray], kwargs: dict[str, Any]) -> dict[str, np.ndarray]:
        jax = self.adapter.jax  # type: ignore[attr-defined]
        args = [self.adapter.place(inputs[name])[0] for name in self.inner.order]
        at = [i for i, name in enumerate(self.inner.order) if name in self.grad]

        def forward(*diff: Any) -> Any:
            full = list(args)
            for i, d in zip(at, diff):
                full[i] = d
            return self.inner.invoke(full, kwargs)

        try:
            value, vjp = jax.vjp(forward, *(args[i] for i in at))
            named = dict(named_values(value))
            ups = {n: self._upstream(n, self.adapter.to_numpy(t)) for n, t in named.items()}
            if isinstance(value, dict):
                cotangent: Any = {k: self.adapter.place(ups[str(k)])[0] for k in value}
            elif isinstance(value, (tuple, list)):
                cotangent = type(value)(self.adapter.place(ups[f"result{i}"])[0] for i in range(len(value)))
            else:
                cotangent = self.adapter.place(ups["result"])[0]
            grads = self.adapter.synchronize(vjp(cotangent))
        except CallError:
            raise
        except BaseException as exc:  # SystemExit and KeyboardInterrupt from user code are results too
            raise self.inner.call_error(exc) from None
        out = as_outputs(value, self.adapter, self.who)
        for name, g in zip([n for n in self.inner.order if n in self.grad], grads):
            out[GRAD_PREFIX + name] = self.adapter.to_numpy(g)
        return out


class ReferenceGradRunner(CallableRunner):
    """A numpy float64 reference with ``reference_grad``: the forward from the reference, the input gradients
    from ``reference_grad(*inputs, *upstreams)`` (upstreams in forward-output order), which returns them in
    ``grad`` order (a tuple, or one array for one input) or by name (a dict keyed by input name)."""

    def __init__(
        self, root: Path, ref: str, grad_ref: str, order: tuple[str, ...], grad: tuple[str, ...], call: str
    ) -> None:
        super().__init__(root, ref, order, get_adapter("numpy"), "reference", call)
        self.grad = grad
        self.grad_order = [n for n in order if n in grad]  # the differentiated inputs in call order
        self.grad_fn: Callable[..., Any] = load_callable(root, grad_ref)
        self.upstream: Upstream | None = None

    def call(self, inputs: dict[str, np.ndarray], kwargs: dict[str, Any]) -> dict[str, np.ndarray]:
        assert self.upstream is not None
        out = super().call(inputs, kwargs)
        ups = [self.upstream.for_reference(n, out[n].shape) for n in sorted(out)]
        args = [inputs[n] for n in self.order]
        try:
            value = self.grad_fn(*args, *ups, **kwargs)
        except BaseException as exc:
            raise self.call_error(exc, who="reference_grad") from None
        if isinstance(value, dict):
            got = {n.removeprefix(GRAD_PREFIX) if n.startswith(GRAD_PREFIX) else n: v for n, v in value.items()}
        elif isinstance(value, (tuple, list)) and len(self.grad) > 1:
            got = dict(zip(self.grad_order, value))
        else:
            got = {self.grad_order[0]: value}
        missing = [n for n in self.grad if n not in got]
        if missing:
            raise CallError("bad_output", f"reference_grad returned no gradient for {', '.join(missing)}")
        for n in self.grad:
            out[GRAD_PREFIX + n] = np.asarray(got[n], dtype=np.float64)
        return out


def grad_names(grad: tuple[str, ...]) -> list[str]:
    """The output names the gradients of ``grad`` get."""
    return [GRAD_PREFIX + n for n in grad]


__all__ = [
    "GRAD_PREFIX",
    "UPSTREAM_DISTRIBUTIONS",
    "GradRunner",
    "JaxGradRunner",
    "ReferenceGradRunner",
    "Upstream",
    "grad_names",
]
