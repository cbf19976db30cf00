// A typo that nvcc must report at line 5, column 17.
__global__ void broken(float* x) {
  int i = threadIdx.x;
  int unused_here;
  x[i] = 2.0f * y;
}
