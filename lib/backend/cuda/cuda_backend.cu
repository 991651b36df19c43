// CudaBackend: the Backend interface (backend/backend.hpp) on one CUDA device.
//
// It owns one device, one non-blocking stream, small scratch buffers made once at construction
// (reduction partials, block counters), so no call allocates, and its engine's parts
// (engine_parts.hpp: the convolutions, the dense layers, its fused kernels),
// chosen once there: no method asks which engine it runs.
// Every method first makes its device current: a backend may be built on one thread and driven by
// a worker thread, and the current device is per thread.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "backend/cuda/batch_norm.hpp"
#include "backend/cuda/channel_reduce.cuh"
#include "backend/cuda/conv_block_gradient.cuh"
#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/dense_head.hpp"
#include "backend/cuda/direct_conv.hpp"
#include "backend/cuda/dropout.hpp"
#include "backend/cuda/elementwise.hpp"
#include "backend/cuda/engine_parts.hpp"
#include "backend/cuda/gather_batch.hpp"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/max_pool.hpp"
#include "backend/cuda/optimizer.hpp"
#include "backend/cuda/relu.hpp"
#include "backend/cuda/softmax_cross_entropy.hpp"
#include "backend/cuda/stream_counts.cuh"
#include "backend/cuda_devices.hpp"
#include "build_info.hpp"
#include "core/error.hpp"

namespace mnist {
namespace {

constexpr std::size_t kReduceScratchEntries = 1 << 15;  // channels x chunks of channel_reduce.cuh

// The engine as this build can run it: a CPU engine or cudnn without cuDNN is refused here, so a
// backend made outside the config (a test, the benchmark's list) cannot silently run another one.
Engine checked_engine(Engine engine, int ordinal) {
  if (engine == Engine::cudnn && !MNIST_HAVE_CUDNN) {
    MNIST_THROW(RuntimeError,
                "GPU {}: engine 'cudnn' requested, but this mnist-train was built without cuDNN "
                "(MNIST_CUDNN=OFF or cuDNN not found at build time); use 'native' or 'cublas'",
                ordinal);
  }
  const std::vector<Engine> engines = cuda_engines();
  if (std::find(engines.begin(), engines.end(), engine) == engines.end()) {
    MNIST_THROW(RuntimeError, "GPU {}: engine '{}' is not a CUDA engine; known: {}", ordinal,
                to_string(engine), engine_names(engines_run_by(/*cuda=*/true)));
  }
  return engine;
}

// Names of the visible GPUs from their properties (no context is created on them).
std::string visible_gpus_text(int count) {
  std::string text;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    const bool ok = cudaGetDeviceProperties(&prop, i) == cudaSuccess;
    text += fmt::format("{}{}: {}", i ? ", " : "", i, ok ? prop.name : "(properties unavailable)");
  }
  cudaGetLastError();
  return text;
}

// What end_capture returns: the captured graph, ready to launch, and what a replay issues.
struct CudaGraph final : Backend::Captured {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  LaunchCounts per_replay;
  int device = -1;
  ~CudaGraph() override {
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();
  }
};

class CudaBackend final : public Backend {
 public:
  CudaBackend(int ordinal, const BackendOptions& options) : ordinal_(ordinal) {
    std::string why_none;
    const int count = visible_gpu_count(&why_none);
    if (count == 0) {
      MNIST_THROW(RuntimeError, "GPU {} requested (worker {}), but {}", ordinal,
                  options.worker_index, why_none);
    }
    if (ordinal < 0 || ordinal >= count) {
      MNIST_THROW(RuntimeError,
                  "GPU {} requested (worker {}), but {} GPU{} visible ({}); ordinals count from 0 "
                  "over the visible GPUs; {}; {}",
                  ordinal, options.worker_index, count, count == 1 ? " is" : "s are",
                  visible_gpus_text(count), cuda_versions(), cuda_visible_devices_description());
    }
    engine_ = checked_engine(options.engine, ordinal);
    // A constructor that throws runs no destructor: free what was made so far, so a failed start
    // (out of memory, a cuBLAS/cuDNN init failure) does not leak a stream and handles on the GPU.
    try {
      acquire();
    } catch (...) {
      release_all();
      throw;
    }
  }

  ~CudaBackend() override { release_all(); }

 private:
  void acquire() {
    MNIST_CUDA_CHECK(cudaSetDevice(ordinal_));
    cudaDeviceProp prop{};
    MNIST_CUDA_CHECK(cudaGetDeviceProperties(&prop, ordinal_));
    char bus[32] = {};
    MNIST_CUDA_CHECK(cudaDeviceGetPCIBusId(bus, sizeof bus, ordinal_));
    name_ = fmt::format("gpu{} ({}, {})", ordinal_, prop.name, bus);
    MNIST_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    counted_ = cuda::StreamCountsRegistration(stream_, &counts_);
    scratch_.partial = static_cast<double2*>(allocate(kReduceScratchEntries * sizeof(double2)));
    scratch_.capacity = kReduceScratchEntries;
    // The stream's block counters (launch.cuh, arrive_last): zero now, and every kernel that
    // counts on them leaves them zero.
    block_counter_ = static_cast<unsigned*>(allocate(cuda::kBlockCounters * sizeof(unsigned)));
    MNIST_CUDA_CHECK(
        cudaMemsetAsync(block_counter_, 0, cuda::kBlockCounters * sizeof(unsigned), stream_));
    MNIST_CUDA_CHECK(cudaStreamSynchronize(stream_));
    parts_ = cuda::make_engine_parts(
        engine_, *this, cuda::StreamResources{ordinal_, stream_, block_counter_, scratch_});
    use_fused(*parts_.fused);
  }

  void release_all() noexcept {
    // Never throws: errors here are ignored (the device may already be in a bad state).
    cudaSetDevice(ordinal_);
    if (capturing_) {  // a capture abandoned by an exception: end it, dropping its graph
      cudaGraph_t graph = nullptr;
      cudaStreamEndCapture(stream_, &graph);
      if (graph) cudaGraphDestroy(graph);
    }
    if (stream_) cudaStreamSynchronize(stream_);
    counted_ = cuda::StreamCountsRegistration();  // before the stream's handle can be reused
    parts_ = cuda::EngineParts();                 // the library handles, bound to the stream
    if (scratch_.partial) cudaFree(scratch_.partial);
    if (block_counter_) cudaFree(block_counter_);
    if (stream_) cudaStreamDestroy(stream_);
    cudaGetLastError();
  }

 public:
  DeviceKind kind() const override { return DeviceKind::cuda; }
  std::string name() const override { return name_; }
  void* stream_handle() const override { return static_cast<void*>(stream_); }
  LaunchCounts counts() const override {
    LaunchCounts c;
    each_count(counts_, c, [](const auto& counter, uint64_t& value) { value = counter.load(); });
    return c;
  }

  // ---- memory ---------------------------------------------------------------------------------
  void* allocate(std::size_t bytes) override {
    activate();
    void* ptr = nullptr;
    const cudaError_t status = cudaMalloc(&ptr, bytes);
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      std::size_t free_bytes = 0, total_bytes = 0;
      cudaMemGetInfo(&free_bytes, &total_bytes);
      cudaGetLastError();
      MNIST_THROW(RuntimeError,
                  "{}: out of memory allocating {} bytes ({:.1f} MiB); {:.1f} MiB free of {:.1f} "
                  "MiB (other processes on this GPU count too; see nvidia-smi)",
                  name_, bytes, bytes / 1048576.0, free_bytes / 1048576.0, total_bytes / 1048576.0);
    }
    MNIST_CUDA_CHECK(status);
    return ptr;
  }
  void release(void* ptr) noexcept override {
    if (!ptr) return;
    cudaSetDevice(ordinal_);
    cudaFree(ptr);
    cudaGetLastError();
  }
  void copy_to_device(void* dst, const void* src, std::size_t bytes) override {
    activate();
    // From pageable memory the runtime stages the source before returning, so `src` may be reused;
    // staging may wait for the device, so such a copy counts as a host synchronisation.
    cuda::count_copy(stream_);
    if (!pinned(src)) cuda::count_host_sync(stream_);
    MNIST_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
  }
  void copy_to_host(void* dst, const void* src, std::size_t bytes) override {
    activate();
    cuda::count_copy(stream_);
    MNIST_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
    wait_for_stream();
  }
  void copy_on_device(void* dst, const void* src, std::size_t bytes) override {
    activate();
    cuda::count_copy(stream_);
    MNIST_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
  }
  void fill(float* dst, std::size_t n, float value) override {
    activate();
    // +0.0f is all zero bytes: a memset (the copy engine, no kernel; the step's metric reset).
    if (value == 0.0f && !std::signbit(value)) {
      cuda::count_copy(stream_);
      if (n > 0) MNIST_CUDA_CHECK(cudaMemsetAsync(dst, 0, n * sizeof(float), stream_));
      return;
    }
    cuda::fill(stream_, dst, n, value);
  }
  void synchronize() override {
    activate();
    wait_for_stream();
  }
  void* allocate_host(std::size_t bytes) override {
    activate();
    void* ptr = nullptr;
    MNIST_CUDA_CHECK(cudaMallocHost(&ptr, std::max<std::size_t>(bytes, 1)));
    return ptr;
  }
  void release_host(void* ptr) noexcept override {
    if (!ptr) return;
    cudaSetDevice(ordinal_);
    cudaFreeHost(ptr);
    cudaGetLastError();
  }
  void copy_to_device_async(void* dst, const void* src, std::size_t bytes) override {
    activate();
    cuda::count_copy(stream_);
    MNIST_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
  }

  // ---- data -----------------------------------------------------------------------------------
  void gather_batch(const BatchGather& batch, int n) override {
    activate();
    MNIST_CHECK(batch.ring_steps >= 1, "{}: gather_batch from a ring of {} steps", name_,
                batch.ring_steps);
    cuda::gather_batch(stream_, batch, n);
  }

  // ---- convolution (the engine's Convolutions; its chains where it does not fuse) -------------
  std::size_t conv2d_workspace_floats(const Conv2dGeom& g) override {
    activate();
    return parts_.convolutions->workspace_floats(g);
  }
  Conv2dAlgorithms conv2d_algorithms(const Conv2dGeom& g) override {
    activate();
    return parts_.convolutions->algorithms(g);
  }
  void conv2d_forward(const Conv2dGeom& g, const float* x, const float* weight, const float* bias,
                      float* y, float* workspace) override {
    activate();
    parts_.convolutions->forward(g, x, weight, bias, y, workspace);
  }
  void conv2d_backward_data(const Conv2dGeom& g, const float* dy, const float* weight, float* dx,
                            float* workspace) override {
    activate();
    parts_.convolutions->backward_data(g, dy, weight, dx, workspace);
  }
  void conv2d_backward(const Conv2dGeom& g, const float* x, const float* dy, const float* weight,
                       float* dweight, float* dbias, float* dx, float* workspace) override {
    activate();
    if (!parts_.convolutions->fuses(g))
      return Backend::conv2d_backward(g, x, dy, weight, dweight, dbias, dx, workspace);
    parts_.convolutions->backward(g, x, dy, weight, dweight, dbias, dx, workspace);
  }
  void conv2d_backward_weights(const Conv2dGeom& g, const float* x, const float* dy, float* dweight,
                               float* dbias, float* workspace) override {
    activate();
    parts_.convolutions->backward_weights(g, x, dy, dweight, dbias, workspace);
  }

  // ---- max pooling ----------------------------------------------------------------------------
  void max_pool_forward(const PoolGeom& g, const float* x, float* y, int32_t* argmax) override {
    activate();
    cuda::max_pool_forward(stream_, g, x, y, argmax);
  }
  void max_pool_backward(const PoolGeom& g, const float* dy, const int32_t* argmax,
                         float* dx) override {
    activate();
    cuda::max_pool_backward(stream_, g, dy, argmax, dx);
  }

  // ---- relu -----------------------------------------------------------------------------------
  void relu_forward(std::size_t n, const float* x, float* y) override {
    activate();
    cuda::relu_forward(stream_, n, x, y);
  }
  void relu_backward(std::size_t n, const float* y, const float* dy, float* dx) override {
    activate();
    cuda::relu_backward(stream_, n, y, dy, dx);
  }

  // ---- batch norm -----------------------------------------------------------------------------
  // All engines use the hand-written kernels here: cuDNN's batch norm fuses statistics, update and
  // normalisation in one call, which leaves no point to all-reduce the statistics in between (sync
  // batch norm) and computes its own running averages.
  void batch_norm_stats(const ChannelGeom& g, const float* x, float* sum, float* sumsq) override {
    activate();
    cuda::batch_norm_stats(stream_, g, x, sum, sumsq, scratch_);
  }
  void batch_norm_finalize(int c, double count, const float* sum, const float* sumsq, float epsilon,
                           float decay, float* mean, float* invstd, float* running_mean,
                           float* running_var) override {
    activate();
    cuda::batch_norm_finalize(stream_, c, count, sum, sumsq, epsilon, decay, mean, invstd,
                              running_mean, running_var);
  }
  void batch_norm_inference_params(int c, const float* running_mean, const float* running_var,
                                   float epsilon, float* mean, float* invstd) override {
    activate();
    cuda::batch_norm_inference_params(stream_, c, running_mean, running_var, epsilon, mean, invstd);
  }
  void batch_norm_apply(const ChannelGeom& g, const float* x, const float* mean,
                        const float* invstd, const float* gamma, const float* beta,
                        float* y) override {
    activate();
    cuda::batch_norm_apply(stream_, g, x, mean, invstd, gamma, beta, y);
  }
  void batch_norm_backward_reduce(const ChannelGeom& g, const float* dy, const float* x,
                                  const float* mean, const float* invstd, float* sum_dy,
                                  float* sum_dy_xhat) override {
    activate();
    cuda::batch_norm_backward_reduce(stream_, g, dy, x, mean, invstd, sum_dy, sum_dy_xhat,
                                     scratch_);
  }
  void batch_norm_backward_apply(const ChannelGeom& g, const float* dy, const float* x,
                                 const float* mean, const float* invstd, const float* gamma,
                                 const float* sum_dy, const float* sum_dy_xhat, double count,
                                 float* dx) override {
    activate();
    cuda::batch_norm_backward_apply(stream_, g, dy, x, mean, invstd, gamma, sum_dy, sum_dy_xhat,
                                    count, dx);
  }

  // ---- dense (the engine's DenseLayers) ------------------------------------------------------
  void dense_forward(int n, int in, int out, const float* x, const float* weight, const float* bias,
                     float* y) override {
    activate();
    parts_.dense->forward(n, in, out, x, weight, bias, y);
  }
  void dense_backward_data(int n, int in, int out, const float* dy, const float* weight,
                           float* dx) override {
    activate();
    parts_.dense->backward_data(n, in, out, dy, weight, dx);
  }
  void dense_backward_weights(int n, int in, int out, const float* x, const float* dy,
                              float* dweight, float* dbias) override {
    activate();
    parts_.dense->backward_weights(n, in, out, x, dy, dweight, dbias);
  }

  // ---- dropout --------------------------------------------------------------------------------
  void dropout_forward(int n, int per_sample, float rate, RngKey key, const StepScalars* step,
                       uint32_t first_sample, const float* x, float* y) override {
    activate();
    MNIST_CHECK(step, "{}: dropout_forward needs the step's values (StepScalars)", name_);
    cuda::dropout_forward(stream_, n, per_sample, rate, key, step, first_sample, x, y);
  }
  void dropout_backward(int n, int per_sample, float rate, RngKey key, const StepScalars* step,
                        uint32_t first_sample, const float* dy, float* dx) override {
    activate();
    MNIST_CHECK(step, "{}: dropout_backward needs the step's values (StepScalars)", name_);
    cuda::dropout_backward(stream_, n, per_sample, rate, key, step, first_sample, dy, dx);
  }

  // ---- loss -----------------------------------------------------------------------------------
  void softmax_cross_entropy(int n, int k, const float* logits, const int32_t* labels,
                             float grad_scale, float* dlogits, float* metrics) override {
    activate();
    cuda::softmax_cross_entropy(stream_, n, k, logits, labels, grad_scale, dlogits, metrics,
                                scratch_, block_counter_);
  }

  // ---- optimizers -----------------------------------------------------------------------------
  void adam_update(std::size_t n, std::size_t n_decay, const OptimizerStep& constants,
                   StepScalars* step, bool advance, float* params, const float* grads, float* m,
                   float* v) override {
    activate();
    check_update("adam_update", n, n_decay, step);
    cuda::adam_update(stream_, n, n_decay, constants, step, advance, params, grads, m, v,
                      block_counter_);
  }
  void sgd_update(std::size_t n, std::size_t n_decay, const OptimizerStep& constants,
                  StepScalars* step, bool advance, float* params, const float* grads,
                  float* velocity) override {
    activate();
    check_update("sgd_update", n, n_decay, step);
    cuda::sgd_update(stream_, n, n_decay, constants, step, advance, params, grads, velocity,
                     block_counter_);
  }

  // ---- per-step values in device memory -------------------------------------------------------
  void step_scalars_set(StepScalars* s, const StepScalars& values) override {
    activate();
    cuda::step_scalars_set(stream_, s, values);
  }

  // ---- capture and replay (CUDA graphs) -------------------------------------------------------
  // Thread-local capture: another worker's thread may allocate or wait for its own stream while
  // this one captures; only this thread's unsafe calls invalidate the capture.
  bool supports_capture() const override { return true; }
  void begin_capture() override {
    activate();
    MNIST_CHECK(!capturing_, "{}: begin_capture while a capture is in progress", name_);
    MNIST_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
    capturing_ = true;
    before_capture_ = counts();
  }
  std::unique_ptr<Captured> end_capture() override {
    activate();
    MNIST_CHECK(capturing_, "{}: end_capture without begin_capture", name_);
    capturing_ = false;
    // Nothing ran while capturing: what was counted is what each replay will issue.
    const LaunchCounts captured = counts() - before_capture_;
    restore_counts(before_capture_);
    auto graph = std::make_unique<CudaGraph>();
    const cudaError_t ended = cudaStreamEndCapture(stream_, &graph->graph);
    if (ended != cudaSuccess) {
      const std::string why = cudaGetErrorString(ended);
      cudaGetLastError();
      MNIST_THROW(RuntimeError,
                  "{}: the captured calls cannot be replayed: {} ({}); a captured step may not "
                  "make the host wait (copy_to_host, synchronize, a copy from "
                  "pageable memory) nor allocate",
                  name_, cudaGetErrorName(ended), why);
    }
    MNIST_CUDA_CHECK(cudaGraphInstantiate(&graph->exec, graph->graph, 0));
    graph->per_replay = captured;
    graph->per_replay.graph_launches = 1;
    graph->device = ordinal_;
    return graph;
  }
  void replay(const Captured& calls) override {
    activate();
    const auto* graph = dynamic_cast<const CudaGraph*>(&calls);
    MNIST_CHECK(graph && graph->device == ordinal_, "{}: replay of calls captured elsewhere",
                name_);
    add_counts(graph->per_replay);
    MNIST_CUDA_CHECK(cudaGraphLaunch(graph->exec, stream_));
  }

  // ---- helpers --------------------------------------------------------------------------------
  void scale(std::size_t n, float alpha, float* x) override {
    activate();
    cuda::scale(stream_, n, alpha, x);
  }
  void add(std::size_t n, const float* x, float* y) override {
    activate();
    cuda::add(stream_, n, x, y);
  }

  void activate() { MNIST_CUDA_CHECK(cudaSetDevice(ordinal_)); }
  void check_update(const char* op, std::size_t n, std::size_t n_decay,
                    const StepScalars* step) const {
    MNIST_CHECK(n_decay <= n, "{}: {} with n_decay {} > n {}", name_, op, n_decay, n);
    MNIST_CHECK(step, "{}: {} needs the step's values (StepScalars)", name_, op);
  }
  // The fields of StreamCounts paired with LaunchCounts', listed once for every copy between them.
  // (`Counters`: a StreamCounts, const when only read.)
  template <class Counters, class F>
  static void each_count(Counters& counters, LaunchCounts& values, F&& f) {
    f(counters.kernels, values.kernels);
    f(counters.library_calls, values.library_calls);
    f(counters.copies, values.copies);
    f(counters.host_syncs, values.host_syncs);
    f(counters.graph_launches, values.graph_launches);
  }
  void restore_counts(LaunchCounts c) {
    each_count(counts_, c, [](auto& counter, uint64_t& value) { counter = value; });
  }
  void add_counts(LaunchCounts c) {
    each_count(counts_, c, [](auto& counter, uint64_t& value) { counter += value; });
  }
  // Every host wait of this backend goes through here, so counts() sees it.
  void wait_for_stream() {
    cuda::count_host_sync(stream_);
    MNIST_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  // Page-locked (cudaMallocHost) or device memory: a copy from it needs no staging.
  static bool pinned(const void* ptr) {
    cudaPointerAttributes attributes{};
    if (cudaPointerGetAttributes(&attributes, ptr) != cudaSuccess) {
      cudaGetLastError();  // older runtimes fail on pageable pointers: that answers the question
      return false;
    }
    return attributes.type == cudaMemoryTypeHost || attributes.type == cudaMemoryTypeDevice;
  }

  int ordinal_;
  Engine engine_ = Engine::native;
  std::string name_;
  cudaStream_t stream_ = nullptr;
  cuda::StreamCounts counts_;
  cuda::StreamCountsRegistration counted_;
  bool capturing_ = false;
  LaunchCounts before_capture_;
  cuda::ReduceScratch scratch_;
  unsigned* block_counter_ = nullptr;  // [kBlockCounters], 0 between kernels (launch.cuh)
  cuda::EngineParts parts_;            // made last (acquire), released first (release_all)
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(int device_ordinal, const BackendOptions& options) {
  return std::make_unique<CudaBackend>(device_ordinal, options);
}

}  // namespace mnist
