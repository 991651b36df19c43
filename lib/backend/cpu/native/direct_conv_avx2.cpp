// The direct convolution compiled for AVX2 with FMA; lib/CMakeLists.txt sets this file's
// flags. Chosen at run time by isa.cpp.
#define MNIST_NATIVE_ISA avx2
#define MNIST_NATIVE_VECTOR_BYTES 32
#include "backend/cpu/native/direct_conv_impl.hpp"
