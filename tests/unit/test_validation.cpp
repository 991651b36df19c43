// The validation split in the trainer: its images are never trained on, it is what eval_every
// evaluates (the test set only at the end), W workers evaluate it as one does, the best is
// reported to the caller, early stopping ends the run, and a restored selection continues.
#include <catch2/catch.hpp>

#include <memory>
#include <vector>

#include "comm/thread_communicator.hpp"
#include "model/model.hpp"
#include "support/synthetic.hpp"
#include "train/device_plan.hpp"
#include "train/trainer.hpp"

using namespace mnist;

namespace {

struct Recorder : RunObserver {
  std::vector<EvalRecord> evals;
  void on_eval(const EvalRecord& r) override { evals.push_back(r); }
};

// 480 training images of which the first 96 are the validation split (as load_dataset splits
// them), 100 test images; `scramble` replaces the validation images' pixels and labels.
Dataset split_dataset(bool scramble) {
  Dataset d = testing::synthetic_dataset(480, 100);
  d.validation = split_off_first(d.train, 96);
  if (scramble) {
    for (uint8_t& p : d.validation.pixels) p = static_cast<uint8_t>(255 - p);
    for (uint8_t& l : d.validation.labels) l = static_cast<uint8_t>((l + 3) % 10);
  }
  return d;
}

struct Run {
  std::vector<float> params;
  std::vector<EvalRecord> evals;
  TrainSummary summary;
  std::vector<int64_t> best_calls;
  CheckpointState snapshot;
};

Run train(const Dataset& data, int workers, const std::vector<std::string>& extra,
          const CheckpointState* resume = nullptr) {
  std::vector<std::string> overrides = {"data.validation_size=96", "train.eval_every=4",
                                        "devices.cpu_workers=" + std::to_string(workers)};
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  const Experiment e = parse_experiment(testing::small_network_yaml(), "val.yaml", overrides);
  const Model model = Model::build(e.model);
  Run run;
  TrainerOptions options;
  options.on_best = [&](int64_t step) { run.best_calls.push_back(step); };
  Trainer trainer(e, model, std::make_shared<const Dataset>(data),
                  plan_devices(e.devices, {}).factory(), workers,
                  std::make_shared<ThreadCommunicator>(workers), 0, options);
  if (resume) trainer.restore(*resume);
  Recorder rec;
  run.summary = trainer.run(rec);
  run.evals = rec.evals;
  run.params = trainer.params();
  run.snapshot = trainer.snapshot();
  return run;
}

}  // namespace

TEST_CASE("validation images are never trained on, and eval_every evaluates them, not the test set",
          "[validation][engine]") {
  const Run a = train(split_dataset(false), 1, {});
  const Run b = train(split_dataset(true), 1, {});
  // Other validation images, other labels: the same training, bit for bit.
  CHECK(a.params == b.params);
  // Steps 4, 8, 12, 16 and the end (20) on the validation split, then the test set once.
  REQUIRE(a.evals.size() == 6);
  for (int i = 0; i < 5; ++i) {
    INFO("evaluation " << i);
    CHECK(a.evals[i].split == EvalSplit::validation);
    CHECK(a.evals[i].step == 4 * (i + 1));
    CHECK(a.evals[i].samples == 96);
  }
  CHECK(a.evals[5].split == EvalSplit::test);
  CHECK(a.evals[5].step == 20);
  CHECK(a.evals[5].samples == 100);
  CHECK(a.summary.final_eval.samples == 100);
  CHECK(a.summary.has_validation);
  CHECK(a.summary.final_validation.step == 20);
  CHECK(a.summary.final_validation.accuracy == a.evals[4].accuracy);
  // ... and the evaluations are of the validation images: scrambled ones score otherwise.
  CHECK(a.evals[4].loss != b.evals[4].loss);
  CHECK(a.evals[5].loss == b.evals[5].loss);  // the test set is the same
  // The caller heard of every improvement, before its record, and the summary names the best.
  std::vector<int64_t> improved;
  for (const EvalRecord& r : a.evals)
    if (r.improved) improved.push_back(r.step);
  CHECK(improved == a.best_calls);
  REQUIRE_FALSE(improved.empty());
  CHECK(a.summary.selection.best_step == improved.back());
  CHECK_FALSE(a.summary.stopped_early);
  CHECK(a.snapshot.selection.best_step == improved.back());
}

TEST_CASE("W workers evaluate the validation split as one worker does", "[validation][engine]") {
  const Dataset data = split_dataset(false);
  const std::vector<std::string> sync = {"train.batch_norm=sync"};
  const Run one = train(data, 1, sync);
  for (int workers : {2, 3}) {
    INFO("workers: " << workers);
    const Run many = train(data, workers, sync);
    REQUIRE(many.evals.size() == one.evals.size());
    for (std::size_t i = 0; i < one.evals.size(); ++i) {
      CHECK(many.evals[i].samples == one.evals[i].samples);  // every image, once
      CHECK(many.evals[i].loss == Approx(one.evals[i].loss).margin(1e-4));
    }
  }
}

TEST_CASE("early stopping ends the run after patience evaluations without improvement",
          "[validation][engine]") {
  const Dataset data = split_dataset(false);
  // The straight run's own records say where patience 2 must stop it: accuracy on 96 images
  // stalls (ties count as no improvement) well within 60 steps.
  const std::vector<std::string> stall = {"train.steps=60"};
  const Run straight = train(data, 1, stall);
  std::vector<int64_t> improved;
  for (const EvalRecord& r : straight.evals)
    if (r.split == EvalSplit::validation && r.improved) improved.push_back(r.step);
  REQUIRE(!improved.empty());
  // With patience 2: the second evaluation in a row without improvement after the best ends it.
  std::vector<std::string> with_patience = stall;
  with_patience.push_back("train.patience=2");
  const Run early = train(data, 1, with_patience);
  INFO("straight run's improvements at the first " << improved.size() << ", last at step "
                                                   << improved.back());
  int64_t expected = -1, best = -1;
  int since = 0;
  for (const EvalRecord& r : straight.evals) {
    if (r.split != EvalSplit::validation) continue;
    if (r.improved) {
      best = r.step;
      since = 0;
    } else if (++since == 2) {
      expected = r.step;
      break;
    }
  }
  REQUIRE(expected > 0);   // the stall happens within the 60 steps
  REQUIRE(expected < 60);  // and before the last step, so the stop is early
  CHECK(early.summary.stopped_early);
  CHECK(early.summary.steps == expected);
  CHECK(early.summary.selection.best_step == best);
  CHECK(early.summary.selection.evaluations_since_best == 2);
  CHECK(early.summary.stop_reason == 0);
  CHECK(early.summary.final_eval.samples == 100);  // the test set is still evaluated at the end
  CHECK(early.evals.back().split == EvalSplit::test);
  // A run restored from its early stop stops again at once, with the same best.
  const Run again = train(data, 1, with_patience, &early.snapshot);
  CHECK(again.summary.stopped_early);
  CHECK(again.summary.steps == expected);
  CHECK(again.summary.first_step == expected);
  CHECK(again.summary.selection.best_step == best);
  CHECK(again.best_calls.empty());
}
