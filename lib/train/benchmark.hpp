#pragma once
// Training-step throughput of one replica on one backend, and where the time goes, layer by layer.
// `mnist-train bench` prints this; the speed figures of docs/results.md come from it.

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "config/experiment.hpp"
#include "model/model.hpp"

namespace mnist {

struct BenchmarkOptions {
  int batch = 1024;
  int steps = 20;      // timed steps
  int warmup = 3;      // untimed steps first (allocation, caches, clocks)
  uint64_t seed = 42;  // the random images and the initial weights
};

struct BenchmarkResult {
  std::string engine;  // the engine measured (set by the caller, which chose it)
  std::string device;
  int batch = 0;
  int steps = 0;
  double step_ms = 0;  // mean wall time of a whole training step, unprofiled
  double samples_per_second = 0;
  // Per timed step, counted by the backend (Backend::counts; the CPU backend counts nothing):
  // kernels launched (of which cuBLAS/cuDNN calls), copies and memsets, host waits.
  double kernels_per_step = 0, library_calls_per_step = 0, copies_per_step = 0,
         host_syncs_per_step = 0;
  std::vector<std::string> layers;              // "0:conv2d"
  std::vector<double> forward_ms, backward_ms;  // per step, from a separate profiled pass
  double loss_ms = 0, update_ms = 0;            // softmax cross-entropy, optimizer (profiled)
  std::string optimizer;                        // "adam" or "sgd": the config's
  std::string communicator;                     // the all-reduce's; "" when left out
  double allreduce_ms = 0;                      // the gradient all-reduce (profiled)
  std::size_t device_bytes = 0;                 // replica memory
  int64_t flops_per_sample = 0;                 // forward
  // Per conv layer whose engine chose something other than the native kernels (cudnn):
  // "0:conv2d: forward IMPLICIT_GEMM, backward-data ALGO_1, backward-weights ALGO_1".
  std::vector<std::string> conv_algorithms;
};

class Communicator;

// One replica's training steps exactly as training runs them (Worker::train_step,
// train/worker.hpp): the epoch sampler's batch gathered on the device (with the config's
// data.random_shift), forward, loss, backward, the gradient all-reduce through `comm` (one worker;
// null leaves the hop out) and the config's optimizer at its schedule's learning rate. The config's
// train batch is replaced by options.batch. Inputs are random images (the speed does not depend on
// the pixels' values).
BenchmarkResult run_benchmark(const Experiment& experiment, const Model& model,
                              std::unique_ptr<Backend> backend, std::shared_ptr<Communicator> comm,
                              const BenchmarkOptions& options);

std::string format_benchmark(const BenchmarkResult& r);

// The CPU's float FMA peak with `threads` threads (0 = all cores), measured by a probe of
// independent FMA chains with the native engine's instruction set (MNIST_CPU_ISA respected), so a
// step's GFLOP/s can be put as a fraction of what the cores can do.
struct FmaPeak {
  std::string isa;
  int threads = 0;
  double gflops = 0;
};
FmaPeak probe_cpu_fma_peak(int threads);
// Training GFLOP/s of a result (forward + backward counted as 3x the forward FLOPs).
double benchmark_gflops(const BenchmarkResult& r);

// The per-step gradient all-reduce alone: `workers` threads, each with its backend from `factory`,
// sum `count` floats through `comm` `iterations` times (after 5 untimed calls). Bandwidths follow
// nccl-tests: algbw = bytes / time, busbw = algbw * 2 (W - 1) / W.
struct AllReduceResult {
  std::string communicator;
  int workers = 0;
  std::size_t floats = 0;
  int iterations = 0;
  double us_per_call = 0, algbw_gb_s = 0, busbw_gb_s = 0;
};
AllReduceResult run_allreduce_benchmark(const std::function<std::unique_ptr<Backend>(int)>& factory,
                                        int workers, Communicator& comm, std::size_t count,
                                        int iterations);
std::string format_allreduce(const AllReduceResult& r);
std::string benchmark_json(const BenchmarkResult& r);

}  // namespace mnist
