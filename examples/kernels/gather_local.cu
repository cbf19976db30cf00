// Breaks its limits: a per-thread array indexed by data lives in local memory (STL/LDL),
// which `max_local_memory_bytes = 0` and the forbidden `LDL` catch.
__global__ void gather_local(const float* __restrict__ in, const int* __restrict__ idx,
                             float* __restrict__ out) {
  float buf[32];
  for (int j = 0; j < 32; ++j) buf[j] = in[threadIdx.x * 32 + j];
  for (int j = 0; j < 32; ++j) buf[idx[j] & 31] += 1.0f;
  out[threadIdx.x] = buf[idx[threadIdx.x] & 31];
}
