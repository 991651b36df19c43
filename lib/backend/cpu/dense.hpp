#pragma once
// Fully connected layer; contracts as Backend::dense_*.
//
// x[n, in], weight[out, in], bias[out] or nullptr, y/dy[n, out]. Threads: forward and
// backward_data split the batch rows into contiguous chunks (one GEMM per thread);
// backward_weights splits the output units (rows of dweight), so each thread sums over the whole
// batch for its own rows and no partial sums need combining.

namespace mnist::cpu {

// Assigns y = x * weight^T + bias.
template <class T>
void dense_forward(int n, int in, int out, const T* x, const T* weight, const T* bias, T* y,
                   int threads);

// Assigns dx[n, in] = dy * weight.
template <class T>
void dense_backward_data(int n, int in, int out, const T* dy, const T* weight, T* dx, int threads);

// Assigns dweight[out, in] = dy^T * x and, when not nullptr, dbias[out] = column sums of dy.
template <class T>
void dense_backward_weights(int n, int in, int out, const T* x, const T* dy, T* dweight, T* dbias,
                            int threads);

}  // namespace mnist::cpu
