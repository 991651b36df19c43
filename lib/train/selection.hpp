#pragma once
// The best checkpoint by a validation metric, and early stopping with a patience
// (train.keep_best, train.patience). The trainer judges every evaluation of the validation split
// with one Selection; its state travels in checkpoints (SelectionState), so a resumed run judges
// on as the uninterrupted one would have.

#include <cstdint>

#include "config/experiment.hpp"
#include "train/checkpoint_state.hpp"

namespace mnist {

class Selection {
 public:
  // `metric` none: nothing is judged (judge() is always false) and patience must be 0.
  Selection(KeepBest metric, int patience);

  // Judges the validation evaluation at `step` (steps completed): true when it improves on the
  // best so far (strictly: a higher accuracy, or a lower loss; the first finite one always does),
  // which then becomes the best; otherwise one more evaluation without improvement. A step judged
  // already (a resumed run evaluating again where it stopped) changes nothing and is false.
  bool judge(int64_t step, double loss, double accuracy);
  // Early stopping is due: patience > 0 evaluations in a row judged without improvement.
  bool patience_exhausted() const;

  bool keeps_best() const { return metric_ != KeepBest::none; }
  bool has_best() const { return state_.best_step >= 0; }
  KeepBest metric() const { return metric_; }
  int patience() const { return patience_; }
  const SelectionState& state() const { return state_; }
  void restore(const SelectionState& state) { state_ = state; }

 private:
  KeepBest metric_;
  int patience_;
  SelectionState state_;
};

}  // namespace mnist
