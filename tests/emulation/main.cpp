// Entry point of emulation_tests: the self-test of the CPU emulation of CUDA
// (tools/cuda_emulation). Built only with MNIST_CUDA_EMULATION=ON.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
