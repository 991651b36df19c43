#pragma once
// The one place fusion is decided. A model's plans are grouped into the layers a replica builds
// (plan_layers: once, for every pass), and each pass kind runs those layers as a list of blocks
// (plan_blocks: once per pass kind, when the replica is built), from what the backend says it
// fuses. The replica then runs one loop forward over a pass's blocks and one backward; nothing
// else asks the backend what it fuses.
//
// The seed network on each engine (docs/architecture.md, "The block plan"):
//   CPU native, blas; CUDA native, cublas, cudnn: every plan its own layer, every block a layer's,
//     then the loss.
//   CUDA fused, training with the slice's own statistics: conv block (gathering the batch),
//     conv block, flatten, dense tail (dense -> dense block -> the head with the loss).
//   CUDA fused, sync batch norm: conv block, conv block, flatten, dense, dense block, dense head.
//   CUDA fused, evaluation: the same layers as training, then the loss.

#include <cstddef>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "model/model.hpp"

namespace mnist {

// A pass kind: what changes which blocks can run fused.
enum class PassKind {
  train_local_batch_norm,  // training, each replica's batch norm over its own slice
  train_sync_batch_norm,   // training, batch-norm statistics all-reduced between the ops
  eval,                    // evaluation: running statistics, no backward
};
PassKind pass_kind(bool training, bool sync_batch_norm);

// The layers a replica builds, each over plans [first_plan, first_plan + span).
// layers.hpp's make_layer makes each group's layer.
enum class LayerGroup {
  single,                // one plan
  conv_block,            // conv2d -> batch_norm -> relu -> 2x2 max_pool
  dense_block,           // batch_norm -> relu (-> dropout) over a dense layer's output
  fused_dense_backward,  // one dense plan whose backward is one call (FusedKind::dense_backward)
};
struct LayerUnit {
  LayerGroup group = LayerGroup::single;
  std::size_t first_plan = 0;
  int span = 1;
};
std::vector<LayerUnit> plan_layers(const Model& model, const Backend& backend);

// What a pass runs, in order; `layer` indexes plan_layers' list.
enum class BlockKind {
  layer,           // the layer's forward and backward
  gathered_layer,  // the first layer (a conv block), gathering the batch in its forward
  dense_head,      // the last layer, a dense layer, and the loss as one call (training)
  dense_tail,      // layers [layer, layer + 3): dense, dense block and the head (training)
  loss,            // softmax cross-entropy of the previous block's output (the logits)
};
struct BlockPlan {
  BlockKind kind = BlockKind::layer;
  std::size_t layer = 0;
  std::size_t layers = 1;  // how many of the layers it runs (0 for the loss)
};
std::vector<BlockPlan> plan_blocks(const Model& model, const std::vector<LayerUnit>& layers,
                                   const Backend& backend, PassKind pass);

// "conv_block(gathered) conv_block flatten dense_tail": a pass's blocks, for logs and tests.
std::string describe_blocks(const Model& model, const std::vector<LayerUnit>& layers,
                            const std::vector<BlockPlan>& blocks);

}  // namespace mnist
