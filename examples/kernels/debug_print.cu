// Breaks a policy: a printf left in from debugging (vprintf in the PTX), forbidden by the workspace.
#include <cstdio>

__global__ void debug_print(const float* __restrict__ x, float* __restrict__ y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    if (i == 0) printf("x[0] = %f\n", x[0]);
    y[i] = 2.0f * x[i];
  }
}
