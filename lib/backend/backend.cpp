// Backend methods with a default: conv2d_backward, dense_backward and adam_update_and_advance
// compose the calls they stand for; the capture calls refuse on a backend that cannot capture.
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

void Backend::dense_backward(int n, int in, int out, const float* x, const float* dy,
                             const float* weight, float* dweight, float* dbias, float* dx) {
  dense_backward_weights(n, in, out, x, dy, dweight, dbias);
  if (dx) dense_backward_data(n, in, out, dy, weight, dx);
}

void Backend::gather(const BatchGather& batch, int n) {
  if (batch.step)
    gather_batch(batch.images, batch.labels, batch.pixels, batch.ring, batch.ring_steps, batch.step,
                 n, batch.x, batch.y);
  else
    gather_batch(batch.images, batch.labels, batch.pixels, batch.ring, n, batch.x, batch.y);
}

void Backend::adam_update_and_advance(std::size_t n, std::size_t n_decay,
                                      const OptimizerStep& constants, StepScalars* s, float* params,
                                      const float* grads, float* m, float* v, double epsilon,
                                      bool tensorflow_epsilon) {
  adam_update(n, n_decay, constants, s, params, grads, m, v);
  step_scalars_advance(s, constants.beta1, constants.beta2, epsilon, tensorflow_epsilon);
}

}  // namespace mnist
