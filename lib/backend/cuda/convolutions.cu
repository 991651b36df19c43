// The hand-written convolutions part (engine_parts.hpp): the direct kernels for the geometries
// they take, else the tiled implicit GEMM (conv2d.cu decides which, per call).
#include <algorithm>
#include <memory>
#include <string>

#include "backend/cuda/conv2d.hpp"
#include "backend/cuda/engine_parts.hpp"

namespace mnist::cuda {
namespace {

class HandWrittenConvolutions final : public Convolutions {
 public:
  explicit HandWrittenConvolutions(const StreamResources& r) : r_(r) {}

  std::size_t workspace_floats(const Conv2dGeom& g) override {
    return std::max<std::size_t>(conv2d_workspace_floats(g), 1);
  }
  Conv2dAlgorithms algorithms(const Conv2dGeom& g) override {
    const std::string name = conv2d_implementation(g);
    return Conv2dAlgorithms{name, name, name};
  }
  void forward(const Conv2dGeom& g, const float* x, const float* weight, const float* bias,
               float* y, float*) override {
    conv2d_forward(r_.stream, g, x, weight, bias, y);
  }
  void backward_data(const Conv2dGeom& g, const float* dy, const float* weight, float* dx,
                     float*) override {
    conv2d_backward_data(r_.stream, g, dy, weight, dx);
  }
  void backward_weights(const Conv2dGeom& g, const float* x, const float* dy, float* dweight,
                        float* dbias, float* workspace) override {
    conv2d_backward_weights(r_.stream, g, x, dy, dweight, dbias, r_.block_counter, workspace,
                            r_.scratch);
  }
  // Every geometry: the direct kernels take the sums (and both directions) in one launch, and the
  // implicit GEMM path runs the same chain itself (conv2d.cu).
  bool fuses(const Conv2dGeom&) override { return true; }
  void forward_stats(const Conv2dGeom& g, const float* x, const float* weight, const float* bias,
                     float* y, float* sum, float* sumsq, const BatchNormFinalize* bn,
                     float* workspace) override {
    conv2d_forward_stats(r_.stream, g, x, weight, bias, y, sum, sumsq, bn, r_.block_counter,
                         workspace, r_.scratch);
  }
  void backward(const Conv2dGeom& g, const float* x, const float* dy, const float* weight,
                float* dweight, float* dbias, float* dx, float* workspace) override {
    conv2d_backward(r_.stream, g, x, dy, weight, dweight, dbias, dx, r_.block_counter, workspace,
                    r_.scratch);
  }

 private:
  StreamResources r_;
};

}  // namespace

std::unique_ptr<Convolutions> make_hand_written_convolutions(const StreamResources& r) {
  return std::make_unique<HandWrittenConvolutions>(r);
}

}  // namespace mnist::cuda
