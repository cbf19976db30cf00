// Shared-memory size comes from the header: editing it must invalidate the lint cache.
#include "with_header.cuh"

__global__ void header_tile(const float* __restrict__ in, float* __restrict__ out) {
  __shared__ float tile[TILE * TILE];
  tile[threadIdx.x] = in[threadIdx.x];
  __syncthreads();
  out[threadIdx.x] = tile[(threadIdx.x + 1) % (TILE * TILE)];
}
