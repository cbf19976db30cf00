"""Family 11 - casts float32 -> bfloat16 and float32 -> float16, rounded to nearest even with
integer bit manipulation, the way CUDA device code and PyTorch's c10 helpers do it.

The input is float32 (fixed in gpuemu.toml); the output is bfloat16 or float16 bits, viewed as
that dtype. An elementwise kernel over the flattened tensor (logical order, so strides are
honoured), all lanes at once (a cast has no tiles worth modelling).

cast_bf16  c10::round_to_nearest_even: bits = float_as_uint(x);
           NaN -> 0x7FC0 (the guard); else (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16.
           Overflow rounds to +-inf and subnormals round like any other value, both by the
           carry of the addition.
cast_fp16  __float2half_rn (cuda_fp16.hpp, host path): NaN -> 0x7FFF; |x| above
           0x477FEFFF (65519.996...) -> +-inf; below 2^-25 -> +-0; otherwise rebias the
           exponent (or shift a subnormal's mantissa, with its implicit bit, right by
           0x7E - exponent) and round the discarded bits to nearest, ties to even.

Buggy twins (one line each):

cast_bf16_bug_round_half_up   (bits + 0x8000) >> 16: ties round away from zero instead of to
                              even. Shows only when an input's low 16 bits are exactly 0x8000 and
                              bit 16 is 0 (an exact tie with an even result): the `ties` values,
                              or about 1 element in 2^17 of random float32 values, so large
                              tensors (the default 64 x 4096 holds ~2 on average); never a value
                              with fewer than 17 significant bits.
cast_fp16_bug_round_half_up   `remainder >= half` instead of the tie-to-even test: the same for
                              float16 (low 13 bits exactly 0x1000 with an even result, about 1 in
                              2^14 of random values: every large case has some).
cast_bf16_bug_no_nan_guard    the NaN test is missing: a NaN is rounded like a number. The quiet
                              NaN 0x7FC00000 survives that (0x7FC0), so it shows only for a NaN
                              whose payload sits in the low 16 bits: 0x7F800001..0x7F807FFF become
                              +inf (0xFF800001.. -inf), and payloads of all ones (0x7FFFFFFF, the
                              canonical CUDA NaN) carry into a signed zero. Only the `nan_payloads`
                              values hold such NaNs.
cast_fp16_bug_no_nan_guard    the NaN test is missing: a NaN (exponent 255, mantissa != 0) is
                              taken by the overflow branch and becomes +-inf, whatever its payload.
                              Shows only if an input is NaN (`special`, `nan_payloads`).

Every twin keeps the exact contract: `[ops.tolerances] bfloat16 = { ulp = 0 }` (or float16) in
gpuemu.toml - a cast is correct only if it equals the correctly rounded value.

Reference: `bf16_reference`, `fp16_reference` below: ml_dtypes' and numpy's own round-to-nearest-even
conversions, the values returned in float64 (so each is exactly representable in the output dtype).
"""

import ml_dtypes
import numpy as np


def _bits(x):
    return np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)  # logical order


def _cast_bf16_kernel(x, half_to_even=True, nan_guard=True):
    bits = _bits(x)
    with np.errstate(all="ignore"):
        if half_to_even:
            out = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
        else:
            out = (bits + np.uint32(0x8000)) >> np.uint32(16)  # BUG: ties away from zero
        if nan_guard:  # BUG (nan_guard=False): a NaN is rounded like a number
            out = np.where((bits & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000), np.uint32(0x7FC0), out)
    return out.astype(np.uint16).view(ml_dtypes.bfloat16).reshape(x.shape)


def _cast_fp16_kernel(x, half_to_even=True, nan_guard=True):
    bits = _bits(x)
    u32 = np.uint32
    u = bits & u32(0x7FFFFFFF)
    sign = (bits >> u32(16)) & u32(0x8000)
    exponent = (u >> u32(23)) & u32(0xFF)
    mantissa = u & u32(0x7FFFFF)
    normal = exponent > u32(0x70)
    # a subnormal result: shift the mantissa with its implicit bit right by 0x7E - exponent (14..24)
    shift = np.where(normal, u32(13), (u32(0x7E) - np.minimum(exponent, u32(0x70))).astype(np.uint32))
    shift = np.minimum(shift, u32(31))
    exp_out = np.where(normal, exponent - u32(0x70), u32(0))
    mant = np.where(normal, mantissa, mantissa | u32(0x800000))
    lsb = u32(1) << shift
    lsb_s1 = lsb >> u32(1)
    remainder = mant & (lsb - u32(1))
    mant = mant >> shift
    if half_to_even:
        round_up = (remainder > lsb_s1) | ((remainder == lsb_s1) & ((mant & u32(1)) == u32(1)))
    else:
        round_up = remainder >= lsb_s1  # BUG: ties away from zero
    mant = mant + round_up.astype(np.uint32)
    carry = round_up & ((mant & u32(0x3FF)) == u32(0))
    exp_out = exp_out + carry.astype(np.uint32)
    mant = np.where(carry, u32(0), mant) & u32(0x3FF)
    h = sign | (exp_out << u32(10)) | mant
    h = np.where(u < u32(0x33000001), sign, h)  # +-0 (and what rounds to it)
    h = np.where(u > u32(0x477FEFFF), sign | u32(0x7C00), h)  # +-inf (and what rounds to it)
    if nan_guard:  # BUG (nan_guard=False): NaN falls into the overflow branch above
        h = np.where(u > u32(0x7F800000), u32(0x7FFF), h)
    return h.astype(np.uint16).view(np.float16).reshape(x.shape)


def cast_bf16(x):
    return _cast_bf16_kernel(x, half_to_even=True)


def cast_bf16_bug_round_half_up(x):
    return _cast_bf16_kernel(x, half_to_even=False)


def cast_bf16_bug_no_nan_guard(x):
    return _cast_bf16_kernel(x, nan_guard=False)


def cast_fp16(x):
    return _cast_fp16_kernel(x)


def cast_fp16_bug_round_half_up(x):
    return _cast_fp16_kernel(x, half_to_even=False)


def cast_fp16_bug_no_nan_guard(x):
    return _cast_fp16_kernel(x, nan_guard=False)


def bf16_reference(x):
    return x.astype(ml_dtypes.bfloat16).astype(np.float64)


def fp16_reference(x):
    with np.errstate(all="ignore"):
        return x.astype(np.float16).astype(np.float64)
