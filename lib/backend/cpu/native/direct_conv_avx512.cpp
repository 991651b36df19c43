// The direct convolution compiled for AVX-512 (F, VL, BW, DQ) with FMA; lib/CMakeLists.txt sets
// this file's flags. Chosen at run time by isa.cpp.
#define MNIST_NATIVE_ISA avx512
#define MNIST_NATIVE_VECTOR_BYTES 64
#include "backend/cpu/native/direct_conv_impl.hpp"
