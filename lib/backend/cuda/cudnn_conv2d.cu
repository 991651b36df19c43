// cuDNN convolution engine. One Plan per geometry (descriptors + chosen algorithms + workspace
// size) is built on first use and cached, so steady-state calls only launch.
#include "backend/cuda/cudnn_conv2d.hpp"

#include <algorithm>
#include <limits>
#include <string>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/stream_counts.cuh"

namespace mnist::cuda {

struct CudnnConv2d::Plan {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr, bias = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  bool supported = false;
  const char* fallback = "";  // why the native kernels run, when !supported
  cudnnConvolutionFwdAlgo_t fwd_algo{};
  cudnnConvolutionBwdDataAlgo_t data_algo{};
  cudnnConvolutionBwdFilterAlgo_t filter_algo{};
  std::size_t workspace_bytes = 0;
  std::size_t limit_bytes = 0;  // the workspace limit this plan was made under

  ~Plan() {
    // Destructors never throw: a failure to destroy a descriptor is not actionable here.
    if (x) cudnnDestroyTensorDescriptor(x);
    if (y) cudnnDestroyTensorDescriptor(y);
    if (bias) cudnnDestroyTensorDescriptor(bias);
    if (w) cudnnDestroyFilterDescriptor(w);
    if (conv) cudnnDestroyConvolutionDescriptor(conv);
  }
};

namespace {

constexpr std::size_t kNoLimit = std::numeric_limits<std::size_t>::max();

// The FFT and Winograd algorithms transform the operands, multiply in the transformed domain and
// transform back. They are deterministic, but their float error is that of the transforms (it
// grows with the tile or FFT size and the operands' magnitudes), not the bound of a direct sum of
// products that the conv tests' tolerances are derived from, and cuDNN documents no bound for it.
// No H200 measurement says how large it is for these shapes, so they are not used: a direct
// algorithm (explicit or implicit GEMM, or direct) is always offered for float NCHW.
bool transform_domain(cudnnConvolutionFwdAlgo_t a) {
  return a == CUDNN_CONVOLUTION_FWD_ALGO_FFT || a == CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING ||
         a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD ||
         a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED;
}
bool transform_domain(cudnnConvolutionBwdDataAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT ||
         a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING ||
         a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD ||
         a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED;
}
bool transform_domain(cudnnConvolutionBwdFilterAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT ||
         a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING ||
         a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD ||
         a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED;
}

// Names as cudnn_ops.h spells the enumerators, without their common prefix (indexed by value).
const char* algo_name(cudnnConvolutionFwdAlgo_t a) {
  static const char* const names[] = {
      "IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT", "FFT", "FFT_TILING",
      "WINOGRAD",      "WINOGRAD_NONFUSED"};
  static_assert(sizeof names / sizeof *names == CUDNN_CONVOLUTION_FWD_ALGO_COUNT);
  return a >= 0 && a < CUDNN_CONVOLUTION_FWD_ALGO_COUNT ? names[a] : "unknown forward algorithm";
}
const char* algo_name(cudnnConvolutionBwdDataAlgo_t a) {
  static const char* const names[] = {"ALGO_0",     "ALGO_1",   "FFT",
                                      "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
  static_assert(sizeof names / sizeof *names == CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT);
  return a >= 0 && a < CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT ? names[a]
                                                             : "unknown backward-data algorithm";
}
const char* algo_name(cudnnConvolutionBwdFilterAlgo_t a) {
  static const char* const names[] = {
      "ALGO_0", "ALGO_1", "FFT", "ALGO_3", "WINOGRAD", "WINOGRAD_NONFUSED", "FFT_TILING"};
  static_assert(sizeof names / sizeof *names == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT);
  return a >= 0 && a < CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT
             ? names[a]
             : "unknown backward-filter algorithm";
}

// Heuristics rank the algorithms; take the first direct one (see transform_domain) that works and
// whose workspace fits `limit_bytes` (`bytes(algo)` asks cuDNN), preferring deterministic ones so
// two runs of the same experiment match bit for bit. Returns false when none fits.
template <class Perf, class Algo, class Bytes>
bool pick(const Perf* results, int count, std::size_t limit_bytes, Bytes bytes, Algo* algo,
          std::size_t* algo_bytes) {
  for (int pass = 0; pass < 2; ++pass) {
    for (int i = 0; i < count; ++i) {
      if (results[i].status != CUDNN_STATUS_SUCCESS) continue;
      if (transform_domain(results[i].algo)) continue;
      if (pass == 0 && results[i].determinism != CUDNN_DETERMINISTIC) continue;
      const std::size_t need = bytes(results[i].algo);
      if (need > limit_bytes) continue;
      *algo = results[i].algo;
      *algo_bytes = need;
      return true;
    }
  }
  return false;
}

std::array<int, 12> shape_key(const Conv2dGeom& g) {
  return {g.c,        g.h,        g.w,     g.k,     g.kh,    g.kw,
          g.stride_h, g.stride_w, g.pad_h, g.pad_w, g.out_h, g.out_w};
}

std::array<int, 13> plan_key(const Conv2dGeom& g) {
  return {g.n,        g.c,        g.h,     g.w,     g.k,     g.kh,   g.kw,
          g.stride_h, g.stride_w, g.pad_h, g.pad_w, g.out_h, g.out_w};
}

}  // namespace

CudnnConv2d::CudnnConv2d(cudaStream_t stream) : stream_(stream) {
  MNIST_CUDNN_CHECK(cudnnCreate(&handle_));
  const cudnnStatus_t status = cudnnSetStream(handle_, stream);
  if (status != CUDNN_STATUS_SUCCESS) {
    cudnnDestroy(handle_);
    MNIST_CUDNN_CHECK(status);
  }
}

CudnnConv2d::~CudnnConv2d() {
  plans_.clear();
  if (handle_) cudnnDestroy(handle_);
}

std::size_t CudnnConv2d::limit_bytes(const Conv2dGeom& g) const {
  const auto promised = promised_bytes_.find(shape_key(g));
  return promised == promised_bytes_.end() ? kNoLimit : promised->second;
}

CudnnConv2d::Plan& CudnnConv2d::plan(const Conv2dGeom& g) {
  const std::size_t limit = limit_bytes(g);
  std::unique_ptr<Plan>& slot = plans_[plan_key(g)];
  // A plan made under another promise may have chosen differently (or fallen back): re-make it.
  if (!slot || slot->limit_bytes != limit) slot = make_plan(g, limit);
  return *slot;
}

std::unique_ptr<CudnnConv2d::Plan> CudnnConv2d::make_plan(const Conv2dGeom& g, std::size_t limit) {
  auto p = std::make_unique<Plan>();
  p->limit_bytes = limit;
  // cuDNN refuses empty tensors (BAD_PARAM); the native kernels handle them, so fall back.
  if (g.n <= 0 || g.c <= 0 || g.k <= 0 || g.out_h <= 0 || g.out_w <= 0) {
    p->fallback = "native (empty tensor: cuDNN refuses it)";
    return p;
  }
  MNIST_CUDNN_CHECK(cudnnCreateTensorDescriptor(&p->x));
  MNIST_CUDNN_CHECK(cudnnCreateTensorDescriptor(&p->y));
  MNIST_CUDNN_CHECK(cudnnCreateTensorDescriptor(&p->bias));
  MNIST_CUDNN_CHECK(cudnnCreateFilterDescriptor(&p->w));
  MNIST_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&p->conv));
  MNIST_CUDNN_CHECK(
      cudnnSetTensor4dDescriptor(p->x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, g.n, g.c, g.h, g.w));
  MNIST_CUDNN_CHECK(
      cudnnSetFilter4dDescriptor(p->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, g.k, g.c, g.kh, g.kw));
  MNIST_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(p->conv, g.pad_h, g.pad_w, g.stride_h,
                                                    g.stride_w, 1, 1, CUDNN_CROSS_CORRELATION,
                                                    CUDNN_DATA_FLOAT));
  // FMA only: the default lets cuDNN use TF32 tensor cores on sm_80+, 10-bit mantissas.
  MNIST_CUDNN_CHECK(cudnnSetConvolutionMathType(p->conv, CUDNN_FMA_MATH));
  int n = 0, c = 0, h = 0, w = 0;
  MNIST_CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(p->conv, p->x, p->w, &n, &c, &h, &w));
  if (h != g.out_h || w != g.out_w) {
    p->fallback = "native (asymmetric padding: cuDNN pads both sides alike)";
    return p;
  }
  MNIST_CUDNN_CHECK(cudnnSetTensor4dDescriptor(p->y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, g.n, g.k,
                                               g.out_h, g.out_w));
  MNIST_CUDNN_CHECK(
      cudnnSetTensor4dDescriptor(p->bias, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, g.k, 1, 1));
  // Callers size ONE workspace from workspace_floats() at their largest batch and then run smaller
  // batches (eval tails, a training slice below the eval batch) in it. cuDNN may pick another
  // algorithm with a LARGER workspace for a smaller batch, and it trusts the size we pass, so a
  // plan for a shape that was promised a workspace must fit in it (`limit`); otherwise the native
  // kernels run, whose workspace only shrinks with the batch.
  constexpr int kMaxAlgos = 16;
  int count = 0;
  std::size_t fwd_bytes = 0, data_bytes = 0, filter_bytes = 0;
  cudnnConvolutionFwdAlgoPerf_t fwd[kMaxAlgos];
  MNIST_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(handle_, p->x, p->w, p->conv, p->y,
                                                           kMaxAlgos, &count, fwd));
  const bool fwd_ok = pick(
      fwd, count, limit,
      [&](cudnnConvolutionFwdAlgo_t algo) {
        std::size_t bytes = 0;
        MNIST_CUDNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(handle_, p->x, p->w, p->conv,
                                                                  p->y, algo, &bytes));
        return bytes;
      },
      &p->fwd_algo, &fwd_bytes);
  cudnnConvolutionBwdDataAlgoPerf_t data[kMaxAlgos];
  MNIST_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(handle_, p->w, p->y, p->conv, p->x,
                                                                kMaxAlgos, &count, data));
  const bool data_ok = pick(
      data, count, limit,
      [&](cudnnConvolutionBwdDataAlgo_t algo) {
        std::size_t bytes = 0;
        MNIST_CUDNN_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(handle_, p->w, p->y, p->conv,
                                                                       p->x, algo, &bytes));
        return bytes;
      },
      &p->data_algo, &data_bytes);
  cudnnConvolutionBwdFilterAlgoPerf_t filter[kMaxAlgos];
  MNIST_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(handle_, p->x, p->y, p->conv,
                                                                  p->w, kMaxAlgos, &count, filter));
  const bool filter_ok = pick(
      filter, count, limit,
      [&](cudnnConvolutionBwdFilterAlgo_t algo) {
        std::size_t bytes = 0;
        MNIST_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(
            handle_, p->x, p->y, p->conv, p->w, algo, &bytes));
        return bytes;
      },
      &p->filter_algo, &filter_bytes);
  if (!fwd_ok || !data_ok || !filter_ok) {
    // Nothing within the promise is not an error (the native kernels run); with no limit it means
    // cuDNN has no direct algorithm at all for this convolution.
    MNIST_CHECK(limit != kNoLimit,
                "cuDNN offers no usable direct {} algorithm for the convolution n={} c={} {}x{} -> "
                "k={} {}x{} (kernel {}x{}, stride {}x{}, pad {}x{})",
                !fwd_ok    ? "forward"
                : !data_ok ? "backward-data"
                           : "backward-filter",
                g.n, g.c, g.h, g.w, g.k, g.out_h, g.out_w, g.kh, g.kw, g.stride_h, g.stride_w,
                g.pad_h, g.pad_w);
    p->fallback = "native (no cuDNN algorithm within the workspace promised for this shape)";
    return p;
  }
  p->workspace_bytes = std::max({fwd_bytes, data_bytes, filter_bytes});
  p->supported = true;
  return p;
}

bool CudnnConv2d::supports(const Conv2dGeom& g) {
  return plan(g).supported;
}

std::size_t CudnnConv2d::workspace_floats(const Conv2dGeom& g) {
  // Planned without the shape's old promise: a promise sized at a small batch (n=1 may need no
  // workspace at all) must not keep a larger batch from its best algorithm.
  std::unique_ptr<Plan> best = make_plan(g, kNoLimit);
  const auto promised = promised_bytes_.find(shape_key(g));
  if (!best->supported) {
    return promised == promised_bytes_.end()
               ? 0
               : (promised->second + sizeof(float) - 1) / sizeof(float);
  }
  std::size_t& bytes = promised_bytes_[shape_key(g)];
  bytes = std::max(bytes, best->workspace_bytes);
  // Under the new promise, pick() would choose what it chose with no limit (that choice fits), so
  // this plan is the one plan() would make now. Plans of other batch sizes made under the old
  // promise are re-made on their next call (plan() compares limits).
  best->limit_bytes = bytes;
  plans_[plan_key(g)] = std::move(best);
  return (bytes + sizeof(float) - 1) / sizeof(float);
}

Conv2dAlgorithms CudnnConv2d::algorithms(const Conv2dGeom& g) {
  const Plan& p = plan(g);
  if (!p.supported) return Conv2dAlgorithms{p.fallback, p.fallback, p.fallback};
  return Conv2dAlgorithms{algo_name(p.fwd_algo), algo_name(p.data_algo), algo_name(p.filter_algo)};
}

void CudnnConv2d::forward(const Conv2dGeom& g, const float* x, const float* weight,
                          const float* bias, float* y, float* workspace) {
  const Plan& p = plan(g);
  const float one = 1.0f, zero = 0.0f;
  // beta = 0: cuDNN does not read y, so a poisoned (NaN) output is fully overwritten.
  MNIST_CUDNN_CHECK(cudnnConvolutionForward(handle_, &one, p.x, x, p.w, weight, p.conv, p.fwd_algo,
                                            workspace, p.workspace_bytes, &zero, p.y, y));
  count_library_call(stream_);
  if (bias) {
    MNIST_CUDNN_CHECK(cudnnAddTensor(handle_, &one, p.bias, bias, &one, p.y, y));
    count_library_call(stream_);
  }
  MNIST_CUDA_LAUNCH_CHECK(stream_, "cudnnConvolutionForward");
}

void CudnnConv2d::backward_data(const Conv2dGeom& g, const float* dy, const float* weight,
                                float* dx, float* workspace) {
  const Plan& p = plan(g);
  const float one = 1.0f, zero = 0.0f;
  MNIST_CUDNN_CHECK(cudnnConvolutionBackwardData(handle_, &one, p.w, weight, p.y, dy, p.conv,
                                                 p.data_algo, workspace, p.workspace_bytes, &zero,
                                                 p.x, dx));
  count_library_call(stream_);
  MNIST_CUDA_LAUNCH_CHECK(stream_, "cudnnConvolutionBackwardData");
}

void CudnnConv2d::backward_weights(const Conv2dGeom& g, const float* x, const float* dy,
                                   float* dweight, float* dbias, float* workspace) {
  const Plan& p = plan(g);
  const float one = 1.0f, zero = 0.0f;
  MNIST_CUDNN_CHECK(cudnnConvolutionBackwardFilter(handle_, &one, p.x, x, p.y, dy, p.conv,
                                                   p.filter_algo, workspace, p.workspace_bytes,
                                                   &zero, p.w, dweight));
  count_library_call(stream_);
  if (dbias) {
    MNIST_CUDNN_CHECK(cudnnConvolutionBackwardBias(handle_, &one, p.y, dy, &zero, p.bias, dbias));
    count_library_call(stream_);
  }
  MNIST_CUDA_LAUNCH_CHECK(stream_, "cudnnConvolutionBackwardFilter");
}

}  // namespace mnist::cuda
