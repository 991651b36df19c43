// CpuBackend: the Backend interface over the float cpu:: kernels, on host memory.
// Engines: "blas" runs every kernel of backend/cpu (convolutions by im2col + OpenBLAS GEMM);
// "native" replaces the convolutions with the direct kernels of backend/cpu/native, compiled for
// the widest instruction set the CPU has (native/isa.hpp), and keeps the im2col path only for
// geometries those do not handle (strides).
// Threads: each kernel call opens its own OpenMP team of `threads_` threads (see parallel.hpp);
// the backend keeps no state shared with other backends, so several may run in parallel workers.
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "backend/cpu/batch_norm.hpp"
#include "backend/cpu/conv2d.hpp"
#include "backend/cpu/dense.hpp"
#include "backend/cpu/dropout.hpp"
#include "backend/cpu/elementwise.hpp"
#include "backend/cpu/gather_batch.hpp"
#include "backend/cpu/max_pool.hpp"
#include "backend/cpu/native/conv_block.hpp"
#include "backend/cpu/native/isa.hpp"
#include "backend/cpu/optimizer.hpp"
#include "backend/cpu/parallel.hpp"
#include "backend/cpu/relu.hpp"
#include "backend/cpu/softmax_cross_entropy.hpp"
#include "backend/optimizer_rule.hpp"
#include "core/error.hpp"

namespace mnist {

namespace {

// Cache-line alignment: no false sharing between buffers, aligned vector loads.
constexpr std::size_t kAlignment = 64;

// The CPU's fused kernels: the native engine's conv block (cpu/native/conv_block.cpp, the oracle
// the CUDA conv block matches bit for bit); every other block runs the reference chains, which
// are the CPU's twins of the CUDA fused kernels.
class CpuFusedKernels final : public FusedKernels {
 public:
  // direct: the backend's direct convolutions (set by the time a call is made).
  CpuFusedKernels(Backend& backend, int threads, bool native,
                  const cpu::native::DirectConvKernels<float>& direct)
      : FusedKernels(backend), threads_(threads), native_(native), direct_(direct) {}

  // The direct convolutions take the sums while each output row is in cache.
  void conv2d_forward_stats(const Conv2dGeom& g, const float* x, const float* weight,
                            const float* bias, float* y, float* sum, float* sumsq,
                            const BatchNormFinalize* finalize, float* workspace) override {
    if (!native_ || !cpu::native::direct_conv_supports(g))
      return FusedKernels::conv2d_forward_stats(g, x, weight, bias, y, sum, sumsq, finalize,
                                                workspace);
    direct_.forward_stats(g, x, weight, bias, y, sum, sumsq, workspace, threads_);
    if (finalize) {
      backend().batch_norm_finalize(g.k, finalize->count, sum, sumsq, finalize->epsilon,
                                    finalize->decay, finalize->mean, finalize->invstd,
                                    finalize->running_mean, finalize->running_var);
    }
  }

  bool supports(const FusedShape& s) const override {
    return s.kind == FusedKind::conv_block && native_ &&
           cpu::native::conv_block_pool_supported(s.pool);
  }
  void bn_relu_pool_forward(const PoolGeom& g, const float* x, const float* mean,
                            const float* invstd, const float* gamma, const float* beta, float* y,
                            uint8_t* mask) override {
    cpu::native::bn_relu_pool_forward(g, x, mean, invstd, gamma, beta, y, mask, threads_);
  }
  void bn_relu_pool_backward_reduce(const PoolGeom& g, const float* dy, const uint8_t* mask,
                                    const float* x, const float* mean, const float* invstd,
                                    float* sum_dy, float* sum_dy_xhat) override {
    cpu::native::bn_relu_pool_backward_reduce(g, dy, mask, x, mean, invstd, sum_dy, sum_dy_xhat,
                                              threads_);
  }
  void bn_relu_pool_backward_apply(const PoolGeom& g, const float* dy, const uint8_t* mask,
                                   const float* x, const float* mean, const float* invstd,
                                   const float* gamma, const float* sum_dy,
                                   const float* sum_dy_xhat, double count, float* dx) override {
    cpu::native::bn_relu_pool_backward_apply(g, dy, mask, x, mean, invstd, gamma, sum_dy,
                                             sum_dy_xhat, count, dx, threads_);
  }

 private:
  int threads_;
  bool native_;
  const cpu::native::DirectConvKernels<float>& direct_;
};

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const BackendOptions& options)
      : index_(options.worker_index),
        threads_(cpu::resolve_threads(options.threads)),
        native_(options.engine == Engine::native),
        fused_(*this, threads_, native_, direct_) {
    if (native_) direct_ = cpu::native::direct_conv_kernels<float>(cpu::native::chosen_isa());
    use_fused(fused_);
  }

  DeviceKind kind() const override { return DeviceKind::cpu; }
  std::string name() const override { return fmt::format("cpu{}", index_); }

  void* allocate(std::size_t bytes) override {
    // aligned_alloc wants a multiple of the alignment; a zero-byte request still gets a unique
    // block.
    const std::size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
    void* p = std::aligned_alloc(kAlignment, rounded ? rounded : kAlignment);
    if (!p) {
      const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
      MNIST_THROW(RuntimeError,
                  "{}: cannot allocate {} bytes ({:.1f} MiB) of host memory; about {:.1f} MiB "
                  "are free",
                  name(), bytes, bytes / 1048576.0,
                  pages > 0 && page > 0 ? static_cast<double>(pages) * page / 1048576.0 : 0.0);
    }
    return p;
  }
  void release(void* ptr) noexcept override { std::free(ptr); }
  // Zero-byte copies may come with null pointers (an empty vector's data()); memcpy must not see
  // them even then.
  void copy_to_device(void* dst, const void* src, std::size_t bytes) override {
    if (bytes > 0) std::memcpy(dst, src, bytes);
  }
  void copy_to_host(void* dst, const void* src, std::size_t bytes) override {
    if (bytes > 0) std::memcpy(dst, src, bytes);
  }
  void copy_on_device(void* dst, const void* src, std::size_t bytes) override {
    std::memmove(dst, src, bytes);
  }
  void fill(float* dst, std::size_t n, float value) override { cpu::fill(n, value, dst, threads_); }
  // Every kernel has finished when it returns.
  void synchronize() override {}
  void* allocate_host(std::size_t bytes) override { return allocate(bytes); }
  void release_host(void* ptr) noexcept override { release(ptr); }
  void copy_to_device_async(void* dst, const void* src, std::size_t bytes) override {
    copy_to_device(dst, src, bytes);
  }

  void gather_batch(const BatchGather& batch, int n) override {
    MNIST_CHECK(batch.ring_steps >= 1, "{}: gather_batch from a ring of {} steps", name(),
                batch.ring_steps);
    // Per-step values live in this backend's memory, the host's: read in place.
    const int64_t slot = batch.step ? batch.step->step % batch.ring_steps : 0;
    cpu::gather_batch(batch.images, batch.labels, batch.pixels, batch.ring + slot * n, n, batch.x,
                      batch.y, threads_);
  }

  std::size_t conv2d_workspace_floats(const Conv2dGeom& g) override {
    if (direct(g)) return direct_.workspace(g, threads_);
    return cpu::conv2d_workspace_floats(g, threads_);
  }
  void conv2d_forward(const Conv2dGeom& g, const float* x, const float* weight, const float* bias,
                      float* y, float* workspace) override {
    if (direct(g)) return direct_.forward(g, x, weight, bias, y, workspace, threads_);
    cpu::conv2d_forward(g, x, weight, bias, y, workspace, threads_);
  }
  void conv2d_backward_data(const Conv2dGeom& g, const float* dy, const float* weight, float* dx,
                            float* workspace) override {
    if (direct(g)) return direct_.backward_data(g, dy, weight, dx, workspace, threads_);
    cpu::conv2d_backward_data(g, dy, weight, dx, workspace, threads_);
  }
  void conv2d_backward_weights(const Conv2dGeom& g, const float* x, const float* dy, float* dweight,
                               float* dbias, float* workspace) override {
    if (direct(g)) return direct_.backward_weights(g, x, dy, dweight, dbias, workspace, threads_);
    cpu::conv2d_backward_weights(g, x, dy, dweight, dbias, workspace, threads_);
  }

  void max_pool_forward(const PoolGeom& g, const float* x, float* y, int32_t* argmax) override {
    cpu::max_pool_forward(g, x, y, argmax, threads_);
  }
  void max_pool_backward(const PoolGeom& g, const float* dy, const int32_t* argmax,
                         float* dx) override {
    cpu::max_pool_backward(g, dy, argmax, dx, threads_);
  }

  void relu_forward(std::size_t n, const float* x, float* y) override {
    cpu::relu_forward(n, x, y, threads_);
  }
  void relu_backward(std::size_t n, const float* y, const float* dy, float* dx) override {
    cpu::relu_backward(n, y, dy, dx, threads_);
  }

  void batch_norm_stats(const ChannelGeom& g, const float* x, float* sum, float* sumsq) override {
    cpu::batch_norm_stats(g, x, sum, sumsq, threads_);
  }
  void batch_norm_finalize(int c, double count, const float* sum, const float* sumsq, float epsilon,
                           float decay, float* mean, float* invstd, float* running_mean,
                           float* running_var) override {
    cpu::batch_norm_finalize(c, count, sum, sumsq, epsilon, decay, mean, invstd, running_mean,
                             running_var);
  }
  void batch_norm_inference_params(int c, const float* running_mean, const float* running_var,
                                   float epsilon, float* mean, float* invstd) override {
    cpu::batch_norm_inference_params(c, running_mean, running_var, epsilon, mean, invstd);
  }
  void batch_norm_apply(const ChannelGeom& g, const float* x, const float* mean,
                        const float* invstd, const float* gamma, const float* beta,
                        float* y) override {
    cpu::batch_norm_apply(g, x, mean, invstd, gamma, beta, y, threads_);
  }
  void batch_norm_backward_reduce(const ChannelGeom& g, const float* dy, const float* x,
                                  const float* mean, const float* invstd, float* sum_dy,
                                  float* sum_dy_xhat) override {
    cpu::batch_norm_backward_reduce(g, dy, x, mean, invstd, sum_dy, sum_dy_xhat, threads_);
  }
  void batch_norm_backward_apply(const ChannelGeom& g, const float* dy, const float* x,
                                 const float* mean, const float* invstd, const float* gamma,
                                 const float* sum_dy, const float* sum_dy_xhat, double count,
                                 float* dx) override {
    cpu::batch_norm_backward_apply(g, dy, x, mean, invstd, gamma, sum_dy, sum_dy_xhat, count, dx,
                                   threads_);
  }

  void dense_forward(int n, int in, int out, const float* x, const float* weight, const float* bias,
                     float* y) override {
    cpu::dense_forward(n, in, out, x, weight, bias, y, threads_);
  }
  void dense_backward_data(int n, int in, int out, const float* dy, const float* weight,
                           float* dx) override {
    cpu::dense_backward_data(n, in, out, dy, weight, dx, threads_);
  }
  void dense_backward_weights(int n, int in, int out, const float* x, const float* dy,
                              float* dweight, float* dbias) override {
    cpu::dense_backward_weights(n, in, out, x, dy, dweight, dbias, threads_);
  }

  void dropout_forward(int n, int per_sample, float rate, RngKey key, const StepScalars* step,
                       uint32_t first_sample, const float* x, float* y) override {
    cpu::dropout_forward(n, per_sample, rate, key, step_of(step), first_sample, x, y, threads_);
  }
  void dropout_backward(int n, int per_sample, float rate, RngKey key, const StepScalars* step,
                        uint32_t first_sample, const float* dy, float* dx) override {
    cpu::dropout_backward(n, per_sample, rate, key, step_of(step), first_sample, dy, dx, threads_);
  }

  void softmax_cross_entropy(int n, int k, const float* logits, const int32_t* labels,
                             float grad_scale, float* dlogits, float* metrics) override {
    cpu::softmax_cross_entropy(n, k, logits, labels, grad_scale, dlogits, metrics, threads_);
  }

  void adam_update(std::size_t n, std::size_t n_decay, const OptimizerStep& constants,
                   StepScalars* step, bool advance, float* params, const float* grads, float* m,
                   float* v) override {
    cpu::adam_update(n, n_decay, constants, values_of(step), params, grads, m, v, threads_);
    if (advance) advance_step(constants, step);
  }
  void sgd_update(std::size_t n, std::size_t n_decay, const OptimizerStep& constants,
                  StepScalars* step, bool advance, float* params, const float* grads,
                  float* velocity) override {
    cpu::sgd_update(n, n_decay, constants, values_of(step), params, grads, velocity, threads_);
    if (advance) advance_step(constants, step);
  }

  // Per-step values: this backend's memory is the host's, so they are read and written in place.
  void step_scalars_set(StepScalars* s, const StepScalars& values) override { *s = values; }

  void scale(std::size_t n, float alpha, float* x) override { cpu::scale(n, alpha, x, threads_); }
  void add(std::size_t n, const float* x, float* y) override { cpu::add(n, x, y, threads_); }

 private:
  bool direct(const Conv2dGeom& g) const { return native_ && cpu::native::direct_conv_supports(g); }
  // The step's values, which every caller keeps in this backend's memory (the host's).
  const StepScalars& values_of(const StepScalars* step) const {
    MNIST_CHECK(step, "{}: a step's values (StepScalars) are needed, got none", name());
    return *step;
  }
  uint32_t step_of(const StepScalars* step) const {
    return static_cast<uint32_t>(values_of(step).step);
  }
  static void advance_step(const OptimizerStep& constants, StepScalars* step) {
    *step = step_scalars_next(*step, constants.beta1, constants.beta2, constants.configured_epsilon,
                              constants.tensorflow_epsilon);
  }

  int index_;
  int threads_;
  bool native_;
  cpu::native::DirectConvKernels<float> direct_{};
  CpuFusedKernels fused_;
};

}  // namespace

std::vector<Engine> cpu_engines() {
  std::vector<Engine> out;
  for (Engine e : engines_run_by(/*cuda=*/false)) {
#if !defined(MNIST_WITH_BLAS)
    if (e == Engine::blas) continue;
#endif
    out.push_back(e);
  }
  return out;
}

std::unique_ptr<Backend> make_cpu_backend(const BackendOptions& options) {
  const std::vector<Engine> engines = cpu_engines();
  if (std::find(engines.begin(), engines.end(), options.engine) == engines.end()) {
    MNIST_THROW(RuntimeError,
                "cpu{}: engine '{}' is not available on the CPU backend; allowed: {}{}",
                options.worker_index, to_string(options.engine), engine_names(engines),
                options.engine == Engine::blas ? " (this build has no OpenBLAS)"
                                               : " (it is a CUDA engine)");
  }
  if (options.threads < 0) {
    MNIST_THROW(RuntimeError, "cpu{}: threads = {} must be >= 0 (0 = all cores)",
                options.worker_index, options.threads);
  }
  return std::make_unique<CpuBackend>(options);
}

}  // namespace mnist
