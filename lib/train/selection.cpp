#include "train/selection.hpp"

#include <cmath>

#include "core/error.hpp"

namespace mnist {

Selection::Selection(KeepBest metric, int patience) : metric_(metric), patience_(patience) {
  MNIST_CHECK(patience >= 0, "patience {} is negative", patience);
  MNIST_CHECK(patience == 0 || metric != KeepBest::none,
              "early stopping (patience {}) needs a metric to watch", patience);
}

bool Selection::judge(int64_t step, double loss, double accuracy) {
  if (metric_ == KeepBest::none || step <= state_.last_step) return false;
  state_.last_step = step;
  const double value = metric_ == KeepBest::validation_accuracy ? accuracy : loss;
  const double best =
      metric_ == KeepBest::validation_accuracy ? state_.best_accuracy : state_.best_loss;
  // Ties keep the earlier step: a later checkpoint must be better to replace it.
  const bool better = std::isfinite(value) &&
                      (state_.best_step < 0 ||
                       (metric_ == KeepBest::validation_accuracy ? value > best : value < best));
  if (!better) {
    ++state_.evaluations_since_best;
    return false;
  }
  state_.best_step = step;
  state_.best_accuracy = accuracy;
  state_.best_loss = loss;
  state_.evaluations_since_best = 0;
  return true;
}

bool Selection::patience_exhausted() const {
  return patience_ > 0 && state_.evaluations_since_best >= patience_;
}

}  // namespace mnist
