// Templates, namespaces and multi-line declarations: findings pin to the __global__ line.
namespace ops {

template <typename T, int N>
__global__ void
__launch_bounds__(128)
scale_n(T* __restrict__ x, T s) {
#pragma unroll
  for (int j = 0; j < N; ++j) x[threadIdx.x * N + j] *= s;
}

template __global__ void scale_n<float, 4>(float*, float);
template __global__ void scale_n<double, 2>(double*, double);

}  // namespace ops

extern "C" __global__ void __launch_bounds__(1024, 2)
bounded_copy(const float* __restrict__ in, float* __restrict__ out) {
  out[threadIdx.x] = in[threadIdx.x];
}
