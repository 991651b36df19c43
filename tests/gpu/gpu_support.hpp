#pragma once
// Shared helpers of the GPU tests: one CPU backend (the oracle) and one CUDA backend per engine,
// identical inputs uploaded to both, NaN-poisoned outputs, and a comparison that reports the worst
// elements with the tolerance rule |gpu - cpu| <= atol + rtol * |cpu|.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "build_info.hpp"

namespace gpu_test {

// The sizes every grid must handle: each leaves a tail in any block or tile size.
inline const std::vector<int> kSizes{1, 7, 33, 255, 257, 1000};

// The largest convolution batch: 1000 on a GPU. The CPU emulation of CUDA (MNIST_CUDA_EMULATED)
// spends most of its time on the n=1000 convolutions (`gpu_tests -d yes`: 168 s of 212 s), so
// there it is 300: still above 257, with a tail in every tile, and several tiles per grid row.
constexpr int kLargestConvBatch = MNIST_CUDA_EMULATED ? 300 : 1000;

mnist::Backend& cpu();
mnist::Backend& gpu(const std::string& engine = "native");
std::vector<std::string> engines();  // cuda_engines(): native, cublas, cudnn (with cuDNN), fused
void release_backends();

// What `call` launched and copied on `backend`: the difference of two readings of its counts.
template <class Call>
mnist::LaunchCounts counted(mnist::Backend& backend, Call&& call) {
  const mnist::LaunchCounts before = backend.counts();
  call();
  return backend.counts() - before;
}

std::vector<float> random_floats(std::size_t n, uint32_t seed, float lo, float hi);
std::vector<int32_t> random_ints(std::size_t n, uint32_t seed, int lo, int hi);  // [lo, hi]

// The same data on the CPU backend and on one CUDA backend.
template <class T>
struct Twin {
  mnist::DeviceBuffer<T> cpu, gpu;
  T* c() const { return cpu.data(); }
  T* g() const { return gpu.data(); }
};

template <class T>
Twin<T> upload(mnist::Backend& gpu_backend, const std::vector<T>& host) {
  Twin<T> t{mnist::DeviceBuffer<T>(cpu(), host.size()),
            mnist::DeviceBuffer<T>(gpu_backend, host.size())};
  if (!host.empty()) {
    cpu().copy_to_device(t.cpu.data(), host.data(), host.size() * sizeof(T));
    gpu_backend.copy_to_device(t.gpu.data(), host.data(), host.size() * sizeof(T));
  }
  return t;
}

// A step's values on both sides, in each backend's memory, as a training step keeps them (every
// kernel that needs the step, the learning rate or the bias corrections reads them there).
inline Twin<mnist::StepScalars> step_values_on(mnist::Backend& gpu_backend,
                                               const mnist::StepScalars& values) {
  return upload(gpu_backend, std::vector<mnist::StepScalars>{values});
}
// The values of 0-based step `step` for the by-value update `s` (its lr, betas, epsilon as given,
// decay): what the host sets for that step (optimizer_rule.hpp's step_scalars_at).
mnist::StepScalars step_values_for(const mnist::OptimizerStep& s, int64_t step);

// Outputs filled with NaN (floats) or a sentinel (ints) on both sides, so an element a kernel
// forgets to write fails the comparison.
Twin<float> poisoned(mnist::Backend& gpu_backend, std::size_t n);
Twin<int32_t> poisoned_ints(mnist::Backend& gpu_backend, std::size_t n);

template <class T>
std::vector<T> download(mnist::Backend& backend, const mnist::DeviceBuffer<T>& buffer) {
  std::vector<T> host(buffer.size());
  if (!host.empty()) backend.copy_to_host(host.data(), buffer.data(), buffer.bytes());
  return host;
}

// True when both hold the same elements bit for bit (NaNs included). memcmp never sees the null
// data() of an empty vector, even for 0 bytes (UBSan).
template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

// CHECKs that every element satisfies |gpu - cpu| <= atol + rtol * |cpu| (NaN anywhere fails) and
// reports the count of violations and the worst few with their indices.
void expect_close(mnist::Backend& gpu_backend, const Twin<float>& out, double atol, double rtol,
                  const std::string& what);
void expect_equal(mnist::Backend& gpu_backend, const Twin<int32_t>& out, const std::string& what);
// CHECKs that the GPU's output is the CPU's bit for bit (signed zeros and NaNs too), reporting the
// worst elements as expect_close does where it is not.
void check_same_bits(mnist::Backend& gpu_backend, const Twin<float>& out, const std::string& what);

// What a replica of a network leaves on the host after one training pass (forward_train +
// backward of 7 samples, step 3) and an evaluation forward: its metrics, every parameter gradient,
// the running statistics, the evaluation logits, its layers' labels (which show the fused blocks)
// and, with sync batch norm, how many all-reduces the layers asked for.
struct ReplicaRun {
  std::vector<float> grads, metrics, state, logits;
  std::vector<std::string> labels;
  int all_reduces = 0;
};
// With `sync`, ctx.all_reduce_sum is a one-replica all-reduce (it leaves the sums as they are and
// counts its calls), so the layers take their sync batch norm path.
ReplicaRun run_replica(mnist::Backend& be, const std::string& yaml, bool sync = false);
// CHECKs a fused GPU replica's run against the CPU's. The convolutions sum their products in
// another order on each side (float, ~1e-7 relative per add), and batch norm divides the
// differences by the batch's standard deviation. Loss sum: 1e-5 relative (the first step's bound in
// test_engine_gpu.cpp is 1e-4); correct and samples: equal; gradients: atol 1e-5 + rtol 1e-3 (the
// CPU fused-vs-separate replica test's); running statistics: atol 1e-6 + rtol 1e-5; evaluation
// logits: atol 1e-5 + rtol 1e-4; the same count of all-reduces. Measured on the emulated build for
// the seed network: the loss sums differ by 1.2e-7 relative, the gradients by at most 1.7e-6; a
// kernel that drops a term moves them by orders of magnitude more.
void expect_replica_close(const ReplicaRun& cpu_run, const ReplicaRun& gpu_run);

}  // namespace gpu_test
