// Kernels that use instructions a policy may forbid, and a clean twin.
#include <cstdio>

__global__ void uses_printf(const int* x) {
  printf("x[0] = %d\n", x[0]);
}

__global__ void volatile_load(volatile int* flag, int* out) {
  int v = flag[threadIdx.x];
  out[threadIdx.x] = v + 1;
}

__global__ void system_atomic(int* counter) {
  atomicAdd_system(counter, 1);
}

__global__ void clean_twin(const int* x, int* out) {
  out[threadIdx.x] = x[threadIdx.x] + 1;
}
