// A per-thread array written and read at data-dependent indices lives in local memory (LDL/STL).
__global__ void local_array(const float* __restrict__ in, const int* __restrict__ idx,
                            float* __restrict__ out) {
  float buf[32];
  for (int j = 0; j < 32; ++j) buf[j] = in[threadIdx.x * 32 + j];
  for (int j = 0; j < 32; ++j) buf[idx[j] & 31] += 1.0f;
  out[threadIdx.x] = buf[idx[threadIdx.x] & 31];
}
