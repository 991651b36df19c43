// The Backend methods only some engines implement (see backend.hpp): the others refuse, naming
// the backend, so a model that asked for a fused block where fuses_conv_block() said no fails
// loudly instead of computing nothing.
#include "backend/backend.hpp"

#include "core/error.hpp"

namespace mnist {

namespace {
[[noreturn]] void no_fused_block(const Backend& b, const char* op) {
  MNIST_THROW(RuntimeError, "{}: {} is not implemented by this engine (fuses_conv_block is false)",
              b.name(), op);
}
}  // namespace

void Backend::bn_relu_pool_forward(const PoolGeom&, const float*, const float*, const float*,
                                   const float*, const float*, float*, uint8_t*) {
  no_fused_block(*this, "bn_relu_pool_forward");
}
void Backend::bn_relu_pool_backward_reduce(const PoolGeom&, const float*, const uint8_t*,
                                           const float*, const float*, const float*, float*,
                                           float*) {
  no_fused_block(*this, "bn_relu_pool_backward_reduce");
}
void Backend::bn_relu_pool_backward_apply(const PoolGeom&, const float*, const uint8_t*,
                                          const float*, const float*, const float*, const float*,
                                          const float*, const float*, double, float*) {
  no_fused_block(*this, "bn_relu_pool_backward_apply");
}

}  // namespace mnist
