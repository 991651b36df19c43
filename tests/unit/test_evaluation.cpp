// Using a trained model: the evaluation report agrees with the trainer's own evaluation, and
// predictions are probabilities.
#include <catch2/catch.hpp>

#include <numeric>

#include "comm/thread_communicator.hpp"
#include "model/model.hpp"
#include "support/synthetic.hpp"
#include "train/device_plan.hpp"
#include "train/evaluation.hpp"
#include "train/trainer.hpp"

using namespace mnist;

TEST_CASE("evaluation report agrees with the trainer's evaluation", "[evaluation]") {
  const Experiment e = parse_experiment(testing::small_network_yaml(), "eval-test.yaml",
                                        {"train.steps=120", "devices.cpu_workers=1"});
  const Model model = Model::build(e.model);
  const Dataset data = testing::synthetic_dataset(480, 100);
  ThreadCommunicator comm(1);
  Trainer trainer(e, model, data, plan_devices(e.devices, {}).factory(), 1, comm);
  RunObserver quiet;
  const TrainSummary s = trainer.run(quiet);
  const auto params = trainer.params();
  const auto state = trainer.state();
  CheckpointState weights;
  weights.params = params;
  weights.state = state;
  // A batch size that does not divide the test set exercises the tail batch.
  const EvaluationReport r =
      evaluate_model(e, model, make_cpu_backend(BackendOptions{}), weights, data.test, 33);
  CHECK(r.samples == 100);
  int64_t total = 0, diagonal = 0;
  for (std::size_t t = 0; t < r.confusion.size(); ++t) {
    total += std::accumulate(r.confusion[t].begin(), r.confusion[t].end(), int64_t{0});
    diagonal += r.confusion[t][t];
  }
  CHECK(total == 100);
  CHECK(r.accuracy == Approx(diagonal / 100.0));
  // Same network, same weights: the trainer's own evaluation gives the same figures.
  CHECK(r.accuracy == Approx(s.final_eval.accuracy).margin(1e-6));
  CHECK(r.loss == Approx(s.final_eval.loss).epsilon(1e-4));
  const auto probs =
      predict_probabilities(e, model, make_cpu_backend(BackendOptions{}), weights, data.test, 7);
  REQUIRE(probs.size() == 100);
  for (const auto& p : probs)
    CHECK(std::accumulate(p.begin(), p.end(), 0.0) == Approx(1.0).epsilon(1e-5));
}
