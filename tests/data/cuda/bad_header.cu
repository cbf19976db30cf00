// The kernel is fine; its header is not.
#include "bad_header.cuh"

__global__ void uses_header(float* x) { x[threadIdx.x] = twice(x[threadIdx.x]); }
