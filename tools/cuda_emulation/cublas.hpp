#pragma once
// Emulated cuBLAS: the calls the project's "cublas" engine makes, with cublasSgemm as a plain
// column-major reference product. It checks the project's side of each call (operations, leading
// dimensions, that every operand lies inside one device allocation) and computes the product the
// engine asked for, so the engine's transposes and strides are tested against the CPU oracle.
// It does not test cuBLAS itself: its kernels, its choice of algorithm, its TF32 or tensor-core
// paths and its rounding only run on a real GPU.

#include <string>

#include "cuda_emulation/execution.hpp"
#include "cuda_emulation/runtime.hpp"

enum cublasStatus_t {
  CUBLAS_STATUS_SUCCESS = 0,
  CUBLAS_STATUS_NOT_INITIALIZED = 1,
  CUBLAS_STATUS_INVALID_VALUE = 7,
  CUBLAS_STATUS_EXECUTION_FAILED = 13,
};
enum cublasOperation_t { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1 };
enum cublasMath_t { CUBLAS_DEFAULT_MATH = 0 };
struct cublasContext {
  int device;
  cudaStream_t stream;
};
using cublasHandle_t = cublasContext*;

inline const char* cublasGetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}
inline cublasStatus_t cublasCreate(cublasHandle_t* handle) {
  *handle = new cublasContext{mnist::cuda::emulation::detail::current_device, nullptr};
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasDestroy(cublasHandle_t handle) {
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}
inline cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t) {
  return handle ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_NOT_INITIALIZED;
}

namespace mnist::cuda::emulation::detail {
// A column-major `rows` x `cols` operand with leading dimension `ld` lies in one device allocation.
inline bool operand_in_device_memory(const float* p, int rows, int cols, int ld) {
  if (rows == 0 || cols == 0) return true;
  const std::size_t extent = (static_cast<std::size_t>(cols) - 1) * ld + rows;
  return device_range(p, extent * sizeof(float));
}
inline cublasStatus_t gemm_failure(const std::string& what) {
  std::fprintf(stderr, "emulated cuBLAS: cublasSgemm: %s\n", what.c_str());
  return CUBLAS_STATUS_EXECUTION_FAILED;
}
}  // namespace mnist::cuda::emulation::detail

// C = alpha op(A) op(B) + beta C, column-major: op(A) is m x k, op(B) k x n, C m x n. Each element
// is a float sum of fused multiply-adds in k order. beta = 0 never reads C (it may hold NaN).
inline cublasStatus_t cublasSgemm(cublasHandle_t handle, cublasOperation_t op_a,
                                  cublasOperation_t op_b, int m, int n, int k, const float* alpha,
                                  const float* a, int lda, const float* b, int ldb,
                                  const float* beta, float* c, int ldc) {
  namespace d = mnist::cuda::emulation::detail;
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  const bool ta = op_a == CUBLAS_OP_T, tb = op_b == CUBLAS_OP_T;
  if (m < 0 || n < 0 || k < 0 || lda < std::max(1, ta ? k : m) || ldb < std::max(1, tb ? n : k) ||
      ldc < std::max(1, m))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (handle->device != d::current_device)
    return d::gemm_failure("handle of GPU " + std::to_string(handle->device) + " used while GPU " +
                           std::to_string(d::current_device) + " is current");
  if (!d::operand_in_device_memory(a, ta ? k : m, ta ? m : k, lda))
    return d::gemm_failure("A (" + std::to_string(ta ? k : m) + " x " + std::to_string(ta ? m : k) +
                           ", lda " + std::to_string(lda) +
                           ") is not inside one device allocation");
  if (!d::operand_in_device_memory(b, tb ? n : k, tb ? k : n, ldb))
    return d::gemm_failure("B (" + std::to_string(tb ? n : k) + " x " + std::to_string(tb ? k : n) +
                           ", ldb " + std::to_string(ldb) +
                           ") is not inside one device allocation");
  if (!d::operand_in_device_memory(c, m, n, ldc))
    return d::gemm_failure("C (" + std::to_string(m) + " x " + std::to_string(n) + ", ldc " +
                           std::to_string(ldc) + ") is not inside one device allocation");
  if (d::sticky_error() != cudaSuccess) return CUBLAS_STATUS_EXECUTION_FAILED;
  // alpha and beta are host pointers (the default pointer mode): read at the call, as cuBLAS does.
  const float alpha_value = *alpha, beta_value = *beta;
  auto product = [=] {
    for (int j = 0; j < n; ++j) {
      for (int i = 0; i < m; ++i) {
        float sum = 0.0f;
        for (int p = 0; p < k; ++p) {
          const float x = ta ? a[static_cast<std::size_t>(i) * lda + p]
                             : a[static_cast<std::size_t>(p) * lda + i];
          const float y = tb ? b[static_cast<std::size_t>(p) * ldb + j]
                             : b[static_cast<std::size_t>(j) * ldb + p];
          sum = fmaf(x, y, sum);
        }
        float& out = c[static_cast<std::size_t>(j) * ldc + i];
        out = beta_value == 0.0f ? alpha_value * sum : alpha_value * sum + beta_value * out;
      }
    }
    return cudaSuccess;
  };
  // In a capturing stream the product is one kernel node of the graph, computed on each replay.
  if (d::capturing(handle->stream))
    return d::record(handle->stream, cudaGraphNodeTypeKernel, "cublasSgemm", product) == cudaSuccess
               ? CUBLAS_STATUS_SUCCESS
               : CUBLAS_STATUS_EXECUTION_FAILED;
  product();
  return CUBLAS_STATUS_SUCCESS;
}
