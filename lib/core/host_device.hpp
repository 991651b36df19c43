#pragma once
// MNIST_HD marks small functions that must compile for both host and device (the RNG, index math).
// CPU-only translation units see plain inline functions.
#if defined(__CUDACC__)
#define MNIST_HD __host__ __device__ __forceinline__
#else
#define MNIST_HD inline
#endif
