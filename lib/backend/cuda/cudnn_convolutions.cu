// The cuDNN convolutions part (engine_parts.hpp) of engine "cudnn": cudnn_conv2d.hpp's calls for
// the geometries cuDNN takes, the hand-written kernels for the others. cuDNN runs each direction
// as its own call, so for its geometries the backend runs the chains (fuses() is false).
// Compiled only with cuDNN (lib/CMakeLists.txt).
#include <algorithm>
#include <memory>

#include "backend/cuda/cudnn_conv2d.hpp"
#include "backend/cuda/engine_parts.hpp"

namespace mnist::cuda {
namespace {

class CudnnConvolutions final : public Convolutions {
 public:
  explicit CudnnConvolutions(const StreamResources& r)
      : cudnn_(r.stream), hand_written_(make_hand_written_convolutions(r)) {}

  std::size_t workspace_floats(const Conv2dGeom& g) override {
    // The hand-written kernels' size too, for a geometry cuDNN hands back. Not through supports():
    // that plans under the workspace promised so far for this shape, which is what this call must
    // be free to raise (cudnn_conv2d.hpp).
    return std::max(hand_written_->workspace_floats(g), cudnn_.workspace_floats(g));
  }
  Conv2dAlgorithms algorithms(const Conv2dGeom& g) override { return cudnn_.algorithms(g); }
  void forward(const Conv2dGeom& g, const float* x, const float* weight, const float* bias,
               float* y, float* workspace) override {
    if (!cudnn_.supports(g)) return hand_written_->forward(g, x, weight, bias, y, workspace);
    cudnn_.forward(g, x, weight, bias, y, workspace);
  }
  void backward_data(const Conv2dGeom& g, const float* dy, const float* weight, float* dx,
                     float* workspace) override {
    if (!cudnn_.supports(g)) return hand_written_->backward_data(g, dy, weight, dx, workspace);
    cudnn_.backward_data(g, dy, weight, dx, workspace);
  }
  void backward_weights(const Conv2dGeom& g, const float* x, const float* dy, float* dweight,
                        float* dbias, float* workspace) override {
    if (!cudnn_.supports(g))
      return hand_written_->backward_weights(g, x, dy, dweight, dbias, workspace);
    cudnn_.backward_weights(g, x, dy, dweight, dbias, workspace);
  }
  bool fuses(const Conv2dGeom& g) override { return !cudnn_.supports(g); }
  void forward_stats(const Conv2dGeom& g, const float* x, const float* weight, const float* bias,
                     float* y, float* sum, float* sumsq, const BatchNormFinalize* bn,
                     float* workspace) override {
    hand_written_->forward_stats(g, x, weight, bias, y, sum, sumsq, bn, workspace);
  }
  void backward(const Conv2dGeom& g, const float* x, const float* dy, const float* weight,
                float* dweight, float* dbias, float* dx, float* workspace) override {
    hand_written_->backward(g, x, dy, weight, dweight, dbias, dx, workspace);
  }

 private:
  CudnnConv2d cudnn_;
  std::unique_ptr<Convolutions> hand_written_;
};

}  // namespace

std::unique_ptr<Convolutions> make_cudnn_convolutions(const StreamResources& r) {
  return std::make_unique<CudnnConvolutions>(r);
}

}  // namespace mnist::cuda
