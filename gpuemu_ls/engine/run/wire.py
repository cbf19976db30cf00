"""The script protocol: tensors as JSON objects with base64 little-endian data.

Request (stdin of a script): ``{"inputs": {name: tensor}, "kwargs": {...}}``. Response (stdout):
``{"outputs": {name: tensor}}`` or a bare tensor (named ``result``). A tensor is
``{"shape": [...], "dtype": "float32", "data": "<base64>"}`` with an optional ``"strides"`` in
*elements*: when present, ``data`` holds the bytes from the first element to the last one the view
touches, and element ``idx`` sits at ``sum(idx[k] * strides[k])``. Strides are only sent to scripts
that declared non-contiguous layouts; they are always honest about ``data``.

This JSON form is only for scripts; inside the engine tensors travel as binary numpy buffers.
"""

from __future__ import annotations

import binascii
import json
from typing import Any

import numpy as np
import pybase64

from .. import dtypes as dt


class ProtocolError(ValueError):
    """A message that does not follow the script protocol; the text says what was wrong."""


def _le(dtype: np.dtype) -> np.dtype:
    return dtype.newbyteorder("<") if dtype.byteorder not in ("=", "|", "<") or dtype.itemsize > 1 else dtype


def encode_tensor(arr: np.ndarray, *, strides: bool = False) -> dict[str, Any]:
    """A protocol tensor; with ``strides=True`` a non-contiguous view keeps its layout (non-negative strides)."""
    t = _encoded(arr, strides)
    t["data"] = t["data"].decode("ascii")
    return t


def _encoded(arr: np.ndarray, strides: bool) -> dict[str, Any]:
    """:func:`encode_tensor` with ``data`` as base64 bytes, read from the array's memory in place."""
    arr = np.asarray(arr)
    name = dt.dtype_name(arr.dtype)
    little = _le(arr.dtype)
    if strides and not arr.flags.c_contiguous and arr.size and all(s >= 0 for s in arr.strides):
        item = arr.itemsize
        if all(s % item == 0 for s in arr.strides):
            span = sum((n - 1) * s for n, s in zip(arr.shape, arr.strides)) // item + 1
            flat = np.lib.stride_tricks.as_strided(arr, shape=(span,), strides=(item,))
            return {
                "shape": list(arr.shape),
                "dtype": name,
                "strides": [s // item for s in arr.strides],
                "data": _b64(flat.astype(little, copy=False)),
            }
    return {"shape": list(arr.shape), "dtype": name, "data": _b64(np.ascontiguousarray(arr).astype(little, copy=False))}


def _b64(arr: np.ndarray) -> bytes:
    """Base64 of a C-contiguous array's bytes, read in place (``tobytes`` would copy them first).

    pybase64 (SIMD) rather than binascii: a script case moves four tensors through base64, and binascii's
    4 ms for the float64 reference's 512 KB was a fifth of what gpuemu added to the scripts' own work
    (benchmark 1); pybase64 takes a few hundredths of a millisecond for the same bytes."""
    return pybase64.b64encode(arr.reshape(-1).view(np.uint8))


def _b64decode(data: str) -> bytes:
    """A protocol string's bytes, as ``base64.b64decode(data, validate=True)`` decodes them (a character outside
    the alphabet or bad padding is an error, never skipped), with pybase64's SIMD decoder (see :func:`_b64`);
    what is wrong with bad data is said by binascii's strict decoder ("Incorrect padding", "Excess data after
    padding"), which pybase64 reports as a non-base64 digit."""
    try:
        return pybase64.b64decode(data, validate=True)
    except ValueError:
        binascii.a2b_base64(data, strict_mode=True)
        raise


def decode_tensor(obj: Any, where: str = "tensor") -> np.ndarray:
    """The array a protocol tensor describes (a C-contiguous copy); ProtocolError if malformed."""
    if not isinstance(obj, dict):
        raise ProtocolError(f"{where}: expected an object with shape, dtype and data, got {type(obj).__name__}")
    missing = [k for k in ("shape", "dtype", "data") if k not in obj]
    if missing:
        raise ProtocolError(f"{where}: missing {', '.join(missing)} (has {', '.join(sorted(obj)) or 'nothing'})")
    shape = obj["shape"]
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
        raise ProtocolError(f"{where}: shape must be a list of non-negative integers, got {shape!r}")
    try:
        dtype = dt.numpy_dtype(obj["dtype"])
    except (KeyError, TypeError) as exc:
        raise ProtocolError(f"{where}: {exc}") from None
    if not isinstance(obj["data"], str):
        raise ProtocolError(f"{where}: data must be a base64 string")
    try:
        raw = _b64decode(obj["data"])
    except ValueError as exc:
        raise ProtocolError(f"{where}: data is not valid base64 ({exc})") from None
    item = dtype.itemsize
    if len(raw) % item:
        raise ProtocolError(f"{where}: {len(raw)} data bytes is not a whole number of {obj['dtype']} elements")
    flat = np.frombuffer(raw, dtype=_le(dtype)).astype(dtype, copy=False)
    numel = int(np.prod(shape, dtype=np.int64)) if shape else 1
    strides = obj.get("strides")
    if strides is None:
        if flat.size != numel:
            raise ProtocolError(f"{where}: shape {shape} needs {numel} elements, data has {flat.size}")
        return flat.reshape(shape).copy()
    if (
        not isinstance(strides, list)
        or len(strides) != len(shape)
        or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in strides)
    ):
        raise ProtocolError(f"{where}: strides must be {len(shape)} non-negative integers (in elements)")
    if numel == 0:
        return np.empty(shape, dtype=dtype)
    last = sum((n - 1) * s for n, s in zip(shape, strides))
    if last >= flat.size:
        raise ProtocolError(f"{where}: strides {strides} reach element {last}, data has {flat.size}")
    view = np.lib.stride_tricks.as_strided(flat, shape=shape, strides=[s * item for s in strides])
    return np.ascontiguousarray(view)


def _tensor_parts(arr: np.ndarray, strides: bool) -> list[bytes]:
    """One tensor as JSON text, assembled directly: base64 needs no escaping, so json.dumps would only scan it."""
    t = _encoded(arr, strides)
    extra = f', "strides": {json.dumps(t["strides"])}' if "strides" in t else ""
    return [
        f'{{"shape": {json.dumps(t["shape"])}, "dtype": "{t["dtype"]}"{extra}, "data": "'.encode(),
        t["data"],
        b'"}',
    ]


def request_parts(inputs: dict[str, np.ndarray], kwargs: dict[str, Any], *, strides: bool = False) -> list[bytes]:
    """The request as ASCII pieces, to be written one after the other: a megabyte tensor is never copied into
    a text and back into bytes (json.dumps escapes every non-ASCII character)."""
    parts = [b'{"inputs": {']
    for i, (k, v) in enumerate(inputs.items()):
        parts += [f"{', ' if i else ''}{json.dumps(k)}: ".encode(), *_tensor_parts(v, strides)]
    return [*parts, f'}}, "kwargs": {json.dumps(kwargs)}}}'.encode()]


def encode_request(inputs: dict[str, np.ndarray], kwargs: dict[str, Any], *, strides: bool = False) -> str:
    return b"".join(request_parts(inputs, kwargs, strides=strides)).decode("ascii")


def decode_request(text: str) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ProtocolError(f"request is not JSON: {exc}") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("inputs"), dict):
        raise ProtocolError('request must be an object with "inputs"')
    return {k: decode_tensor(v, f"input {k!r}") for k, v in obj["inputs"].items()}, obj.get("kwargs", {})


def encode_response(outputs: dict[str, np.ndarray] | np.ndarray) -> str:
    if isinstance(outputs, np.ndarray):
        outputs = {"result": outputs}
    return json.dumps({"outputs": {k: encode_tensor(v) for k, v in outputs.items()}})


def decode_response(text: str) -> dict[str, np.ndarray]:
    """Outputs of a script's stdout: exactly one JSON object, ``{"outputs": {...}}`` or a bare tensor."""
    try:  # JSON allows whitespace around the object: no stripped copy of a megabyte answer
        obj = json.loads(text)
    except json.JSONDecodeError:
        obj = _stripped_json(text)
    return _outputs(obj)


def _stripped_json(text: str) -> Any:
    """The object of a text JSON did not parse as it stood: parsed stripped (any Unicode whitespace around it),
    or a ProtocolError that says what is wrong."""
    stripped = text.strip()
    if not stripped:
        raise ProtocolError("the script printed nothing on stdout (expected one JSON object)")
    try:
        obj = json.loads(stripped)
    except json.JSONDecodeError as exc:
        start = stripped.find("{")
        if start > 0:
            junk = stripped[:start].strip().splitlines()[-1][:120]
            raise ProtocolError(
                f"the script printed text before its JSON output: {junk!r} "
                "(stdout must hold exactly one JSON object; print logs to stderr)"
            ) from None
        raise ProtocolError(
            f"stdout is not one JSON object ({exc.msg} at char {exc.pos}): {stripped[:120]!r}"
        ) from None
    return obj


def _outputs(obj: Any) -> dict[str, np.ndarray]:
    """The outputs a script's parsed answer holds (see :func:`decode_response`)."""
    if isinstance(obj, dict) and "outputs" in obj:
        outs = obj["outputs"]
        if isinstance(outs, dict) and {"shape", "dtype", "data"} <= set(outs):
            return {"result": decode_tensor(outs, "output")}
        if not isinstance(outs, dict) or not outs:
            raise ProtocolError('"outputs" must map output names to tensors')
        return {k: decode_tensor(v, f"output {k!r}") for k, v in outs.items()}
    if isinstance(obj, dict) and "error" in obj and "shape" not in obj:
        raise ProtocolError(f"the script reported an error: {str(obj['error'])[:500]}")
    return {"result": decode_tensor(obj, "output")}
