// Included by bad_header.cu: a missing ";" that nvcc reports at line 4 (the next token).
__device__ inline float twice(float v) {
  return 2.0f * v
}
