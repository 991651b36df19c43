// Backend methods with a default: conv2d_backward and dense_backward compose the calls they stand
// for; the capture calls refuse on a backend that cannot capture.
// The fused blocks' chains are the reference FusedKernels (fused.cpp).
#include "backend/backend.hpp"

#include <algorithm>

#include "build_info.hpp"
#include "core/error.hpp"

namespace mnist {

Backend::Backend() : chains_(std::make_unique<FusedKernels>(*this)), fused_(chains_.get()) {}
Backend::~Backend() = default;

std::vector<Engine> cuda_engines() {
  std::vector<Engine> out;
  if (!MNIST_HAVE_CUDA) return out;
  for (Engine e : engines_run_by(/*cuda=*/true)) {
    if (e != Engine::cudnn || MNIST_HAVE_CUDNN) out.push_back(e);
  }
  return out;
}

namespace {
[[noreturn]] void no_capture(const Backend& b, const char* op) {
  MNIST_THROW(RuntimeError, "{}: {} needs a backend that captures (supports_capture is false)",
              b.name(), op);
}
}  // namespace

void Backend::begin_capture() {
  no_capture(*this, "begin_capture");
}
std::unique_ptr<Backend::Captured> Backend::end_capture() {
  no_capture(*this, "end_capture");
}
void Backend::replay(const Captured&) {
  no_capture(*this, "replay");
}

void Backend::conv2d_backward(const Conv2dGeom& g, const float* x, const float* dy,
                              const float* weight, float* dweight, float* dbias, float* dx,
                              float* workspace) {
  conv2d_backward_weights(g, x, dy, dweight, dbias, workspace);
  if (dx) conv2d_backward_data(g, dy, weight, dx, workspace);
}

}  // namespace mnist
