#include "model/block_plan.hpp"

#include "model/layers.hpp"

namespace mnist {

PassKind pass_kind(bool training, bool sync_batch_norm) {
  if (!training) return PassKind::eval;
  return sync_batch_norm ? PassKind::train_sync_batch_norm : PassKind::train_local_batch_norm;
}

namespace {

bool kinds_at(const std::vector<LayerPlan>& plans, std::size_t at,
              std::initializer_list<LayerKind> kinds) {
  if (at + kinds.size() > plans.size()) return false;
  for (LayerKind kind : kinds)
    if (plans[at++].spec.kind != kind) return false;
  return true;
}

// conv2d -> batch_norm -> relu -> max_pool, whose pool the backend fuses with the batch norm and
// the ReLU (FusedKind::conv_block).
bool conv_block_at(const Model& model, std::size_t at, const Backend& backend) {
  const auto& plans = model.layers();
  return kinds_at(
             plans, at,
             {LayerKind::conv2d, LayerKind::batch_norm, LayerKind::relu, LayerKind::max_pool}) &&
         backend.fused().supports(FusedShape::conv_block(
             conv2d_geom(plans[at], 1), max_pool_geom(plans[at + 3], 1), plans[at].bias >= 0));
}

// batch_norm -> relu over a flat input (in.h * in.w == 1: a dense layer's output), when the
// backend fuses such a block (FusedKind::dense_block); a dropout right after joins it.
bool dense_block_at(const Model& model, std::size_t at, const Backend& backend) {
  const auto& plans = model.layers();
  return kinds_at(plans, at, {LayerKind::batch_norm, LayerKind::relu}) &&
         plans[at].in.h * plans[at].in.w == 1 &&
         backend.fused().supports(FusedShape::dense_block(1, plans[at].in.c));
}

// A dense layer whose backward the backend runs as one call (FusedKind::dense_backward).
bool fused_dense_backward_at(const Model& model, std::size_t at, const Backend& backend) {
  const LayerPlan& plan = model.layers()[at];
  return plan.spec.kind == LayerKind::dense &&
         backend.fused().supports(FusedShape::dense_backward(1, plan.in.c, plan.out.c));
}

const LayerPlan& first_plan(const Model& model, const LayerUnit& unit) {
  return model.layers()[unit.first_plan];
}

// A unit of one plan of `kind`, however its backward runs.
bool single_of(const Model& model, const LayerUnit& unit, LayerKind kind) {
  return unit.span == 1 && first_plan(model, unit).spec.kind == kind;
}

}  // namespace

std::vector<LayerUnit> plan_layers(const Model& model, const Backend& backend) {
  const auto& plans = model.layers();
  std::vector<LayerUnit> units;
  for (std::size_t i = 0; i < plans.size(); i += static_cast<std::size_t>(units.back().span)) {
    LayerUnit unit{LayerGroup::single, i, 1};
    if (conv_block_at(model, i, backend)) {
      unit = LayerUnit{LayerGroup::conv_block, i, 4};
    } else if (dense_block_at(model, i, backend)) {
      const bool dropout = kinds_at(plans, i + 2, {LayerKind::dropout});
      unit = LayerUnit{LayerGroup::dense_block, i, dropout ? 3 : 2};
    } else if (fused_dense_backward_at(model, i, backend)) {
      unit = LayerUnit{LayerGroup::fused_dense_backward, i, 1};
    }
    units.push_back(unit);
  }
  return units;
}

std::vector<BlockPlan> plan_blocks(const Model& model, const std::vector<LayerUnit>& layers,
                                   const Backend& backend, PassKind pass) {
  const bool training = pass != PassKind::eval;
  const std::size_t count = layers.size();
  const int classes = model.classes();
  // The head: a last dense layer the backend runs with the loss (training only: evaluation wants
  // the logits). The tail: the dense layer and dense block in front of it, with the slice's own
  // statistics (sync batch norm all-reduces between the block's ops).
  const bool head =
      training && count >= 1 && single_of(model, layers[count - 1], LayerKind::dense) &&
      backend.fused().supports(FusedShape::dense_head(
          1, static_cast<int>(first_plan(model, layers[count - 1]).in.size()), classes));
  const bool tail = head && pass == PassKind::train_local_batch_norm && count >= 3 &&
                    single_of(model, layers[count - 3], LayerKind::dense) &&
                    layers[count - 2].group == LayerGroup::dense_block &&
                    backend.fused().supports(FusedShape::dense_tail(
                        1, static_cast<int>(first_plan(model, layers[count - 3]).in.size()),
                        first_plan(model, layers[count - 3]).out.c, classes));
  const std::size_t plain = count - (tail ? 3 : head ? 1 : 0);

  std::vector<BlockPlan> blocks;
  for (std::size_t i = 0; i < plain; ++i) blocks.push_back(BlockPlan{BlockKind::layer, i, 1});
  // The first convolution gathers the batch where it stages its input, in training with the
  // slice's own statistics (the fused kernel finalizes them).
  if (pass == PassKind::train_local_batch_norm && !blocks.empty() &&
      layers[0].group == LayerGroup::conv_block &&
      backend.fused().supports(
          FusedShape::gathered_convolution(conv2d_geom(first_plan(model, layers[0]), 1)))) {
    blocks[0].kind = BlockKind::gathered_layer;
  }
  if (tail)
    blocks.push_back(BlockPlan{BlockKind::dense_tail, count - 3, 3});
  else if (head)
    blocks.push_back(BlockPlan{BlockKind::dense_head, count - 1, 1});
  else
    blocks.push_back(BlockPlan{BlockKind::loss, count, 0});
  return blocks;
}

std::string describe_blocks(const Model& model, const std::vector<LayerUnit>& layers,
                            const std::vector<BlockPlan>& blocks) {
  std::string out;
  for (const BlockPlan& b : blocks) {
    if (!out.empty()) out += ' ';
    switch (b.kind) {
      case BlockKind::layer:
      case BlockKind::gathered_layer: {
        const LayerUnit& unit = layers[b.layer];
        out += unit.group == LayerGroup::conv_block ? "conv_block"
               : unit.group == LayerGroup::dense_block
                   ? "dense_block"
                   : to_string(first_plan(model, unit).spec.kind);
        if (b.kind == BlockKind::gathered_layer) out += "(gathered)";
        break;
      }
      case BlockKind::dense_head:
        out += "dense_head";
        break;
      case BlockKind::dense_tail:
        out += "dense_tail";
        break;
      case BlockKind::loss:
        out += "loss";
        break;
    }
  }
  return out;
}

}  // namespace mnist
