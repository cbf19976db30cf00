"""Input generation: golden bytes, real memory layouts, and each value distribution's promise."""

from __future__ import annotations

import dataclasses
import hashlib

import ml_dtypes
import numpy as np
import pytest
from kit.cases import spec_with
from kit.ops import identity_py, op_toml, project_toml
from kit.workspace import load_op

from gpuemu_ls.engine import dtypes as dt
from gpuemu_ls.engine.cases.generate import _cast, generate_inputs, make_layout, with_layout
from gpuemu_ls.engine.cases.plan import derive_case
from gpuemu_ls.engine.config.keys import DISTRIBUTIONS
from gpuemu_ls.engine.config.model import OpConfig

#: t: an int64 input ranged by N
T_INT = {"shape": ["B"], "dtype": "int64", "range": [0, "N"]}


def gen_toml(inputs: dict[str, object] | None = None, **dims: object) -> str:
    """Op gen: x (B x N) and ``inputs`` (default: t, ints in [0, N)), dims B, N and ``dims``."""
    return project_toml(validation={"dtypes": ["float32", "float16", "bfloat16"]}) + op_toml(
        "gen",
        module="ops:op",
        reference="ops:ref",
        inputs={"x": ["B", "N"], **(inputs or {"t": T_INT})},
        dims={"B": (1, 16, 4), "N": (1, 64, 16), **dims},
    )


OPS_PY = identity_py("x", "t")

# sha256 of the logical bytes of x and t for (gen, seed), computed once and pasted; seeds 0..17 are one
# window of the distribution axis, so every distribution has a golden case.
GOLDEN = [
    (
        0,
        "bfloat16",
        "large",
        (16, 15),
        "6b26886696a21d6a84960684364f08a7d7a8aaa8a7dc8d2a0de944996bc14c4c",
        "ba80cd2a381bd703facfe18b9f35a6a656688f7556c50d0b503d8517a3dd7f51",
    ),
    (
        1,
        "float32",
        "integers",
        (2, 2),
        "a9fa96fe3b9c73adcece90dbc4d6e4740ee253dd6547c73a12d4a688af0a67fa",
        "9d34149fbd1fe777eb238799054c8cbfbce372255f219f8740838def9bfd02db",
    ),
    (
        2,
        "float16",
        "partial_inf",
        (4, 16),
        "9ba3b24f0bed9091447b2204b75f498d41999b3e9acb8b0c118d0c3f8c8885d9",
        "dae0342d1f12c9c4428dfec7cb9a112245c9ffc3e9207147205f085b93794366",
    ),
    (
        3,
        "float32",
        "normal",
        (4, 16),
        "58168c31f009a1d0305da8cfa104c5368e51936251d14b1775af70d706b6bfb4",
        "72a4463b397b80962d1dee610d72bce4334c17337ee573f561fc449981e301df",
    ),
    (
        4,
        "float16",
        "uniform",
        (16, 8),
        "0e5ef02b01e1f7f50ca2d172c9f18a1bd9ade4fb65e960109bd6d83ef8c390b5",
        "983add48ff63a5d7d576d807dc2a17b41ccdc197791a94e9d8ba76021f5fc808",
    ),
    (
        5,
        "bfloat16",
        "special",
        (13, 28),
        "08195c444740db849eafa870580d67887818753e8233547effd146ded765cfed",
        "381f3e1ca0eebf2065b692f56bfdf73dee98c8f62bfb59fe1ac6a7e91e1caf33",
    ),
    (
        6,
        "bfloat16",
        "wide",
        (16, 62),
        "90d389483a3e7c256c2028480e329d00c202d60dcafe2ca0474ecc365071294e",
        "7abff26361e7473cfb0e863624b9cdd04750c3cf0b442caffa7f309f0f68e58a",
    ),
    (
        7,
        "float16",
        "constant_rows",
        (16, 8),
        "f8e74330e79a7b2b745011f5c0f05c7456c92322555064662e8e58149448b45a",
        "d73f2616e20e2293f79366383c803ac023d8d1db1cad23fe6c95d855922b2a7e",
    ),
    (
        8,
        "float32",
        "masked_rows",
        (1, 16),
        "ddc74b1faaf6edb44e8faa228fd0e4b183b6d0a42094d618b65df791ee6d1d2e",
        "aae89fc0f03e2959ae4d701a80cc3915918c950b159f6abb6c92c1433b1a8534",
    ),
    (
        9,
        "bfloat16",
        "boundary",
        (1, 2),
        "884bc1bb4cd8f528e590db98fced02a4b893366b858cfa64f0a6d3e0f5c0b2c5",
        "7c9fa136d4413fa6173637e883b6998d32e1d675f88cddff9dcbcf331820f4b8",
    ),
    (
        10,
        "float32",
        "positive",
        (9, 16),
        "3f527184365ed462789676242c795d7ecd62d7f8353e6fdb9a87d1b1805a6356",
        "9445da078342dfb0a02d2ee41492dc556e07d26b7835a10a4874064f056ab4ae",
    ),
    (
        11,
        "float16",
        "mixed_magnitude",
        (4, 16),
        "a6a98d64251e8243e6942f60716e655137ac2b181b64efcde30dc969b89343ef",
        "2521a2c4f91f67f11d601f2431138164f2610ce7d8b4df1fb2e9fdf2e0780ca4",
    ),
    (
        12,
        "float32",
        "ties",
        (9, 1),
        "239165000c8b4944137a5b145fb361bbf24a0430bb8827b77d6f3bb44ad2d4ba",
        "834a709ba2534ebe3ee1397fd4f7bd288b2acc1d20a08d6c862dcd99b6f04400",
    ),
    (
        13,
        "float16",
        "subnormal",
        (4, 16),
        "90a7cc229e57a33d71a059500d02401cc22c752519fd23d68cf224449de1ec61",
        "4b54d00347b7534db651f32ade7de7b9127f0ce94caa64f4ca399993e9330cad",
    ),
    (
        14,
        "bfloat16",
        "underflow_rows",
        (2, 8),
        "d09344ccebf61234900f1b7ecfaecaa7b496cb736c5a89910e99b9de98ea8291",
        "f472bd81055e1b17c495e5931e02edf1059f9edf450d850abe31a699ffac7807",
    ),
    (
        15,
        "float32",
        "nan_payloads",
        (2, 9),
        "0d69da1fe68155bb8f27a8bbeb67b2f239a8c10d3d4fe33fc32785f4cd7cb771",
        "9b768a7138e147b4158a6b26c2e04ee536af084a18f7b751a9439af1a7cc0765",
    ),
    (
        16,
        "bfloat16",
        "small",
        (4, 1),
        "033a203f24c501de6226fc3e6a48e229321198b402ba007f61b8d1302b50238a",
        "66687aadf862bd776c8fc18b8e9f8e20089714856ee233b3902a591d0d5f2925",
    ),
    (
        17,
        "float16",
        "tail_max",
        (15, 32),
        "87e83dbfb6997e1d0dc9a73267f1170a3652edd919ad1eebb6a00d8ecf252983",
        "172b1119756349bdc45984e795aaeefce85ac9fb34fb1fb692b1a5f0e63c4cf2",
    ),
]


@pytest.fixture(scope="module")
def gen_op(tmp_path_factory: pytest.TempPathFactory) -> OpConfig:
    root = tmp_path_factory.mktemp("gen")
    return load_op(root, gen_toml(), "gen", {"ops.py": OPS_PY}, user_config=root / "none.toml")


def sha(a: np.ndarray) -> str:
    return hashlib.sha256(a.tobytes()).hexdigest()


@pytest.mark.parametrize(("seed", "dtype", "dist", "shape", "x_sha", "t_sha"), GOLDEN)
def test_golden_input_bytes(gen_op: OpConfig, seed, dtype, dist, shape, x_sha, t_sha) -> None:
    spec = derive_case(gen_op, seed, plan=1)  # the golden bytes were drawn under plan 1
    assert (spec.dtype, spec.distribution, spec.shapes["x"]) == (dtype, dist, shape)
    inputs = generate_inputs(gen_op, spec)
    x, t = inputs.logical["x"], inputs.logical["t"]
    assert x.dtype == dt.numpy_dtype(dtype) and x.flags.c_contiguous and x.shape == shape
    assert t.dtype == np.int64 and t.shape == shape[:1]
    assert sha(x) == x_sha
    assert sha(t) == t_sha
    # generation is a pure function of (op, seed)
    again = generate_inputs(gen_op, derive_case(gen_op, seed, plan=1))
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
    op = load_op(tmp_path, gen_toml({"w": ["N", "D"]}, D=[3, 5]), "gen", {"ops.py": identity_py("x", "w")})
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
    op = load_op(tmp_path, gen_toml({"t": {"shape": ["B"], "range": [2.0, 3.0]}}), "gen", {"ops.py": OPS_PY})
    inside: set[str] = set()
    for seed in range(len(DISTRIBUTIONS)):  # one window: every distribution once
        spec = derive_case(op, seed)
        assert spec.input_distributions["t"] == spec.distribution  # a float range bounds, it does not replace
        t = np.asarray(generate_inputs(op, spec).logical["t"], dtype=np.float64)
        v = t[~np.isnan(t)]  # NaN stays NaN (special, nan_payloads)
        assert np.all((v >= 2.0) & (v <= 3.0)), (spec.distribution, t)
        assert generate_inputs(op, spec).logical["t"].dtype == dt.numpy_dtype(spec.dtype)
        if np.any((v > 2.0) & (v < 3.0)):
            inside.add(spec.distribution)
    assert "large" in inside  # large approaches the bound from inside the range


@pytest.mark.parametrize("dist", DISTRIBUTIONS)
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "strided"])
def test_zero_size_dims_work(gen_op: OpConfig, dist: str, layout: str) -> None:
    for dims in ({"B": 0, "N": 5}, {"B": 3, "N": 0}):
        spec = spec_with(gen_op, 0, distribution=dist, layout=layout, dims=dims)
        inputs = generate_inputs(gen_op, spec)
        assert inputs.logical["x"].shape == (dims["B"], dims["N"]) and inputs.views["x"].size == 0
        assert inputs.views["t"].shape == (dims["B"],)


def test_scalar_inputs_are_zero_dimensional(tmp_path) -> None:
    op = load_op(tmp_path, gen_toml({"t": {"shape": []}}), "gen", {"ops.py": OPS_PY})
    spec = derive_case(op, 1)
    assert spec.shapes["t"] == ()
    inputs = generate_inputs(op, spec)
    assert inputs.logical["t"].shape == () and inputs.views["t"].shape == ()


def test_bfloat16_cast_rounds_once_to_nearest_even() -> None:
    # 1 + 2**-8 is halfway between bf16 neighbours 1 and 1 + 2**-7; anything above it rounds up
    x = np.array([1 + 2.0**-8 + 2.0**-30, -(1 + 2.0**-8 + 2.0**-30)])
    got = _cast(x, "bfloat16").astype(np.float64)
    assert got.tolist() == [1 + 2.0**-7, -(1 + 2.0**-7)]


# --- the distributions' promises -------------------------------------------------------------


def gen(op: OpConfig, seed: int = 0, **changes: object) -> np.ndarray:
    """The logical x of spec_with(op, seed, **changes), as float64."""
    return np.asarray(generate_inputs(op, spec_with(op, seed, **changes)).logical["x"], dtype=np.float64)


def test_every_configurable_distribution_has_a_generator() -> None:
    from gpuemu_ls.engine.cases.generate import _DISTRIBUTIONS

    assert tuple(_DISTRIBUTIONS) == DISTRIBUTIONS


@pytest.mark.parametrize("dist", DISTRIBUTIONS)
def test_every_distribution_replays_bit_for_bit(gen_op: OpConfig, dist: str) -> None:
    for dtype in ("float32", "float16", "bfloat16", "float64"):
        spec = spec_with(gen_op, 5, dtype=dtype, distribution=dist, layout="strided", dims={"B": 7, "N": 19})
        a, b = generate_inputs(gen_op, spec), generate_inputs(gen_op, spec)
        assert a.logical["x"].dtype == dt.numpy_dtype(dtype)
        assert a.logical["x"].tobytes() == b.logical["x"].tobytes(), (dist, dtype)
        assert np.ascontiguousarray(a.views["x"]).tobytes() == a.logical["x"].tobytes()  # bits survive the layout


def test_small_wide_and_integers(gen_op: OpConfig) -> None:
    dims = {"B": 16, "N": 64}
    assert 0.5e-3 < gen(gen_op, 1, distribution="small", dims=dims).std() < 2e-3
    assert 5 < gen(gen_op, 1, distribution="wide", dims=dims).std() < 20
    for dtype in ("float32", "float16", "bfloat16"):
        x = gen(gen_op, 2, dtype=dtype, distribution="integers", dims=dims)
        assert np.all(x == np.round(x)) and x.min() == -8 and x.max() == 8


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_positive_rows_are_same_sign_and_some_grow(gen_op: OpConfig, dtype: str) -> None:
    x = gen(gen_op, 3, dtype=dtype, distribution="positive", dims={"B": 16, "N": 64})
    assert np.all(x >= 0)
    big_rows = np.all(rows(x) >= 1.0, axis=1)
    assert big_rows.any() and not big_rows.all() and x.max() >= 64 and x.max() < 2**12


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_mixed_magnitude_spans_many_decades(gen_op: OpConfig, dtype: str) -> None:
    x = gen(gen_op, 4, dtype=dtype, distribution="mixed_magnitude", dims={"B": 16, "N": 64})
    mag = np.abs(x[x != 0])
    assert np.all(np.isfinite(x)) and mag.max() <= dt.FLOAT_INFO[dtype].max_value
    assert np.log2(mag.max() / mag.min()) > 30 and (x < 0).any() and (x > 0).any()


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
def test_subnormal_values_are_subnormal(gen_op: OpConfig, dtype: str) -> None:
    info = dt.FLOAT_INFO[dtype]
    x = gen(gen_op, 5, dtype=dtype, distribution="subnormal", dims={"B": 16, "N": 64})
    assert np.all(np.abs(x) < info.tiny) and (x == 0).any()
    assert (x > 0).any() and (x < 0).any() and (np.abs(x) < info.tiny / 4).any()


def _out_neighbours(x: np.ndarray, out: str) -> tuple[np.ndarray, np.ndarray]:
    """The output-format values just below and above |x| (x not representable in ``out``)."""
    mag = np.abs(x)
    r = dt.round_to(mag, out)
    bits = r.view(np.uint16 if r.itemsize == 2 else np.uint32 if r.itemsize == 4 else np.uint64)
    below = r.astype(np.float64) < mag
    lo = np.where(below, bits, bits - 1).astype(bits.dtype).view(r.dtype).astype(np.float64)
    hi = np.where(below, bits + 1, bits).astype(bits.dtype).view(r.dtype).astype(np.float64)
    return lo, hi


@pytest.mark.parametrize(
    ("dtype", "out"),
    [("float32", "float16"), ("float32", "bfloat16"), ("float64", "float32"), ("float16", "bfloat16")],
)
def test_ties_are_exact_midpoints_of_a_narrower_output(gen_op: OpConfig, dtype: str, out: str) -> None:
    op = dataclasses.replace(gen_op, output_dtype=out)
    x = gen(op, 6, dtype=dtype, distribution="ties", dims={"B": 16, "N": 64})
    assert np.all(np.isfinite(x)) and (x < 0).any() and (x > 0).any()
    lo, hi = _out_neighbours(x, out)
    assert np.all(lo < np.abs(x)) and np.all(np.abs(x) < hi)  # not representable in the output...
    assert np.array_equal((lo + hi) / 2, np.abs(x))  # ...and exactly halfway (the rounding to dtype kept it)
    info = dt.FLOAT_INFO[out]
    if out == "float16":  # the output's subnormal range too
        assert (np.abs(x) < info.tiny).any()


@pytest.mark.parametrize(("dtype", "out"), [("float32", "int32"), ("bfloat16", "uint8"), ("float16", "float32")])
def test_ties_for_integer_or_wider_outputs_are_half_integers(gen_op: OpConfig, dtype: str, out: str) -> None:
    op = dataclasses.replace(gen_op, output_dtype=out)
    x = gen(op, 7, dtype=dtype, distribution="ties", dims={"B": 8, "N": 32})
    assert np.all(x - np.floor(x) == 0.5) and np.all(np.abs(x) < 16)
    assert (x < 0).any() == (out != "uint8")
    same = gen(gen_op, 7, dtype="float32", distribution="ties", dims={"B": 8, "N": 32})  # output = case dtype
    assert np.all(same - np.floor(same) == 0.5)


@pytest.mark.parametrize(
    ("dtype", "patterns"),
    [
        ("float32", [0x7FFFFFFF, 0x7FC00001, 0xFFC00001, 0x7F800001, 0xFF800001]),
        ("float16", [0x7FFF, 0x7E01, 0xFE01, 0x7C01, 0xFC01]),
        ("bfloat16", [0x7FFF, 0x7FC1, 0xFFC1, 0x7F81, 0xFF81]),
        ("float64", [0x7FFFFFFFFFFFFFFF, 0x7FF8000000000001, 0xFFF8000000000001, 0x7FF0000000000001]),
    ],
)
def test_nan_payloads_hold_each_bit_pattern(gen_op: OpConfig, dtype: str, patterns: list[int]) -> None:
    for seed, dims in ((0, {"B": 16, "N": 64}), (1, {"B": 1, "N": 5}), (2, {"B": 5, "N": 1})):
        spec = spec_with(gen_op, seed, dtype=dtype, distribution="nan_payloads", layout="strided", dims=dims)
        inputs = generate_inputs(gen_op, spec)
        for arr in (inputs.logical["x"], np.ascontiguousarray(inputs.views["x"])):
            bits = set(arr.view(f"uint{8 * arr.itemsize}").ravel().tolist())
            assert set(patterns) <= bits, (dtype, seed, sorted(hex(b) for b in set(patterns) - bits))
        x = np.asarray(inputs.logical["x"], dtype=np.float64)
        if x.size > 10:
            assert 0 < np.isnan(x).mean() < 0.2 and np.all(np.isfinite(x[~np.isnan(x)]))


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64"])
def test_underflow_rows_have_a_row_below_exps_underflow(gen_op: OpConfig, dtype: str) -> None:
    threshold = -746.0 if dtype == "float64" else -104.0
    for seed in range(6):
        r = rows(gen(gen_op, seed, dtype=dtype, distribution="underflow_rows", dims={"B": 6, "N": 17}))
        under = np.all(r < threshold, axis=1)
        assert under.any(), seed
        assert np.all(np.abs(r[~under]) < 10)  # the other rows are plain normals


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_tail_max_puts_each_rows_max_last(gen_op: OpConfig, dtype: str) -> None:
    for seed, n in ((0, 17), (1, 2), (2, 64)):
        r = rows(gen(gen_op, seed, dtype=dtype, distribution="tail_max", dims={"B": 5, "N": n}))
        assert np.all(r[:, -1] > r[:, :-1].max(axis=1))


def test_partial_inf_has_a_row_with_a_single_finite_value(gen_op: OpConfig) -> None:
    for seed in range(6):
        r = rows(gen(gen_op, seed, distribution="partial_inf", dims={"B": 4, "N": 9}))
        finite = np.isfinite(r).sum(axis=1)
        assert np.all(finite >= 1) and (finite == 1).any(), seed


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_large_never_overflows_a_float32_sum_of_squares(gen_op: OpConfig, dtype: str) -> None:
    for seed, dims in ((0, {"B": 16, "N": 64}), (1, {"B": 16, "N": 4096}), (2, {"B": 1, "N": 1})):
        x = generate_inputs(gen_op, spec_with(gen_op, seed, dtype=dtype, distribution="large", dims=dims))
        x32 = x.logical["x"].astype(np.float32)
        for axis in (0, 1):
            assert np.all(np.isfinite(np.sum(x32 * x32, axis=axis, dtype=np.float32))), (seed, axis)
            assert np.all(np.isfinite(np.sum(x32 * x32[::-1], axis=axis, dtype=np.float32)))  # dot products too
        if x32.size > 1:  # and still large: magnitudes up to 2**top, top = (128 - ceil(log2 n)) // 2 - 1
            top = (128 - (max(dims.values()) - 1).bit_length()) // 2 - 1
            assert 2.0 ** (top - 3) < np.abs(x32).max() <= 2.0**top


def test_large_float16_overflows_a_float16_accumulator_but_not_a_float32_one(gen_op: OpConfig) -> None:
    x = gen(gen_op, 3, dtype="float16", distribution="large", dims={"B": 16, "N": 64})
    assert 2.0**12 <= np.abs(x).max() <= 2.0**14
    squares = (rows(x) ** 2).sum(axis=1)
    assert (squares > dt.FLOAT_INFO["float16"].max_value).all()
    assert np.all(squares < dt.FLOAT_INFO["float32"].max_value)
    same_sign = np.all(rows(x) > 0, axis=1) | np.all(rows(x) < 0, axis=1)
    assert same_sign.any() and not same_sign.all()  # rows are one sign with probability 1/2


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_boundary_has_every_special_value_once_there_is_room(gen_op: OpConfig, dtype: str) -> None:
    info = dt.FLOAT_INFO[dtype]
    near_max = float(_cast(np.array(info.max_value * (1 - info.eps)), dtype))
    wanted = [0.0, 1.0, -1.0, info.tiny, -info.tiny, info.smallest_subnormal, -info.smallest_subnormal]
    for seed in range(8):
        x = gen(gen_op, seed, dtype=dtype, distribution="boundary", dims={"B": 2, "N": 5})  # exactly 10 elements
        assert set(wanted) <= set(x.ravel().tolist()), seed
        assert near_max in x and -near_max in x
        assert np.any((x == 0) & np.signbit(x)) and np.any((x == 0) & ~np.signbit(x))  # -0 and +0


# --- value domains -----------------------------------------------------------------------------


def domain_op(tmp_path, op_keys: dict[str, object] | None = None, x: dict[str, object] | None = None) -> OpConfig:
    """Op dom (x: B x N) with ``op_keys`` in its entry and ``x`` in x's table."""
    text = project_toml(validation={"dtypes": ["float32", "float16", "bfloat16"]}) + op_toml(
        "dom",
        module="ops:op",
        reference="ops:ref",
        **(op_keys or {}),
        inputs={"x": {"shape": ["B", "N"], **(x or {})}},
        dims={"B": (1, 16, 4), "N": (1, 64, 16)},
    )
    return load_op(tmp_path, text, "dom", {"ops.py": identity_py("x")}, user_config=tmp_path / "none.toml")


@pytest.mark.parametrize("dist", DISTRIBUTIONS)
def test_domain_bounds_hold_for_every_distribution(tmp_path, dist: str) -> None:
    op = domain_op(tmp_path, {"scale": 0.5, "offset": 0.25}, {"sign": "positive", "range": [-2, 3]})
    for dtype in ("float32", "float16", "bfloat16"):
        x = gen(op, 1, dtype=dtype, distribution=dist, dims={"B": 8, "N": 33})
        v = x[~np.isnan(x)]
        assert np.all((v >= 0) & (v <= 3)) and not np.any(np.signbit(v)), (dist, dtype)
        if dist not in ("nan_payloads", "special"):
            assert not np.isnan(x).any()
    neg = domain_op(tmp_path, {"sign": "negative"})
    x = gen(neg, 1, distribution=dist, dims={"B": 8, "N": 33})
    assert not np.any(x[~np.isnan(x)] > 0)


def test_scale_and_offset_are_exact_before_the_one_rounding(tmp_path) -> None:
    base = gen(domain_op(tmp_path), 2, dtype="float64", distribution="normal", dims={"B": 4, "N": 8})
    scaled = gen(
        domain_op(tmp_path, {"scale": 3.0, "offset": -1.5}),
        2,
        dtype="float64",
        distribution="normal",
        dims={"B": 4, "N": 8},
    )
    assert np.array_equal(scaled, base * 3.0 - 1.5)
    # the input's own fields win over the op's, field by field
    mixed = domain_op(tmp_path, {"scale": 3.0, "offset": -1.5}, {"scale": 2.0})
    assert np.array_equal(
        gen(mixed, 2, dtype="float64", distribution="normal", dims={"B": 4, "N": 8}), base * 2.0 - 1.5
    )


def test_range_bounds_large_and_boundary_towards_its_ends(tmp_path) -> None:
    op = domain_op(tmp_path, x={"range": [-3.0, 10.0]})
    for dtype in ("float32", "float16", "bfloat16"):
        x = gen(op, 3, dtype=dtype, distribution="large", dims={"B": 16, "N": 64})
        assert np.all((x >= -3) & (x <= 10))
        assert x.max() > 9.5 and x.min() < -2.8  # the largest magnitudes the domain allows, both sides
        assert np.median(np.abs(x)) > 1.0
        b = gen(op, 3, dtype=dtype, distribution="boundary", dims={"B": 2, "N": 7})
        assert np.all((b >= -3) & (b <= 10)) and {-3.0, 10.0, 0.0} <= set(b.ravel().tolist())
    one_sided = domain_op(tmp_path, x={"range": [2.0, 3.0]})
    x = gen(one_sided, 4, distribution="large", dims={"B": 16, "N": 64})
    assert np.all((x >= 2) & (x <= 3)) and x.max() > 2.95


def test_large_without_range_scales_with_the_domain(tmp_path) -> None:
    plain = gen(domain_op(tmp_path), 5, dtype="float64", distribution="large", dims={"B": 4, "N": 8})
    scaled = gen(domain_op(tmp_path, {"scale": 0.25}), 5, dtype="float64", distribution="large", dims={"B": 4, "N": 8})
    assert np.array_equal(scaled, plain * 0.25)


def test_a_domain_never_turns_a_finite_value_into_inf(tmp_path) -> None:
    op = domain_op(tmp_path, {"scale": 1000.0})
    x = gen(op, 6, dtype="float16", distribution="boundary", dims={"B": 4, "N": 16})
    assert np.all(np.isfinite(x)) and np.abs(x).max() == dt.FLOAT_INFO["float16"].max_value
