"""Input generation: golden bytes, real memory layouts, and each value distribution's promise."""

from __future__ import annotations

import dataclasses
import hashlib

import ml_dtypes
import numpy as np
import pytest

from gpuemu_ls.engine import dtypes as dt
from gpuemu_ls.engine.cases.generate import _cast, generate_inputs, make_layout, with_layout
from gpuemu_ls.engine.cases.plan import CaseSpec, derive_case, shape_of
from gpuemu_ls.engine.config.load import OpConfig, load_config

GEN_TOML = """
[validation]
dtypes = ["float32", "float16", "bfloat16"]

[[ops]]
name = "gen"
module = "ops:op"
reference = "ops:ref"

[ops.inputs.x]
shape = ["B", "N"]

[ops.inputs.t]
shape = ["B"]
dtype = "int64"
range = [0, "N"]

[ops.dims]
B = { min = 1, max = 16, default = 4 }
N = { min = 1, max = 64, default = 16 }
"""
OPS_PY = "def op(x, t):\n    return x\n\ndef ref(x, t):\n    return x\n"

# sha256 of the logical bytes of x and t for (gen, seed), computed once and pasted.
GOLDEN = [
    (
        0,
        "bfloat16",
        "normal",
        (16, 15),
        "75d88551111a91abdeb517f97fc74d0d5aec095d849c47bf1b7ba482170e3874",
        "ba80cd2a381bd703facfe18b9f35a6a656688f7556c50d0b503d8517a3dd7f51",
    ),
    (
        1,
        "float32",
        "partial_inf",
        (2, 2),
        "290920f3cac9475a58205ff9b7878e088e7a3555bda9f50dc19560b7c5d81508",
        "9d34149fbd1fe777eb238799054c8cbfbce372255f219f8740838def9bfd02db",
    ),
    (
        2,
        "float16",
        "large",
        (4, 16),
        "ddf747c495a77bdfb5940d57a3a57b2192cc6e7e30f9d601fc1aa9ab68c2a02d",
        "dae0342d1f12c9c4428dfec7cb9a112245c9ffc3e9207147205f085b93794366",
    ),
    (
        3,
        "float32",
        "boundary",
        (4, 16),
        "fb02d099741f468b275f786ca6251faf8e896da011a4fcb453a424f22d1384ad",
        "72a4463b397b80962d1dee610d72bce4334c17337ee573f561fc449981e301df",
    ),
    (
        4,
        "float16",
        "constant_rows",
        (16, 8),
        "9d3ee95cb2c49149242d6973d95b6180555935b6ea7849a4d363fadc54a70fe0",
        "983add48ff63a5d7d576d807dc2a17b41ccdc197791a94e9d8ba76021f5fc808",
    ),
    (
        5,
        "bfloat16",
        "masked_rows",
        (13, 28),
        "acdb6bec51e9b56c054b879bb677e5801cc3b3e0beb320879f777ca181a62a69",
        "381f3e1ca0eebf2065b692f56bfdf73dee98c8f62bfb59fe1ac6a7e91e1caf33",
    ),
    (
        6,
        "bfloat16",
        "uniform",
        (16, 62),
        "aa71dee0ca755dd0fbb8ff49fecba8d29b7676950e990697a66a35f33b395302",
        "7abff26361e7473cfb0e863624b9cdd04750c3cf0b442caffa7f309f0f68e58a",
    ),
    (
        7,
        "float16",
        "special",
        (16, 8),
        "361f3c9718ac0b73625fa90bcb13be1df5921125263d2cbfa12f402490b102d4",
        "d73f2616e20e2293f79366383c803ac023d8d1db1cad23fe6c95d855922b2a7e",
    ),
]


@pytest.fixture(scope="module")
def gen_op(tmp_path_factory: pytest.TempPathFactory) -> OpConfig:
    root = tmp_path_factory.mktemp("gen")
    (root / "gpuemu.toml").write_text(GEN_TOML)
    (root / "ops.py").write_text(OPS_PY)
    return load_config(root, user_config=root / "none.toml").op("gen")


def spec_with(op: OpConfig, seed: int = 0, **changes: object) -> CaseSpec:
    """derive_case(op, seed) with some fields replaced; dims changes also update the shapes."""
    spec = derive_case(op, seed)
    dims = dict(spec.dims, **changes.pop("dims", {}))  # type: ignore[arg-type]
    shapes = {i.name: shape_of(i.shape, dims) for i in op.inputs}
    dist = changes.get("distribution", spec.distribution)
    per_input = {k: (v if v == "range" else dist) for k, v in spec.input_distributions.items()}
    return dataclasses.replace(spec, dims=dims, shapes=shapes, input_distributions=per_input, **changes)


def sha(a: np.ndarray) -> str:
    return hashlib.sha256(a.tobytes()).hexdigest()


@pytest.mark.parametrize(("seed", "dtype", "dist", "shape", "x_sha", "t_sha"), GOLDEN)
def test_golden_input_bytes(gen_op: OpConfig, seed, dtype, dist, shape, x_sha, t_sha) -> None:
    spec = derive_case(gen_op, seed)
    assert (spec.dtype, spec.distribution, spec.shapes["x"]) == (dtype, dist, shape)
    inputs = generate_inputs(gen_op, spec)
    x, t = inputs.logical["x"], inputs.logical["t"]
    assert x.dtype == dt.numpy_dtype(dtype) and x.flags.c_contiguous and x.shape == shape
    assert t.dtype == np.int64 and t.shape == shape[:1]
    assert sha(x) == x_sha
    assert sha(t) == t_sha
    # generation is a pure function of (op, seed)
    again = generate_inputs(gen_op, derive_case(gen_op, seed))
    assert sha(again.logical["x"]) == x_sha


def test_bfloat16_inputs_are_real_bf16_bits(gen_op: OpConfig) -> None:
    x = generate_inputs(gen_op, spec_with(gen_op, dtype="bfloat16", distribution="normal")).logical["x"]
    assert x.dtype == ml_dtypes.bfloat16 and x.itemsize == 2
    bits = x.view(np.uint16)
    # the float64 draw was rounded to 8 significant bits: widening to float32 leaves 16 zero low bits
    wide = x.astype(np.float32).view(np.uint32)
    assert np.array_equal((wide >> 16).astype(np.uint16), bits) and not np.any(wide & 0xFFFF)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_transposed_layout_is_a_non_contiguous_view_of_the_same_values(gen_op: OpConfig, dtype: str) -> None:
    spec = spec_with(gen_op, dtype=dtype, layout="transposed", distribution="normal", dims={"B": 5, "N": 7})
    inputs = generate_inputs(gen_op, spec)
    view, logical = inputs.views["x"], inputs.logical["x"]
    assert not view.flags.c_contiguous and view.flags.f_contiguous and view.shape == (5, 7)
    assert view.strides == (view.itemsize, 5 * view.itemsize)
    assert np.ascontiguousarray(view).tobytes() == logical.tobytes()
    assert not np.shares_memory(view, logical)  # the op gets its own copy


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_strided_layout_has_poisoned_gaps(gen_op: OpConfig, dtype: str) -> None:
    spec = spec_with(gen_op, dtype=dtype, layout="strided", distribution="normal", dims={"B": 3, "N": 6})
    inputs = generate_inputs(gen_op, spec)
    view = inputs.views["x"]
    assert view.strides == (12 * view.itemsize, 2 * view.itemsize)
    assert np.ascontiguousarray(view).tobytes() == inputs.logical["x"].tobytes()
    base = view.base
    assert base.shape == (3, 12)
    assert np.all(np.isnan(base[:, 1::2].astype(np.float64)))  # a kernel ignoring strides reads NaN
    # the int64 input is strided too, poisoned with the dtype's max
    t = inputs.views["t"]
    assert t.strides == (16,) and np.all(t.base[1::2] == np.iinfo(np.int64).max)


@pytest.mark.parametrize("dtype", dt.ALL_NAMES)
def test_every_dtype_in_every_layout_keeps_the_logical_values(dtype: str) -> None:
    a = np.arange(24).reshape(2, 3, 4) % 5
    arr = a.astype(dt.numpy_dtype(dtype))
    for layout in ("contiguous", "transposed", "strided"):
        v = make_layout(arr, layout)
        assert np.ascontiguousarray(v).tobytes() == arr.tobytes(), layout
    rebuilt = with_layout({"x": arr}, "strided")
    assert rebuilt.logical["x"] is arr and rebuilt.views["x"].base is not None


def rows(a: np.ndarray) -> np.ndarray:
    return np.asarray(a, dtype=np.float64).reshape(-1, a.shape[-1])


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_masked_rows_have_an_entirely_minus_inf_row(gen_op: OpConfig, dtype: str) -> None:
    for seed in range(6):
        x = generate_inputs(gen_op, spec_with(gen_op, seed, dtype=dtype, distribution="masked_rows")).logical["x"]
        r = rows(x)
        masked = np.all(r == -np.inf, axis=1)
        assert masked.any()
        assert np.all(np.isfinite(r[~masked]))


def test_partial_inf_keeps_a_finite_element_per_row(gen_op: OpConfig) -> None:
    total_inf = 0
    for seed in range(6):
        x = generate_inputs(gen_op, spec_with(gen_op, seed, distribution="partial_inf", dims={"B": 8, "N": 9}))
        r = rows(x.logical["x"])
        assert np.all(np.isfinite(r).any(axis=1))
        assert not np.isnan(r).any() and not np.isposinf(r).any()
        total_inf += int(np.isneginf(r).sum())
    assert total_inf > 0


def test_constant_rows_are_constant(gen_op: OpConfig) -> None:
    x = generate_inputs(gen_op, spec_with(gen_op, 3, distribution="constant_rows", dims={"B": 6, "N": 33}))
    r = rows(x.logical["x"])
    assert np.all(r == r[:, :1]) and len(set(r[:, 0].tolist())) > 1


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_large_magnitudes_stay_within_the_dtype_range(gen_op: OpConfig, dtype: str) -> None:
    spec = spec_with(gen_op, 1, dtype=dtype, distribution="large", dims={"B": 16, "N": 64})
    x = np.asarray(generate_inputs(gen_op, spec).logical["x"], dtype=np.float64)
    assert np.all(np.isfinite(x))
    mag = np.abs(x)
    assert mag.min() >= 8.0 and mag.max() <= dt.FLOAT_INFO[dtype].max_value
    assert (x < 0).any() and (x > 0).any()
    assert mag.max() >= (100.0 if dtype == "float16" else 1e6)  # large enough to overflow a naive exp


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_boundary_values_are_present(gen_op: OpConfig, dtype: str) -> None:
    spec = spec_with(gen_op, 2, dtype=dtype, distribution="boundary", dims={"B": 16, "N": 64})
    x = np.asarray(generate_inputs(gen_op, spec).logical["x"], dtype=np.float64)
    info = dt.FLOAT_INFO[dtype]
    values = set(x.ravel().tolist())
    assert {0.0, 1.0, -1.0, info.tiny, -info.tiny, info.smallest_subnormal, -info.smallest_subnormal} <= values
    assert np.any(x > info.max_value / 2) and np.any(x < -info.max_value / 2)  # near max, still finite
    assert np.all(np.isfinite(x))
    assert np.any(np.signbit(x) & (x == 0))  # -0.0 too


def test_special_values_on_a_large_input(gen_op: OpConfig) -> None:
    spec = spec_with(gen_op, 4, distribution="special", dims={"B": 16, "N": 64})
    x = np.asarray(generate_inputs(gen_op, spec).logical["x"], dtype=np.float64)
    assert np.isnan(x).any() and np.isposinf(x).any() and np.isneginf(x).any()
    assert np.isfinite(x).mean() > 0.8


def test_special_values_are_always_present(gen_op: OpConfig) -> None:
    for seed in range(8):
        spec = spec_with(gen_op, seed, distribution="special", dims={"B": 2, "N": 8})
        x = np.asarray(generate_inputs(gen_op, spec).logical["x"], dtype=np.float64)
        assert np.isnan(x).any() and np.isposinf(x).any() and np.isneginf(x).any(), seed


def test_shared_dims_are_equal_across_inputs(tmp_path) -> None:
    text = GEN_TOML.replace(
        '[ops.inputs.t]\nshape = ["B"]\ndtype = "int64"\nrange = [0, "N"]\n', '[ops.inputs.w]\nshape = ["N", "D"]\n'
    ).replace("N = { min = 1, max = 64, default = 16 }", "N = { min = 1, max = 64, default = 16 }\nD = [3, 5]")
    (tmp_path / "gpuemu.toml").write_text(text)
    (tmp_path / "ops.py").write_text("def op(x, w):\n    return x\n\ndef ref(x, w):\n    return x\n")
    op = load_config(tmp_path).op("gen")
    for seed in range(20):
        inputs = generate_inputs(op, derive_case(op, seed))
        x, w = inputs.logical["x"], inputs.logical["w"]
        assert x.shape[1] == w.shape[0] and w.shape[1] in (3, 5)


def test_ranged_int_inputs_stay_in_their_half_open_range(gen_op: OpConfig) -> None:
    seen: set[int] = set()
    for seed in range(30):
        spec = derive_case(gen_op, seed)
        t = generate_inputs(gen_op, spec).logical["t"]
        assert t.dtype == np.int64
        assert np.all((t >= 0) & (t < spec.dims["N"])), (seed, spec.dims, t)
        seen |= set(t.tolist())
    assert 0 in seen and len(seen) > 10


def test_float_input_with_a_numeric_range(tmp_path) -> None:
    text = GEN_TOML.replace(
        '[ops.inputs.t]\nshape = ["B"]\ndtype = "int64"\nrange = [0, "N"]\n',
        '[ops.inputs.t]\nshape = ["B"]\nrange = [2.0, 3.0]\n',
    )
    (tmp_path / "gpuemu.toml").write_text(text)
    (tmp_path / "ops.py").write_text(OPS_PY)
    op = load_config(tmp_path).op("gen")
    for seed in range(6):
        spec = derive_case(op, seed)
        t = np.asarray(generate_inputs(op, spec).logical["t"], dtype=np.float64)
        assert t.dtype == np.float64 and np.all((t >= 2.0) & (t <= 3.0))
        assert generate_inputs(op, spec).logical["t"].dtype == dt.numpy_dtype(spec.dtype)


@pytest.mark.parametrize(
    "dist", ["normal", "uniform", "boundary", "large", "constant_rows", "masked_rows", "partial_inf", "special"]
)
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "strided"])
def test_zero_size_dims_work(gen_op: OpConfig, dist: str, layout: str) -> None:
    for dims in ({"B": 0, "N": 5}, {"B": 3, "N": 0}):
        spec = spec_with(gen_op, 0, distribution=dist, layout=layout, dims=dims)
        inputs = generate_inputs(gen_op, spec)
        assert inputs.logical["x"].shape == (dims["B"], dims["N"]) and inputs.views["x"].size == 0
        assert inputs.views["t"].shape == (dims["B"],)


def test_scalar_inputs_are_zero_dimensional(tmp_path) -> None:
    text = GEN_TOML.replace(
        '[ops.inputs.t]\nshape = ["B"]\ndtype = "int64"\nrange = [0, "N"]\n', "[ops.inputs.t]\nshape = []\n"
    )
    (tmp_path / "gpuemu.toml").write_text(text)
    (tmp_path / "ops.py").write_text(OPS_PY)
    op = load_config(tmp_path).op("gen")
    spec = derive_case(op, 1)
    assert spec.shapes["t"] == ()
    inputs = generate_inputs(op, spec)
    assert inputs.logical["t"].shape == () and inputs.views["t"].shape == ()


def test_bfloat16_cast_rounds_once_to_nearest_even() -> None:
    # 1 + 2**-8 is halfway between bf16 neighbours 1 and 1 + 2**-7; anything above it rounds up
    x = np.array([1 + 2.0**-8 + 2.0**-30, -(1 + 2.0**-8 + 2.0**-30)])
    got = _cast(x, "bfloat16").astype(np.float64)
    assert got.tolist() == [1 + 2.0**-7, -(1 + 2.0**-7)]
