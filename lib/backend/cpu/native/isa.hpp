#pragma once
// Which instruction set the native CPU engine's vector kernels run with.
//
// The kernels are compiled three times (direct_conv_avx512.cpp, _avx2.cpp, _portable.cpp, each
// with its own compiler flags) and one copy is chosen when a backend is made: the widest the CPU
// supports, or the one named by the environment variable MNIST_CPU_ISA (avx512, avx2, portable),
// so that tests and benchmarks can run every copy on one machine. Plain dispatch through
// function pointers, not GCC's target_clones: its ifunc resolvers crash under ThreadSanitizer.

#include <string>
#include <vector>

#include "backend/cpu/native/direct_conv.hpp"

namespace mnist::cpu::native {

enum class Isa { avx512, avx2, portable };

const char* isa_name(Isa isa);
// Every instruction set this CPU can run, widest first (portable is always there).
std::vector<Isa> supported_isas();
// MNIST_CPU_ISA when set (a RuntimeError naming it when unknown or unsupported here), else the
// widest supported.
Isa chosen_isa();

template <class T>
DirectConvKernels<T> direct_conv_kernels(Isa isa);

// The FMA peak of `threads` cores (0 = all) with this instruction set's widest vectors, in
// GFLOP/s: each thread runs independent chains of float FMAs for about `seconds`. For the
// benchmark's "fraction of peak"; it measures what the cores deliver now (clocks, other load).
double fma_peak_gflops(Isa isa, int threads, double seconds = 0.2);

// One definition per compiled copy.
namespace avx512 {
template <class T>
DirectConvKernels<T> direct_conv_kernels();
double fma_probe(long iterations);  // FLOPs done
}  // namespace avx512
namespace avx2 {
template <class T>
DirectConvKernels<T> direct_conv_kernels();
double fma_probe(long iterations);  // FLOPs done
}  // namespace avx2
namespace portable {
template <class T>
DirectConvKernels<T> direct_conv_kernels();
double fma_probe(long iterations);  // FLOPs done
}  // namespace portable

}  // namespace mnist::cpu::native
