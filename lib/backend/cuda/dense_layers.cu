// The dense-layer parts (engine_parts.hpp): the hand-written SGEMMs (dense.cu) and cuBLAS.
#include <cublas_v2.h>

#include <memory>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/dense.hpp"
#include "backend/cuda/elementwise.hpp"
#include "backend/cuda/engine_parts.hpp"
#include "backend/cuda/stream_counts.cuh"

namespace mnist::cuda {
namespace {

class HandWrittenDenseLayers final : public DenseLayers {
 public:
  explicit HandWrittenDenseLayers(const StreamResources& r) : r_(r) {}
  void forward(int n, int in, int out, const float* x, const float* weight, const float* bias,
               float* y) override {
    dense_forward(r_.stream, n, in, out, x, weight, bias, y);
  }
  void backward_data(int n, int in, int out, const float* dy, const float* weight,
                     float* dx) override {
    dense_backward_data(r_.stream, n, in, out, dy, weight, dx);
  }
  void backward_weights(int n, int in, int out, const float* x, const float* dy, float* dweight,
                        float* dbias) override {
    dense_backward_weights(r_.stream, n, in, out, x, dy, dweight, dbias, r_.scratch);
  }
  bool fuses_backward() const override { return true; }
  void backward(int n, int in, int out, const float* x, const float* dy, const float* weight,
                float* dweight, float* dbias, float* dx) override {
    dense_backward(r_.stream, n, in, out, x, dy, weight, dweight, dbias, dx, r_.scratch);
  }

 private:
  StreamResources r_;
};

// cuBLAS is column-major: a row-major [rows, cols] matrix is its column-major transpose, so each
// product below is written for the transposes (y^T = W x^T, dx^T = W^T dy^T, dW^T = x^T dy).
// Empty products go to the hand-written kernels, which write the zeros or nothing the contract
// wants without a library call.
class CublasDenseLayers final : public DenseLayers {
 public:
  explicit CublasDenseLayers(const StreamResources& r) : r_(r), hand_written_(r) {
    MNIST_CUBLAS_CHECK(cublasCreate(&handle_));
    try {
      MNIST_CUBLAS_CHECK(cublasSetStream(handle_, r_.stream));
      // DEFAULT keeps FP32 products in FP32 (no TF32), so cuBLAS meets the same tolerances.
      MNIST_CUBLAS_CHECK(cublasSetMathMode(handle_, CUBLAS_DEFAULT_MATH));
    } catch (...) {
      cublasDestroy(handle_);
      throw;
    }
  }
  ~CublasDenseLayers() override { cublasDestroy(handle_); }
  CublasDenseLayers(const CublasDenseLayers&) = delete;
  CublasDenseLayers& operator=(const CublasDenseLayers&) = delete;

  void forward(int n, int in, int out, const float* x, const float* weight, const float* bias,
               float* y) override {
    if (n == 0 || out == 0) return hand_written_.forward(n, in, out, x, weight, bias, y);
    float beta = 0.0f;  // beta = 0: cuBLAS does not read y (it may hold NaN)
    if (bias) {
      broadcast_rows(r_.stream, n, out, bias, y);
      beta = 1.0f;
    }
    const float one = 1.0f;
    MNIST_CUBLAS_CHECK(cublasSgemm(handle_, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, &one, weight, in,
                                   x, in, &beta, y, out));
    count_library_call(r_.stream);
    MNIST_CUDA_LAUNCH_CHECK(r_.stream, "cublasSgemm (dense_forward)");
  }
  void backward_data(int n, int in, int out, const float* dy, const float* weight,
                     float* dx) override {
    if (n == 0 || in == 0) return hand_written_.backward_data(n, in, out, dy, weight, dx);
    const float one = 1.0f, zero = 0.0f;
    MNIST_CUBLAS_CHECK(cublasSgemm(handle_, CUBLAS_OP_N, CUBLAS_OP_N, in, n, out, &one, weight, in,
                                   dy, out, &zero, dx, in));
    count_library_call(r_.stream);
    MNIST_CUDA_LAUNCH_CHECK(r_.stream, "cublasSgemm (dense_backward_data)");
  }
  void backward_weights(int n, int in, int out, const float* x, const float* dy, float* dweight,
                        float* dbias) override {
    if (in == 0 || out == 0)
      return hand_written_.backward_weights(n, in, out, x, dy, dweight, dbias);
    const float one = 1.0f, zero = 0.0f;
    // k = n = 0 with beta = 0 gives zeros, as the contract (an empty sum) wants.
    MNIST_CUBLAS_CHECK(cublasSgemm(handle_, CUBLAS_OP_N, CUBLAS_OP_T, in, out, n, &one, x, in, dy,
                                   out, &zero, dweight, in));
    count_library_call(r_.stream);
    MNIST_CUDA_LAUNCH_CHECK(r_.stream, "cublasSgemm (dense_backward_weights)");
    if (dbias) dense_backward_bias(r_.stream, n, out, dy, dbias, r_.scratch);
  }
  // Two library calls, one per product: the backend runs the chain.
  bool fuses_backward() const override { return false; }
  void backward(int n, int in, int out, const float* x, const float* dy, const float* weight,
                float* dweight, float* dbias, float* dx) override {
    backward_weights(n, in, out, x, dy, dweight, dbias);
    if (dx) backward_data(n, in, out, dy, weight, dx);
  }

 private:
  StreamResources r_;
  HandWrittenDenseLayers hand_written_;
  cublasHandle_t handle_ = nullptr;
};

}  // namespace

std::unique_ptr<DenseLayers> make_hand_written_dense_layers(const StreamResources& r) {
  return std::make_unique<HandWrittenDenseLayers>(r);
}
std::unique_ptr<DenseLayers> make_cublas_dense_layers(const StreamResources& r) {
  return std::make_unique<CublasDenseLayers>(r);
}

}  // namespace mnist::cuda
