"""The script protocol: tensors as JSON with base64 little-endian data, strides, and clear errors."""

from __future__ import annotations

import base64
import json

import ml_dtypes
import numpy as np
import pytest

from gpuemu_ls.engine import dtypes as dt
from gpuemu_ls.engine.cases.generate import make_layout
from gpuemu_ls.engine.run import wire


def sample(name: str) -> np.ndarray:
    base = np.arange(24).reshape(2, 3, 4)
    if name == "bool":
        return (base % 3 == 0).astype(np.bool_)
    if name.startswith("int"):
        return (base - 12).astype(dt.numpy_dtype(name))
    if dt.is_float(name):
        return (base * 0.75 - 7).astype(dt.numpy_dtype(name))
    return base.astype(dt.numpy_dtype(name))


@pytest.mark.parametrize("strides", [False, True])
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "strided"])
@pytest.mark.parametrize("name", dt.ALL_NAMES)
def test_round_trip_every_dtype_and_layout(name: str, layout: str, strides: bool) -> None:
    logical = sample(name)
    view = make_layout(logical, layout)
    enc = json.loads(json.dumps(wire.encode_tensor(view, strides=strides)))
    assert enc["dtype"] == name and enc["shape"] == [2, 3, 4]
    assert ("strides" in enc) == (strides and layout != "contiguous")
    back = wire.decode_tensor(enc)
    assert back.dtype == dt.numpy_dtype(name) and back.flags.c_contiguous
    assert back.tobytes() == logical.tobytes()


def test_strided_encoding_sends_the_touched_span_with_element_strides() -> None:
    logical = np.arange(6, dtype=np.float32).reshape(2, 3)
    view = make_layout(logical, "strided")  # every other element of a (2, 6) buffer
    enc = wire.encode_tensor(view, strides=True)
    assert enc["strides"] == [6, 2]
    raw = np.frombuffer(base64.b64decode(enc["data"]), dtype="<f4")
    assert raw.size == 11 and np.isnan(raw[1])  # first to last touched element, gaps included
    t = make_layout(logical, "transposed")
    assert wire.encode_tensor(t, strides=True)["strides"] == [1, 2]


def test_bfloat16_travels_as_bf16_bits_little_endian() -> None:
    arr = np.array([1.0, -2.0, 0.5], dtype=ml_dtypes.bfloat16)
    enc = wire.encode_tensor(arr)
    assert base64.b64decode(enc["data"]) == bytes.fromhex("803f00c0003f")
    back = wire.decode_tensor(enc)
    assert back.dtype == ml_dtypes.bfloat16 and back.tolist() == arr.tolist()


def test_data_is_little_endian_even_for_big_endian_arrays() -> None:
    arr = np.array([1, 256], dtype=">i4")
    enc = wire.encode_tensor(arr)
    assert base64.b64decode(enc["data"]) == bytes.fromhex("0100000000010000")
    assert wire.decode_tensor(enc).tolist() == [1, 256]


def test_scalar_and_empty_tensors() -> None:
    for arr in (np.array(3.5), np.zeros((0, 4), dtype=np.float16), np.zeros((2, 0), dtype=np.int8)):
        back = wire.decode_tensor(wire.encode_tensor(arr))
        assert back.shape == arr.shape and back.dtype == arr.dtype and back.tobytes() == arr.tobytes()
    empty = {"shape": [0, 3], "dtype": "float32", "data": "", "strides": [3, 1]}
    assert wire.decode_tensor(empty).shape == (0, 3)


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


@pytest.mark.parametrize(
    ("obj", "words"),
    [
        ({"shape": [2]}, "missing dtype, data"),
        ({"dtype": "float32", "data": ""}, "missing shape"),
        ([1, 2], "expected an object"),
        ({"shape": [2], "dtype": "float32", "data": "!!not base64!!"}, "not valid base64"),
        ({"shape": [2], "dtype": "float32", "data": b64(b"\0" * 8)[:-1]}, "not valid base64 (Incorrect padding)"),
        ({"shape": [2], "dtype": "float32", "data": " " + b64(b"\0" * 8)}, "not valid base64"),  # never skipped
        ({"shape": [2], "dtype": "float32", "data": b64(b"\0" * 8) + "\n"}, "not valid base64"),
        ({"shape": [2], "dtype": "float32", "data": b64(b"\0" * 4)}, "needs 2 elements, data has 1"),
        ({"shape": [2], "dtype": "float32", "data": b64(b"\0" * 7)}, "7 data bytes is not a whole number of float32"),
        ({"shape": [2], "dtype": "float128", "data": ""}, "unknown dtype 'float128'"),
        ({"shape": [2], "dtype": 32, "data": ""}, "unknown dtype"),
        ({"shape": [-1], "dtype": "float32", "data": ""}, "shape must be a list of non-negative integers"),
        ({"shape": "2", "dtype": "float32", "data": ""}, "shape must be a list"),
        ({"shape": [2], "dtype": "float32", "data": 5}, "data must be a base64 string"),
        ({"shape": [2], "dtype": "float32", "data": b64(b"\0" * 8), "strides": [5]}, "reach element 5, data has 2"),
        ({"shape": [2, 2], "dtype": "float32", "data": b64(b"\0" * 16), "strides": [1]}, "strides must be 2"),
        ({"shape": [2], "dtype": "float32", "data": b64(b"\0" * 8), "strides": [-1]}, "non-negative"),
    ],
)
def test_malformed_tensors_raise_protocol_error_naming_the_problem(obj, words: str) -> None:
    with pytest.raises(wire.ProtocolError) as info:
        wire.decode_tensor(obj, "output 'y'")
    assert words in str(info.value)
    assert str(info.value).startswith("output 'y'")


def test_request_round_trip() -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = np.array([1, 0], dtype=np.int64)
    text = wire.encode_request({"x": make_layout(x, "transposed"), "t": t}, {"eps": 1e-5, "axis": -1}, strides=True)
    inputs, kwargs = wire.decode_request(text)
    assert kwargs == {"eps": 1e-5, "axis": -1}
    assert inputs["x"].tobytes() == x.tobytes() and inputs["t"].tolist() == [1, 0]
    with pytest.raises(wire.ProtocolError, match="request is not JSON"):
        wire.decode_request("{")
    with pytest.raises(wire.ProtocolError, match='"inputs"'):
        wire.decode_request("[]")


def test_decode_response_forms() -> None:
    y = np.linspace(0, 1, 5)
    named = json.dumps({"outputs": {"result": wire.encode_tensor(y), "aux": wire.encode_tensor(np.int8([1]))}})
    out = wire.decode_response(named)
    assert set(out) == {"result", "aux"} and out["result"].tolist() == y.tolist()
    bare = json.dumps(wire.encode_tensor(y))
    assert wire.decode_response("\n" + bare + "\n")["result"].tolist() == y.tolist()
    # "outputs" holding one tensor directly (a common script mistake) is accepted as result
    direct = json.dumps({"outputs": wire.encode_tensor(y)})
    assert wire.decode_response(direct)["result"].tolist() == y.tolist()
    assert wire.decode_response(wire.encode_response(y))["result"].tolist() == y.tolist()


def test_junk_before_json_is_quoted_in_the_error() -> None:
    body = json.dumps({"outputs": {"result": wire.encode_tensor(np.ones(2))}})
    with pytest.raises(wire.ProtocolError) as info:
        wire.decode_response("loading weights...\ndone\n" + body)
    msg = str(info.value)
    assert "'done'" in msg and "printed text before its JSON output" in msg and "stderr" in msg


@pytest.mark.parametrize("text", ["", "   \n\t\n"])
def test_empty_stdout_is_an_error(text: str) -> None:
    with pytest.raises(wire.ProtocolError, match="printed nothing on stdout"):
        wire.decode_response(text)


def test_other_bad_responses() -> None:
    with pytest.raises(wire.ProtocolError, match=r"not one JSON object.*'nonsense'"):
        wire.decode_response("nonsense")
    with pytest.raises(wire.ProtocolError, match="reported an error: boom"):
        wire.decode_response('{"error": "boom"}')
    with pytest.raises(wire.ProtocolError, match='"outputs" must map'):
        wire.decode_response('{"outputs": {}}')
    with pytest.raises(wire.ProtocolError, match="output 'y': missing"):
        wire.decode_response('{"outputs": {"y": {"shape": [1]}}}')
