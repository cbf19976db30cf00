// Many live accumulators: register-heavy without limits, spills when capped (-maxrregcount=32).
#define ACC 48

__global__ void register_heavy(const float* __restrict__ in, float* __restrict__ out, int steps) {
  float acc[ACC];
#pragma unroll
  for (int j = 0; j < ACC; ++j) acc[j] = in[j * blockDim.x + threadIdx.x];
  for (int s = 0; s < steps; ++s) {
    float x = in[s];
#pragma unroll
    for (int j = 0; j < ACC; ++j) acc[j] = acc[j] * x + acc[(j + 1) % ACC];
  }
#pragma unroll
  for (int j = 0; j < ACC; ++j) out[j * blockDim.x + threadIdx.x] = acc[j];
}
