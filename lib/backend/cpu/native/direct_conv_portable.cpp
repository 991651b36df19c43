// The direct convolution compiled for the build's baseline instruction set (SSE2 on x86-64);
// lib/CMakeLists.txt sets this file's flags. Chosen at run time by isa.cpp.
#define MNIST_NATIVE_ISA portable
#define MNIST_NATIVE_VECTOR_BYTES 16
#include "backend/cpu/native/direct_conv_impl.hpp"
