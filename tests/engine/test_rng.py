"""Deterministic random streams: golden vectors pin the exact bits every machine must produce."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest

from gpuemu_ls.engine.cases.rng import Stream, det_log, inv_normal_cdf, stream_key

# (key parts, 128-bit stream key, first 4 Philox words, next 3 uniforms as float.hex, next 4 normals, next 6 integers in
# [-5, 100), then a permutation of 6): computed once and pasted. A change here breaks every stored replay.
GOLDEN = [
    (
        ("values", "softmax", 0, "x"),
        0x67A5D24F877F5C308637D054C02FE536,
        [0x787E54C1212441BA, 0xA338A498193A525B, 0x7DA2B07F0190CF13, 0xD26096EA2AEDC15A],
        ["0x1.46f05a78ef5b8p-4", "0x1.c2b06ecfb5c37p-1", "0x1.7681aae1ed8bdp-1"],
        [-0.8112783674065039, 1.1143604541119467, -2.071189676459, 1.698990870182612],
        [23, 47, 20, -5, 4, 99],
        [5, 4, 0, 3, 1, 2],
    ),
    (
        ("dims", "matmul", 7),
        0xE659C2070A94150A39D45EDB75F533A7,
        [0xA2AA4F6919767909, 0xE374E0F5181D7353, 0x8733AA04972CF445, 0x67907B8900609388],
        ["0x1.673b671e5de38p-4", "0x1.1f4ac63966293p-1", "0x1.803cd723cdd5bp-1"],
        [-1.10492793622846, -1.5444572036128696, -2.5495712889580773, 0.3391853983432807],
        [-4, 38, 61, 75, 33, 23],
        [1, 3, 5, 2, 4, 0],
    ),
    (
        (0,),
        0xCB8927381E70F61DEB7035C9244C9B66,
        [0xC5C7355A983B753A, 0xF47F2959D23DF9AC, 0x0874751461567117, 0x51E86C4008993B0E],
        ["0x1.bdb269aec8cdcp-3", "0x1.dfee5f79f0d6fp-1", "0x1.19a5c6f620fd0p-5"],
        [-0.0005226010550926865, -1.182394474427252, -0.7511839346556581, -0.241124594575418],
        [29, -3, 58, 53, 61, 49],
        [3, 4, 0, 1, 5, 2],
    ),
]


@pytest.mark.parametrize(("parts", "key", "words", "uniforms", "normals", "ints", "perm"), GOLDEN)
def test_golden_stream(parts, key, words, uniforms, normals, ints, perm) -> None:
    s = Stream(*parts)
    assert s.key == key == stream_key(*parts)
    assert [int(w) for w in s.words(4)] == words
    assert [float(u) for u in s.uniform(3)] == [float.fromhex(h) for h in uniforms]
    assert [float(v) for v in s.normal(4)] == normals  # exact, not approx
    assert s.integers(-5, 100, 6).tolist() == ints
    assert s.permutation(6) == perm


def test_stream_reads_sequentially() -> None:
    a, b = Stream("k", 1), Stream("k", 1)
    first = np.concatenate([a.words(3), a.words(5)])
    np.testing.assert_array_equal(first, b.words(8))


@pytest.mark.parametrize("pattern", [[1, 1, 5, 1, 20, 3], [16, 1, 17], [2, 40, 1, 1, 1, 1, 4096, 1], [3] * 30])
def test_scalar_draws_read_the_stream_as_array_draws_do(pattern: list[int]) -> None:
    """Scalar draws are served from words read ahead, with Python floats: every draw must be the bits one
    long read gives (a stored replay is (op, seed) planned again, scalar draws included)."""
    mixed, whole = Stream("mix", 3), Stream("mix", 3)
    got: list[float] = []
    for n in pattern:
        got += [mixed.integer(-7, 1000), float(mixed.chance(0.3))] if n == 1 else mixed.uniform(n).tolist()
    want: list[float] = []
    for n in pattern:
        if n == 1:
            u = whole.uniform(2)
            want += [-7 + int(np.floor(u[0] * 1007)), float(u[1] < 0.3)]
        else:
            want += whole.uniform(n).tolist()
    assert got == want and mixed.pos == whole.pos
    np.testing.assert_array_equal(mixed.words(9), whole.words(9))


@pytest.mark.parametrize("span", [1, 2, 3, 1007, (1 << 40) + 3, (1 << 53) - 1])
def test_one_integer_is_the_first_of_integers(span: int) -> None:
    a, b = Stream("int", span), Stream("int", span)
    assert [a.integer(5, 5 + span) for _ in range(50)] == b.integers(5, 5 + span, 50).tolist()


def test_streams_in_threads_do_not_disturb_each_other() -> None:
    """Streams share one generator per thread: streams read side by side in threads still read their own."""
    from concurrent.futures import ThreadPoolExecutor

    def draws(k: int) -> list[int]:
        s = Stream("thread", k)
        return [s.integer(0, 1 << 30) for _ in range(2000)]

    alone = [draws(k) for k in range(4)]
    with ThreadPoolExecutor(4) as pool:
        assert list(pool.map(draws, range(4))) == alone


def test_uniforms_are_in_the_open_interval_and_exact_below_one_half() -> None:
    u = Stream("uniform-range").uniform(100_000)
    assert u.min() > 0.0 and u.max() < 1.0
    # ((w >> 12) + 0.5) * 2**-52 = (2k + 1) * 2**-53 with k < 2**52: times 2**53 they are odd integers
    scaled = u * 2.0**53
    assert np.all(scaled == np.floor(scaled)) and np.all(scaled % 2 == 1)


class _TopWord(Stream):
    """The stream as it is when a word's top 52 bits are all ones (probability 2**-52 per draw)."""

    def words(self, n: int) -> np.ndarray:
        return np.full(n, np.uint64((1 << 64) - 1))


def test_uniform_of_the_largest_word_stays_below_one() -> None:
    s = _TopWord("top")
    assert s.uniform(1)[0] < 1.0
    assert s.normal(1)[0] > 8.0  # the upper tail, not the 2.52 that p == 1.0 produces


def test_different_keys_give_different_streams() -> None:
    keys = [
        ("values", "softmax", 0, "x"),
        ("values", "softmax", 1, "x"),
        ("values", "softmax", 0, "y"),
        ("values", "softmx", 0, "x"),
        (0,),
        ("0",),
        (0.0,),
    ]
    streams = {tuple(int(w) for w in Stream(*k).words(4)) for k in keys}
    assert len(streams) == len(keys)  # the type of a part matters too: 0, "0" and 0.0 differ


def test_det_log_matches_math_log_within_2_ulp() -> None:
    x = np.exp(np.linspace(-744.0, 709.0, 50_001))
    x = np.concatenate(
        [
            x,
            [
                5e-324,
                2.2250738585072014e-308,
                0.5,
                1.0 - 2.0**-53,
                1.0,
                1.0 + 2.0**-52,
                2.0,
                math.e,
                1e300,
                1.7976931348623157e308,
            ],
        ]
    )
    x = x[x > 0]
    got = det_log(x)
    want = np.array([math.log(v) for v in x])
    tol = 2 * np.spacing(np.abs(want))
    bad = np.abs(got - want) > tol
    assert not bad.any(), list(zip(x[bad][:5], got[bad][:5], want[bad][:5]))
    assert det_log(np.array([1.0]))[0] == 0.0


def test_inv_normal_cdf_matches_statistics_within_4_ulp() -> None:
    p = np.concatenate(
        [
            np.linspace(1e-7, 1 - 1e-7, 40_001),
            [1e-300, 1e-100, 1e-20, 1e-10, 0.075, 0.425, 0.5, 0.575, 0.925, 1 - 1e-10, 2.0**-54],
        ]
    )
    got = inv_normal_cdf(p)
    nd = statistics.NormalDist()
    want = np.array([nd.inv_cdf(v) for v in p])
    tol = 4 * np.spacing(np.abs(want))
    bad = np.abs(got - want) > np.maximum(tol, 1e-300)
    assert not bad.any(), list(zip(p[bad][:5], got[bad][:5], want[bad][:5]))
    assert inv_normal_cdf(np.array([0.5]))[0] == 0.0


def test_normals_have_the_right_moments() -> None:
    z = Stream("moments").normal(200_000)
    assert abs(z.mean()) < 0.01 and abs(z.std() - 1.0) < 0.01
    assert np.all(np.isfinite(z))


def test_integers_stay_in_range_and_reject_empty_ranges() -> None:
    s = Stream("ints")
    v = s.integers(3, 7, 10_000)
    assert v.dtype == np.int64 and set(v.tolist()) == {3, 4, 5, 6}
    with pytest.raises(ValueError, match="empty integer range"):
        s.integers(5, 5, 1)


def test_tabled_normal_matches_as241_within_its_interpolation_error() -> None:
    from gpuemu_ls.engine.cases.rng import tabled_normal

    u = np.concatenate([Stream("tabled").uniform(200_000), [1e-12, 2.0**-14, 0.5, 1 - 2.0**-14, 1 - 1e-12]])
    exact = inv_normal_cdf(u)
    err = np.abs(tabled_normal(u) - exact)
    assert err[np.abs(exact) < 2.5].max() < 1e-5  # the bulk: linear interpolation of a smooth quantile
    assert err.max() < 0.02  # the steep tails near +/-3.5 before AS241 takes over
    outer = (u < 2.0**-14) | (u > 1 - 2.0**-14)
    assert np.array_equal(tabled_normal(u)[outer], exact[outer])  # outer cells are AS241 itself
