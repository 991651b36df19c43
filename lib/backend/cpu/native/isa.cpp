#include "backend/cpu/native/isa.hpp"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>

#include "core/error.hpp"

namespace mnist::cpu::native {

namespace {

bool cpu_has(Isa isa) {
#if defined(__x86_64__) || defined(__i386__)
  switch (isa) {
    case Isa::avx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("fma");
    case Isa::avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case Isa::portable:
      return true;
  }
  return false;
#else
  return isa == Isa::portable;
#endif
}

}  // namespace

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::avx512:
      return "avx512";
    case Isa::avx2:
      return "avx2";
    case Isa::portable:
      return "portable";
  }
  return "?";
}

std::vector<Isa> supported_isas() {
  std::vector<Isa> out;
  for (Isa isa : {Isa::avx512, Isa::avx2, Isa::portable})
    if (cpu_has(isa)) out.push_back(isa);
  return out;
}

Isa chosen_isa() {
  const char* forced = std::getenv("MNIST_CPU_ISA");
  if (!forced || !*forced) return supported_isas().front();
  const std::string name = forced;
  for (Isa isa : {Isa::avx512, Isa::avx2, Isa::portable}) {
    if (name != isa_name(isa)) continue;
    if (!cpu_has(isa))
      MNIST_THROW(RuntimeError,
                  "MNIST_CPU_ISA={}: this CPU cannot run the {} kernels; it supports: {}", name,
                  name, [] {
                    std::string list;
                    for (Isa s : supported_isas())
                      list += (list.empty() ? "" : ", ") + std::string(isa_name(s));
                    return list;
                  }());
    return isa;
  }
  MNIST_THROW(RuntimeError,
              "MNIST_CPU_ISA={} is not an instruction set of the native engine; "
              "allowed: avx512, avx2, portable",
              name);
}

template <class T>
DirectConvKernels<T> direct_conv_kernels(Isa isa) {
  switch (isa) {
    case Isa::avx512:
      return avx512::direct_conv_kernels<T>();
    case Isa::avx2:
      return avx2::direct_conv_kernels<T>();
    case Isa::portable:
      break;
  }
  return portable::direct_conv_kernels<T>();
}

template DirectConvKernels<float> direct_conv_kernels<float>(Isa);
template DirectConvKernels<double> direct_conv_kernels<double>(Isa);

double fma_peak_gflops(Isa isa, int threads, double seconds) {
  double (*probe)(long) = isa == Isa::avx512 ? &avx512::fma_probe
                          : isa == Isa::avx2 ? &avx2::fma_probe
                                             : &portable::fma_probe;
  probe(100000);  // wake the cores up to speed
  // Calibrate on one thread, then run every thread for about `seconds`.
  auto t0 = std::chrono::steady_clock::now();
  probe(1000000);
  const double one = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const long iterations = static_cast<long>(1000000 * seconds / std::max(one, 1e-6));
  const int team = threads > 0 ? threads : omp_get_num_procs();
  double flops = 0;
  t0 = std::chrono::steady_clock::now();
#pragma omp parallel num_threads(team) reduction(+ : flops)
  flops += probe(iterations);
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return flops / elapsed / 1e9;
}

bool direct_conv_supports(const Conv2dGeom& g) {
  return g.stride_h == 1 && g.stride_w == 1 && g.pad_h >= 0 && g.pad_w >= 0 && g.pad_h < g.kh &&
         g.pad_w < g.kw && g.out_h >= 1 && g.out_w >= 1;
}

}  // namespace mnist::cpu::native
