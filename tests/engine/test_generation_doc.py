"""docs/generation.md is the generator's contract: its formulas, implemented here from the page alone in plain
Python (no numpy), with the constants parsed from the page, must give the bits rng.py gives."""

from __future__ import annotations

import hashlib
import math
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from kit.ops import identity_py, op_toml
from kit.workspace import load_op

from gpuemu_ls.engine.cases import plan
from gpuemu_ls.engine.cases.generate import generate_inputs
from gpuemu_ls.engine.cases.rng import Stream, inv_normal_cdf, stream_key, tabled_normal

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

DOC = Path(__file__).resolve().parents[2] / "docs" / "generation.md"
MASK = (1 << 64) - 1


def doc_blocks() -> list[dict[str, Any]]:
    """Every ```toml block of docs/generation.md, parsed."""
    text = DOC.read_text(encoding="utf-8")
    return [tomllib.loads(b) for b in re.findall(r"^```toml\n(.*?)^```", text, flags=re.S | re.M)]


def doc_table(name: str) -> Any:
    found = [b[name] for b in doc_blocks() if name in b]
    assert len(found) == 1, f"docs/generation.md must have exactly one [{name}] in its toml blocks, found {len(found)}"
    return found[0]


C = {name: doc_table(name) for name in ("stream_key", "philox", "uniform", "normal", "log", "windows")}


class DocStream:
    """The stream of docs/generation.md, sections 1 to 4, one word at a time."""

    def __init__(self, *parts: object) -> None:
        sk = C["stream_key"]
        text = sk["separator"].join(f"{type(p).__name__}:{p}" for p in parts)
        digest = hashlib.new(sk["hash"], text.encode("utf-8")).digest()
        self.key = int.from_bytes(digest[: sk["key_bytes"]], sk["byteorder"])
        self.block = C["philox"]["first_block_counter"]
        self.buffer: list[int] = []

    def _philox(self, counter: int) -> list[int]:
        ph = C["philox"]
        (m0, m1), (w0, w1) = ph["multipliers"], ph["weyl"]
        c = [(counter >> (64 * i)) & MASK for i in range(4)]
        k0, k1 = self.key & MASK, self.key >> 64
        for rnd in range(ph["rounds"]):
            if rnd:
                k0, k1 = (k0 + w0) & MASK, (k1 + w1) & MASK
            p0, p1 = m0 * c[0], m1 * c[2]
            c = [(p1 >> 64) ^ c[1] ^ k0, p1 & MASK, (p0 >> 64) ^ c[3] ^ k1, p0 & MASK]
        return c

    def word(self) -> int:
        if not self.buffer:
            self.buffer = self._philox(self.block)
            self.block += 1
        return self.buffer.pop(0)

    def uniform(self) -> float:
        u = C["uniform"]
        return ((self.word() >> u["shift"]) + u["offset"]) * 2.0 ** u["scale_exponent"]

    def integer(self, lo: int, hi: int) -> int:
        return lo + math.floor(self.uniform() * (hi - lo))

    def permutation(self, n: int) -> list[int]:
        items = list(range(n))
        for i in range(n - 1, 0, -1):
            j = self.integer(0, i + 1)
            items[i], items[j] = items[j], items[i]
        return items

    def normal(self) -> float:
        return doc_quantile(self.uniform())


def doc_log(x: float) -> float:
    lg = C["log"]
    m, e = math.frexp(x)
    if m < lg["sqrt_half"]:
        m, e = m * 2.0, e - 1
    s = (m - 1.0) / (m + 1.0)
    s2 = s * s
    poly = 1.0 / lg["series_top"]
    for k in range(lg["series_top"] - 2, 0, -2):
        poly = poly * s2 + 1.0 / k
    fe = float(e)
    return (fe * lg["ln2_hi"]) + (((2.0 * s) * poly) + (fe * lg["ln2_lo"]))


def horner(coef: list[float], r: float) -> float:
    acc = coef[7]
    for j in range(6, -1, -1):
        acc = acc * r + coef[j]
    return acc


def doc_as241(p: float) -> float:
    nm = C["normal"]
    q = p - 0.5
    if abs(q) <= nm["central"]:
        r = nm["central_r"] - q * q
        return (q * horner(nm["a"], r)) / horner(nm["b"], r)
    r = math.sqrt(-doc_log(p if q < 0 else 1.0 - p))
    if r <= nm["tail_split"]:
        t = r - nm["tail_shift_near"]
        z = horner(nm["c"], t) / horner(nm["d"], t)
    else:
        t = r - nm["tail_shift_far"]
        z = horner(nm["e"], t) / horner(nm["f"], t)
    return -z if q < 0 else z


_TABLE: tuple[list[float], list[float]] | None = None


def doc_table_and_slopes() -> tuple[list[float], list[float]]:
    global _TABLE
    if _TABLE is None:
        n = 1 << C["normal"]["table_bits"]
        t = [0.0] + [doc_as241(k / n) for k in range(1, n)] + [0.0]
        _TABLE = (t, [t[k + 1] - t[k] for k in range(n)] + [0.0])
    return _TABLE


def doc_quantile(u: float) -> float:
    n = 1 << C["normal"]["table_bits"]
    if u < 1.0 / n or u >= 1.0 - 1.0 / n:
        return doc_as241(u)
    t, s = doc_table_and_slopes()
    x = u * n
    i = math.floor(x)
    f = x - i
    return (f * s[i]) + t[i]


# --- the page's golden vectors: its formulas and rng.py both give them -------------------------------------

GOLDEN = doc_table("golden")


@pytest.mark.parametrize("g", GOLDEN, ids=[":".join(map(str, g["parts"])) for g in GOLDEN])
def test_the_documented_formulas_and_rng_py_give_the_golden_vectors(g: dict[str, Any]) -> None:
    parts = tuple(g["parts"])
    key = int(g["key"], 16)
    words = [int(w, 16) for w in g["words"]]
    uniforms = [float.fromhex(h) for h in g["uniforms"]]
    mine, code = DocStream(*parts), Stream(*parts)
    assert mine.key == key == stream_key(*parts) == code.key
    assert [mine.word() for _ in words] == words == [int(w) for w in code.words(len(words))]
    assert [mine.uniform() for _ in uniforms] == uniforms == code.uniform(len(uniforms)).tolist()
    assert [mine.normal() for _ in g["normals"]] == g["normals"] == code.normal(len(g["normals"])).tolist()
    assert [mine.integer(0, 1000) for _ in g["integers"]] == g["integers"] == code.integers(0, 1000, 3).tolist()
    n = len(g["permutation"])
    assert mine.permutation(n) == g["permutation"] == code.permutation(n)


def test_the_documented_quantiles_cover_table_and_outer_cells() -> None:
    q = doc_table("quantiles")
    u = [float.fromhex(h) for h in q["u"]]
    assert [doc_quantile(x) for x in u] == q["z"] == tabled_normal(np.array(u)).tolist()


# --- the page's formulas against rng.py on long streams and on every region of AS241 -------------------------


@pytest.mark.parametrize("parts", [("values", "op", 12, "x"), ("dims", "a b", 2**40), ("window", "op", "layout", 0)])
def test_long_streams_agree_draw_by_draw(parts: tuple[object, ...]) -> None:
    mine, code = DocStream(*parts), Stream(*parts)
    assert [mine.word() for _ in range(401)] == [int(w) for w in code.words(401)]  # crosses 100 blocks
    assert [mine.uniform() for _ in range(500)] == code.uniform(500).tolist()
    assert [mine.normal() for _ in range(3000)] == code.normal(3000).tolist()
    assert [mine.integer(-7, 3) for _ in range(200)] == code.integers(-7, 3, 200).tolist()
    assert mine.permutation(40) == code.permutation(40)


def test_as241_and_log_agree_in_every_region() -> None:
    n = 1 << C["normal"]["table_bits"]
    edges = [1e-300, 5e-324, 1e-30, 1e-12, 1 / n, 1 - 1 / n, 0.075, 0.925, 0.5 - 0.425, 0.5 + 0.425]
    p = [*(k / 997 for k in range(1, 997)), *edges, math.nextafter(0.075, 1.0), 1.0 - 2.0**-53]
    z = [doc_as241(x) for x in p]
    assert any(abs(v) > 5.0 for v in z) and any(abs(v) < 1.0 for v in z)  # far tail and centre both reached
    assert z == inv_normal_cdf(np.array(p)).tolist()
    u = [((k * 0x9E3779B97F4A7C15 & MASK) >> 12) * 2.0**-52 + 2.0**-53 for k in range(1, 20_000)]
    assert [doc_quantile(x) for x in u] == tabled_normal(np.array(u)).tolist()


def test_the_documented_constants_are_the_codes() -> None:
    from gpuemu_ls.engine.cases import rng

    nm, lg = C["normal"], C["log"]
    assert [list(nm[k]) for k in "abcdef"] == [list(t) for t in (rng._A, rng._B, rng._C, rng._D, rng._E, rng._F)]
    assert (lg["ln2_hi"], lg["ln2_lo"], lg["sqrt_half"]) == (rng._LN2_HI, rng._LN2_LO, rng._SQRT_HALF)
    assert nm["table_bits"] == rng._TABLE_BITS
    assert tuple(C["windows"]["strategy"]) == plan.STRATEGY_WINDOW


# --- section 5: which streams a case reads -----------------------------------------------------------------

CASE_TOML = op_toml(
    "gen",
    module="ops:op",
    reference="ops:ref",
    dtypes=["float64", "float32", "float16"],
    layouts=["contiguous", "transposed"],
    distributions=["normal", "uniform", "large"],
    inputs={"x": ["B", "N"], "idx": {"shape": ["B"], "dtype": "int64", "range": [0, "N"]}},
    dims={"B": (1, 8, 3), "N": (1, 64, 16)},
)


def _window_pick(op: str, axis: str, seed: int, options: list[str]) -> str:
    n = len(options)
    return options[DocStream("window", op, axis, seed // n).permutation(n)[seed % n]]


def test_a_case_is_the_documented_window_picks_and_streams(tmp_path: Path) -> None:
    op = load_op(tmp_path, CASE_TOML, "gen", {"ops.py": identity_py("x", "idx")})
    normal_float64 = 0
    for seed in range(48):
        spec = plan.derive_case(op, seed)
        assert spec.strategy == _window_pick("gen", "strategy", seed, C["windows"]["strategy"])
        assert spec.dtype == _window_pick("gen", "dtype", seed, list(op.dtypes))
        assert spec.layout == _window_pick("gen", "layout", seed, list(op.layouts))
        assert spec.distribution == _window_pick("gen", "distribution", seed, list(op.distributions))
        logical = generate_inputs(op, spec).logical
        lo, hi = 0, spec.dims["N"]
        ints = DocStream("values", "gen", seed, "idx")
        assert logical["idx"].tolist() == [ints.integer(lo, hi) for _ in range(spec.dims["B"])]
        if spec.dtype == "float64" and spec.distribution == "normal":  # no rounding, no transform: Q(u) itself
            values = DocStream("values", "gen", seed, "x")
            assert logical["x"].ravel().tolist() == [values.normal() for _ in range(logical["x"].size)]
            normal_float64 += 1
    assert normal_float64 >= 2  # the exact-value check ran
