#pragma once
// The seam between the backend-neutral network and the device that runs it.
//
// A Backend owns one device context (a CPU thread pool or a CUDA device + stream + library handles)
// and exposes every kernel the network needs, in float. CpuBackend forwards to the cpu:: kernels,
// CudaBackend to their cuda:: twins; both have the same contracts, written here once:
//   - pointers are device pointers of this backend (host memory for the CPU backend);
//   - "assign" outputs are fully overwritten (tests poison them first), "accumulate" outputs
//     are added to;
//   - calls are ordered on the backend's stream; nothing synchronises with the host unless
//     named so.
// No CUDA type appears here, so CPU-only code can include it.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/fused.hpp"
#include "backend/kernel_args.hpp"
#include "core/engine.hpp"
#include "core/rng.hpp"

namespace mnist {

enum class DeviceKind { cpu, cuda };

// Which implementation runs each direction of one convolution (Backend::conv2d_algorithms): a
// cuDNN algorithm's name ("IMPLICIT_PRECOMP_GEMM", "ALGO_1"), "direct" (the hand-written direct
// kernels for small channel counts) or "native" (the hand-written implicit GEMM), with the reason
// in parentheses when an engine that prefers cuDNN falls back to the hand-written kernels.
struct Conv2dAlgorithms {
  std::string forward = "native", backward_data = "native", backward_weights = "native";
};

// What a backend has asked of its device since it was made, counted where the host issues each
// call, never estimated (CudaBackend; see counts()). Differences of two readings give a step's.
struct LaunchCounts {
  // Kernel launches: every kernel the backend launches, each cuBLAS/cuDNN call counted as one
  // (the library may launch more: for those engines a lower bound), and on a graph replay every
  // kernel the graph holds.
  uint64_t kernels = 0;
  uint64_t library_calls = 0;  // of `kernels`, the cuBLAS/cuDNN (and NCCL) calls
  uint64_t copies = 0;         // memcpy and memset calls (and a replayed graph's)
  // Times the host waited for the device: stream or device synchronise, an event synchronise, a
  // device-to-host copy (it returns when done), a host-to-device copy from pageable memory (the
  // runtime may wait for a staging buffer).
  uint64_t host_syncs = 0;
  uint64_t graph_launches = 0;
};
inline LaunchCounts operator-(const LaunchCounts& a, const LaunchCounts& b) {
  return LaunchCounts{a.kernels - b.kernels, a.library_calls - b.library_calls, a.copies - b.copies,
                      a.host_syncs - b.host_syncs, a.graph_launches - b.graph_launches};
}

class Backend {
 public:
  Backend();
  virtual ~Backend();
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  virtual DeviceKind kind() const = 0;
  // Name used in logs and errors: "cpu0", "gpu1 (NVIDIA H200, 0000:19:00.0)".
  virtual std::string name() const = 0;
  // The stream every call of this backend is ordered on, as an opaque handle (a cudaStream_t for
  // CUDA, nullptr for the CPU backend), so communicators can order their collectives with the
  // backend's kernels without CUDA types in this header. Valid for the backend's lifetime.
  virtual void* stream_handle() const { return nullptr; }
  // Launches, copies and host waits so far on this backend's stream (communicators' kernels on it
  // included). The CPU backend reports zeros: it runs every op on the calling thread, so it has
  // no launches to count and never waits for a device.
  virtual LaunchCounts counts() const { return {}; }

  // The kernels that run a block of several ops in fewer launches (fused.hpp): this backend's
  // own, or the reference chains of the calls below. Valid for the backend's lifetime.
  FusedKernels& fused() const { return *fused_; }

  // ---- memory (bytes) -------------------------------------------------------------------------
  virtual void* allocate(std::size_t bytes) = 0;  // throws RuntimeError naming size and free memory
  virtual void release(void* ptr) noexcept = 0;
  virtual void copy_to_device(void* dst, const void* src,
                              std::size_t bytes) = 0;  // host -> backend
  virtual void copy_to_host(void* dst, const void* src,
                            std::size_t bytes) = 0;  // backend -> host; waits
  virtual void copy_on_device(void* dst, const void* src, std::size_t bytes) = 0;
  virtual void fill(float* dst, std::size_t n, float value) = 0;
  virtual void synchronize() = 0;  // waits until all queued work is done; rethrows device errors
  // Host memory the device can copy to and from without the host waiting (page-locked on CUDA),
  // for what a step captured once and replayed reads or writes on the host.
  virtual void* allocate_host(std::size_t bytes) = 0;
  virtual void release_host(void* ptr) noexcept = 0;
  // host memory from allocate_host -> backend, queued: the host may write src again only after
  // synchronize(). Unlike copy_to_device, it never asks where src lives (no driver query per
  // copy) and never waits.
  virtual void copy_to_device_async(void* dst, const void* src, std::size_t bytes) = 0;

  // ---- data -----------------------------------------------------------------------------------
  // The batch `batch` names for n samples: x[i, :] = images[indices[i], :] / 255 and
  // y[i] = labels[indices[i]] for i < n, indices = batch.ring + (s % batch.ring_steps) * n where s
  // is batch.step->step when the kernel runs (batch.step nullptr: s = 0, so batch.ring holds the
  // indices themselves). The ring form lets the batches of ring_steps steps be uploaded at once and
  // a step captured once and replayed take its own (Worker's captured step). Assigns batch.x,
  // batch.y; every pointer in `batch` is on the device.
  virtual void gather_batch(const BatchGather& batch, int n) = 0;

  // ---- convolution (Conv2dGeom; weights [k, c, kh, kw], bias [k] or nullptr) -------------------
  // Scratch each conv call may use, in floats; the caller passes a buffer at least this large.
  virtual std::size_t conv2d_workspace_floats(const Conv2dGeom& g) = 0;
  virtual void conv2d_forward(const Conv2dGeom& g, const float* x, const float* weight,
                              const float* bias, float* y, float* workspace) = 0;  // assigns y
  virtual void conv2d_backward_data(const Conv2dGeom& g, const float* dy, const float* weight,
                                    float* dx, float* workspace) = 0;  // assigns dx
  // Assigns dweight and (when not nullptr) dbias.
  virtual void conv2d_backward_weights(const Conv2dGeom& g, const float* x, const float* dy,
                                       float* dweight, float* dbias, float* workspace) = 0;
  // conv2d_backward_weights, then conv2d_backward_data when dx is not nullptr: a convolution's
  // backward. Engines may run both directions in one launch; the default makes the calls.
  virtual void conv2d_backward(const Conv2dGeom& g, const float* x, const float* dy,
                               const float* weight, float* dweight, float* dbias, float* dx,
                               float* workspace);
  // What the next conv2d call for `g` runs in each direction, for benchmarks, logs and tests.
  // Plans `g` as a call would (so it may query the library once) but launches nothing.
  virtual Conv2dAlgorithms conv2d_algorithms(const Conv2dGeom& g) {
    (void)g;
    return {};
  }

  // ---- max pooling (argmax: int32[n, c, out_h, out_w], flat index into the input plane) --------
  virtual void max_pool_forward(const PoolGeom& g, const float* x, float* y, int32_t* argmax) = 0;
  virtual void max_pool_backward(const PoolGeom& g, const float* dy, const int32_t* argmax,
                                 float* dx) = 0;  // assigns all of dx

  // ---- relu (elementwise over n values) --------------------------------------------------------
  virtual void relu_forward(std::size_t n, const float* x, float* y) = 0;
  // dx = dy where y > 0, else 0. y is the forward output (so it may be computed in place).
  virtual void relu_backward(std::size_t n, const float* y, const float* dy, float* dx) = 0;

  // ---- batch norm, split so that statistics can be all-reduced between the steps --------------
  // sum[c] = sum over (n, hw) of x, sumsq[c] = sum of x^2. Assigns.
  virtual void batch_norm_stats(const ChannelGeom& g, const float* x, float* sum, float* sumsq) = 0;
  // From sums over `count` values: mean[c], invstd[c] = 1/sqrt(var + eps) with the biased variance,
  // and running_mean/var = decay*running + (1-decay)*batch (running var takes the unbiased
  // variance, count/(count-1)). Assigns mean, invstd; updates running stats in place.
  virtual void batch_norm_finalize(int c, double count, const float* sum, const float* sumsq,
                                   float epsilon, float decay, float* mean, float* invstd,
                                   float* running_mean, float* running_var) = 0;
  // Evaluation: mean = running_mean, invstd = 1/sqrt(running_var + eps). Assigns.
  virtual void batch_norm_inference_params(int c, const float* running_mean,
                                           const float* running_var, float epsilon, float* mean,
                                           float* invstd) = 0;
  // y = (x - mean) * invstd * gamma + beta; gamma nullptr means 1, beta nullptr means 0. Assigns y.
  virtual void batch_norm_apply(const ChannelGeom& g, const float* x, const float* mean,
                                const float* invstd, const float* gamma, const float* beta,
                                float* y) = 0;
  // sum_dy[c] = sum dy, sum_dy_xhat[c] = sum dy * (x - mean) * invstd. Assigns.
  virtual void batch_norm_backward_reduce(const ChannelGeom& g, const float* dy, const float* x,
                                          const float* mean, const float* invstd, float* sum_dy,
                                          float* sum_dy_xhat) = 0;
  // dx = gamma * invstd * (dy - sum_dy/count - xhat * sum_dy_xhat/count), where the sums and count
  // cover the whole normalisation group (this slice, or the global batch for sync batch norm).
  virtual void batch_norm_backward_apply(const ChannelGeom& g, const float* dy, const float* x,
                                         const float* mean, const float* invstd, const float* gamma,
                                         const float* sum_dy, const float* sum_dy_xhat,
                                         double count, float* dx) = 0;

  // ---- dense: x[n, in], weight[out, in], bias[out] or nullptr, y[n, out] -----------------------
  virtual void dense_forward(int n, int in, int out, const float* x, const float* weight,
                             const float* bias, float* y) = 0;  // assigns y
  virtual void dense_backward_data(int n, int in, int out, const float* dy, const float* weight,
                                   float* dx) = 0;  // assigns dx
  virtual void dense_backward_weights(int n, int in, int out, const float* x, const float* dy,
                                      float* dweight, float* dbias) = 0;  // assigns
  // Both products in one call, where an engine fuses them: FusedKernels::dense_backward.

  // ---- dropout (inverted: kept values scaled by 1/(1-rate)) ------------------------------------
  // The mask of element e of the sample at global batch position first_sample + i is
  //   philox4x32(counter = (step, first_sample + i, e, 0), key) .v[0] -> uniform01 >= rate
  // so it depends only on (seed, layer, step, global sample, element). x, y: [n, per_sample].
  // The step is step->step (this backend's memory), read when the kernel runs.
  virtual void dropout_forward(int n, int per_sample, float rate, RngKey key,
                               const StepScalars* step, uint32_t first_sample, const float* x,
                               float* y) = 0;
  virtual void dropout_backward(int n, int per_sample, float rate, RngKey key,
                                const StepScalars* step, uint32_t first_sample, const float* dy,
                                float* dx) = 0;

  // ---- loss: softmax cross-entropy fused with accuracy -----------------------------------------
  // logits[n, k], labels int32[n]. Accumulates metrics[kLossSum] += sum of -log p(label),
  // metrics[kCorrect] += count of argmax == label (ties: lowest index), metrics[kSamples] += n.
  // When dlogits is not nullptr, assigns dlogits = (softmax - onehot) * grad_scale.
  virtual void softmax_cross_entropy(int n, int k, const float* logits, const int32_t* labels,
                                     float grad_scale, float* dlogits, float* metrics) = 0;

  // ---- optimizers over the flat buffers (n values, the first n_decay of them decayed) ----------
  // The step's values (learning rate, decay factor, bias corrections, epsilon) are read from
  // *step (this backend's memory) when the kernel runs; `constants` gives the rest (betas,
  // momentum, nesterov, l2, decoupled_wd; its lr, step and epsilon are not read). With `advance`,
  // the update then leaves the next step's values in *step, step_scalars_next(*step,
  // constants.beta1, constants.beta2, constants.configured_epsilon, constants.tensorflow_epsilon),
  // in the same launch (CUDA: its last block, once every block has read *step): the end of a step
  // captured once and replayed.
  virtual void adam_update(std::size_t n, std::size_t n_decay, const OptimizerStep& constants,
                           StepScalars* step, bool advance, float* params, const float* grads,
                           float* m, float* v) = 0;
  virtual void sgd_update(std::size_t n, std::size_t n_decay, const OptimizerStep& constants,
                          StepScalars* step, bool advance, float* params, const float* grads,
                          float* velocity) = 0;

  // ---- per-step values in backend memory (StepScalars, kernel_args.hpp) -----------------------
  // Assigns *s = values (a kernel argument on CUDA: no host memory, no host wait).
  virtual void step_scalars_set(StepScalars* s, const StepScalars& values) = 0;

  // ---- a step captured once and replayed (CUDA graphs) -----------------------------------------
  // Backends that return true from supports_capture() (CUDA) record the calls made between
  // begin_capture() and end_capture() instead of running them; replay() runs them again, in order,
  // with the arguments they had at the capture (so per-step values come from StepScalars). Only
  // device work can be captured: a call that makes the host wait (copy_to_host, synchronize, a
  // copy from pageable memory) or allocates fails the capture, and end_capture()
  // throws naming it. counts(): the calls made while capturing are not counted (nothing ran);
  // each replay counts one graph launch and the kernels and copies captured. Others throw.
  class Captured {
   public:
    virtual ~Captured() = default;
  };
  virtual bool supports_capture() const { return false; }
  virtual void begin_capture();
  virtual std::unique_ptr<Captured> end_capture();
  virtual void replay(const Captured& calls);

  // ---- helpers for reductions -----------------------------------------------------------------
  virtual void scale(std::size_t n, float alpha, float* x) = 0;   // x *= alpha
  virtual void add(std::size_t n, const float* x, float* y) = 0;  // y += x

 protected:
  // A backend with fused kernels of its own hands them over here, once, in its constructor; it
  // owns them and keeps them alive as long as itself.
  void use_fused(FusedKernels& fused) { fused_ = &fused; }

 private:
  std::unique_ptr<FusedKernels> chains_;  // the reference: every block as its chain of calls
  FusedKernels* fused_;
};

// How a backend is built. `engine` picks the implementation of the heavy ops (the engine table,
// with the backends that run each, is core/engine.cpp; what each CUDA engine is made of,
// backend/cuda/engine_parts.hpp).
// CUDA: native every kernel hand-written, one per op; cublas dense layers through cuBLAS;
//   cudnn convolutions through cuDNN, dense through cuBLAS; fused hand-written, with every block
//   of fused.hpp run by its fused kernels (docs/gpu_speed.md).
// CPU (cpu_engines()): native direct convolutions with vector kernels for the CPU's instruction
//   set; blas convolutions by im2col + OpenBLAS GEMM (only in builds with OpenBLAS).
struct BackendOptions {
  int worker_index = 0;
  int threads = 0;  // CPU: kernel threads for this worker (0 = all cores)
  Engine engine = Engine::native;
};

// The CPU engines of this build: native, and blas when it was built with OpenBLAS.
std::vector<Engine> cpu_engines();
// The CUDA engines of this build: native, cublas, fused, and cudnn when it was built with cuDNN
// (empty without CUDA).
std::vector<Engine> cuda_engines();

// Factories. make_cuda_backend throws a RuntimeError when the tool was built without CUDA, or when
// the device cannot be used (naming what was visible and CUDA_VISIBLE_DEVICES).
std::unique_ptr<Backend> make_cpu_backend(const BackendOptions& options);
std::unique_ptr<Backend> make_cuda_backend(int device_ordinal, const BackendOptions& options);

// Typed RAII view of backend memory; allocation happens here, never in the training step.
template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(Backend& backend, std::size_t count)
      : backend_(&backend),
        count_(count),
        data_(count ? static_cast<T*>(backend.allocate(count * sizeof(T))) : nullptr) {}
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& other) noexcept { swap(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    DeviceBuffer(std::move(other)).swap(*this);
    return *this;
  }
  ~DeviceBuffer() {
    if (data_) backend_->release(data_);
  }
  T* data() const { return data_; }
  std::size_t size() const { return count_; }
  std::size_t bytes() const { return count_ * sizeof(T); }
  void swap(DeviceBuffer& o) noexcept {
    std::swap(backend_, o.backend_);
    std::swap(count_, o.count_);
    std::swap(data_, o.data_);
  }

 private:
  Backend* backend_ = nullptr;
  std::size_t count_ = 0;
  T* data_ = nullptr;
};

}  // namespace mnist
