#pragma once
// MNIST_MPI_CHECK(expr): turns an MPI error code into a RuntimeError naming the call, file, line,
// rank and host. Only for files compiled when MPI is built (it includes mpi.h); the calls it wraps
// must return errors rather than abort, so MPI_COMM_WORLD's handler is MPI_ERRORS_RETURN.

// Only MPI's C interface is used; its deprecated C++ bindings would only add warnings.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

namespace mnist::detail {
[[noreturn]] void throw_mpi_error(int code, const char* expr, const char* file, int line);
}  // namespace mnist::detail

#define MNIST_MPI_CHECK(expr)                                                       \
  do {                                                                              \
    const int mnist_mpi_code_ = (expr);                                             \
    if (mnist_mpi_code_ != MPI_SUCCESS)                                             \
      ::mnist::detail::throw_mpi_error(mnist_mpi_code_, #expr, __FILE__, __LINE__); \
  } while (0)
