// The best checkpoint's choice and early stopping (train/selection.hpp): which evaluations
// improve, ties, the patience count, a step judged twice, and the state a resume restores.
#include <catch2/catch.hpp>

#include <cmath>

#include "train/selection.hpp"

using namespace mnist;

TEST_CASE("selection by validation accuracy: strictly higher improves, ties keep the earlier step",
          "[selection]") {
  Selection s(KeepBest::validation_accuracy, 2);
  CHECK(s.keeps_best());
  CHECK_FALSE(s.has_best());
  CHECK(s.judge(10, 2.0, 0.50));  // the first evaluation is the best so far
  CHECK(s.state().best_step == 10);
  CHECK(s.judge(20, 2.5, 0.60));        // higher accuracy, even with a higher loss
  CHECK_FALSE(s.judge(30, 0.1, 0.60));  // a tie is no improvement
  CHECK(s.state().best_step == 20);
  CHECK(s.state().best_accuracy == 0.60);
  CHECK(s.state().best_loss == 2.5);
  CHECK(s.state().evaluations_since_best == 1);
  CHECK_FALSE(s.patience_exhausted());
  CHECK_FALSE(s.judge(30, 0.1, 0.90));  // the same step again changes nothing
  CHECK(s.state().evaluations_since_best == 1);
  CHECK_FALSE(s.judge(40, 1.0, 0.55));
  CHECK(s.patience_exhausted());  // two evaluations in a row without improvement
  CHECK(s.judge(50, 1.0, 0.70));  // an improvement resets the count
  CHECK(s.state().evaluations_since_best == 0);
  CHECK_FALSE(s.patience_exhausted());
  CHECK(s.state().last_step == 50);
}

TEST_CASE("selection by validation loss: strictly lower improves, a non-finite loss never does",
          "[selection]") {
  Selection s(KeepBest::validation_loss, 0);
  CHECK_FALSE(s.judge(5, std::nan(""), 0.9));
  CHECK_FALSE(s.has_best());
  CHECK(s.judge(10, 1.0, 0.2));
  CHECK(s.judge(20, 0.5, 0.1));  // lower loss, even with a lower accuracy
  CHECK_FALSE(s.judge(30, 0.5, 0.9));
  CHECK_FALSE(s.judge(40, INFINITY, 0.9));
  CHECK(s.state().best_step == 20);
  CHECK(s.state().evaluations_since_best == 2);
  CHECK_FALSE(s.patience_exhausted());  // patience 0: never stops
}

TEST_CASE("selection none judges nothing, and a restored state continues the count",
          "[selection]") {
  Selection none(KeepBest::none, 0);
  CHECK_FALSE(none.keeps_best());
  CHECK_FALSE(none.judge(10, 0.1, 0.9));
  CHECK(none.state().best_step == -1);
  CHECK_THROWS(Selection(KeepBest::none, 3));

  Selection first(KeepBest::validation_accuracy, 3);
  first.judge(10, 1.0, 0.8);
  first.judge(20, 1.0, 0.7);
  first.judge(30, 1.0, 0.7);
  Selection resumed(KeepBest::validation_accuracy, 3);
  resumed.restore(first.state());
  CHECK_FALSE(resumed.judge(30, 1.0, 0.99));  // judged before the interruption
  CHECK_FALSE(resumed.judge(40, 1.0, 0.75));
  CHECK(resumed.patience_exhausted());
  CHECK(resumed.state().best_step == 10);
}
