// make_engine_parts: engine_parts.hpp's table, the one place a CUDA engine becomes its kernels.
#include "backend/cuda/engine_parts.hpp"

#include "backend/cuda/fused_blocks.hpp"
#include "core/error.hpp"

namespace mnist::cuda {

EngineParts::EngineParts() = default;
EngineParts::EngineParts(EngineParts&&) noexcept = default;
EngineParts& EngineParts::operator=(EngineParts&&) noexcept = default;
EngineParts::~EngineParts() = default;

EngineParts make_engine_parts(Engine engine, Backend& backend, const StreamResources& r) {
  const std::string name = backend.name();
  EngineParts parts;
  switch (engine) {
    case Engine::native:
      parts.convolutions = make_hand_written_convolutions(r);
      parts.dense = make_hand_written_dense_layers(r);
      break;
    case Engine::cublas:
      parts.convolutions = make_hand_written_convolutions(r);
      parts.dense = make_cublas_dense_layers(r);
      break;
    case Engine::cudnn:
#if MNIST_HAVE_CUDNN
      parts.convolutions = make_cudnn_convolutions(r);
      parts.dense = make_cublas_dense_layers(r);
      break;
#else
      MNIST_THROW(RuntimeError, "{}: engine 'cudnn' needs a build with cuDNN", name);
#endif
    case Engine::fused:
      parts.convolutions = make_hand_written_convolutions(r);
      parts.dense = make_hand_written_dense_layers(r);
      parts.fused = std::make_unique<FusedBlocks>(backend, r, *parts.convolutions, *parts.dense);
      return parts;
    case Engine::blas:
      MNIST_THROW(RuntimeError, "{}: engine '{}' is not a CUDA engine", name, to_string(engine));
  }
  parts.fused = std::make_unique<EngineFusedKernels>(backend, r, *parts.convolutions, *parts.dense);
  return parts;
}

}  // namespace mnist::cuda
