// The data-parallel engine on CPU workers: the invariant that W workers on a global batch train
// exactly like one worker on it, batch-norm modes, determinism, learning, and failure handling.
#include <catch2/catch.hpp>

#include <memory>

#include <atomic>
#include <chrono>
#include <cmath>
#include <thread>

#include "comm/thread_communicator.hpp"
#include "core/error.hpp"
#include "model/model.hpp"
#include "support/synthetic.hpp"
#include "train/device_plan.hpp"
#include "train/trainer.hpp"

using namespace mnist;

namespace {

struct Recorder : RunObserver {
  std::vector<double> losses;
  std::vector<EvalRecord> evals;
  void on_step(const StepRecord& r) override { losses.push_back(r.loss); }
  void on_eval(const EvalRecord& r) override { evals.push_back(r); }
};

struct Run {
  std::vector<float> params;
  std::vector<float> state;
  std::vector<double> losses;
  EvalRecord eval;
};

Run train(const std::string& extra, const std::vector<std::string>& overrides, int workers,
          TrainerOptions options = {}) {
  std::vector<std::string> all = overrides;
  all.push_back("devices.cpu_workers=" + std::to_string(workers));
  const Experiment e =
      parse_experiment(testing::small_network_yaml(extra), "engine-test.yaml", all);
  const Model model = Model::build(e.model);
  static const Dataset data = testing::synthetic_dataset(480, 100);
  const DevicePlan devices = plan_devices(e.devices, {});
  auto comm = std::make_shared<ThreadCommunicator>(workers);
  Trainer trainer(e, model, std::make_shared<const Dataset>(data), devices.factory(), workers, comm,
                  0, options);
  Recorder rec;
  const TrainSummary s = trainer.run(rec);
  return Run{trainer.params(), trainer.state(), rec.losses, s.final_eval};
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(double(a[i]) - b[i]));
  return worst;
}

}  // namespace

TEST_CASE("W workers with sync batch norm train exactly like one worker on the global batch",
          "[engine]") {
  const std::vector<std::string> sync = {"train.batch_norm=sync", "train.log_every=1"};
  const Run one = train("", sync, 1);
  for (int workers : {2, 3, 4}) {
    INFO("workers: " << workers);
    const Run many = train("", sync, workers);
    // Same samples, same dropout masks, same statistics: only float summation order differs.
    CHECK(max_abs_diff(one.params, many.params) < 2e-4);
    CHECK(max_abs_diff(one.state, many.state) < 2e-4);
    REQUIRE(one.losses.size() == many.losses.size());
    for (std::size_t i = 0; i < one.losses.size(); ++i)
      CHECK(std::abs(one.losses[i] - many.losses[i]) < 1e-4);
    CHECK(std::abs(one.eval.accuracy - many.eval.accuracy) < 0.011);
  }
}

TEST_CASE("without batch norm and dropout one step matches within 1e-6", "[engine]") {
  const std::string plain = R"(
model:
  input: [1, 12, 12]
  init: {type: truncated_normal, stddev: 0.1}
  layers:
    - conv2d: {filters: 3, kernel: 3, padding: same, activation: relu}
    - max_pool: {size: 2}
    - flatten: {}
    - dense: {units: 16, activation: relu}
    - dense: {units: 10}
)";
  // The base config with its model section swapped for the plain one above.
  std::string base = testing::small_network_yaml();
  base = base.substr(0, base.find("model:")) + plain.substr(1) + base.substr(base.find("devices:"));
  const std::vector<std::string> one_step = {"train.steps=1"};
  auto run = [&](int workers) {
    std::vector<std::string> all = one_step;
    all.push_back("devices.cpu_workers=" + std::to_string(workers));
    const Experiment e = parse_experiment(base, "plain.yaml", all);
    const Model model = Model::build(e.model);
    static const Dataset data = testing::synthetic_dataset(480, 100);
    auto comm = std::make_shared<ThreadCommunicator>(workers);
    Trainer trainer(e, model, std::make_shared<const Dataset>(data),
                    plan_devices(e.devices, {}).factory(), workers, comm);
    trainer.step();
    return trainer.params();
  };
  const auto p1 = run(1);
  for (int workers : {2, 3, 4}) CHECK(max_abs_diff(p1, run(workers)) < 1e-6);
}

TEST_CASE("local batch norm differs from sync, so the switch acts", "[engine]") {
  const Run sync = train("", {"train.batch_norm=sync"}, 2);
  const Run local = train("", {"train.batch_norm=local"}, 2);
  CHECK(max_abs_diff(sync.params, local.params) > 1e-4);
  // With one worker the two modes are the same computation.
  const Run sync1 = train("", {"train.batch_norm=sync"}, 1);
  const Run local1 = train("", {"train.batch_norm=local"}, 1);
  CHECK(max_abs_diff(sync1.params, local1.params) == 0.0);
}

TEST_CASE("same seed gives bit-identical losses, another seed does not", "[engine]") {
  const std::vector<std::string> log = {"train.log_every=1"};
  const Run a = train("", log, 2), b = train("", log, 2);
  CHECK(a.losses == b.losses);
  CHECK(a.params == b.params);
  std::vector<std::string> other = log;
  other.push_back("seed=8");
  const Run c = train("", other, 2);
  CHECK(a.losses != c.losses);
}

TEST_CASE("training lowers the loss and learns the synthetic task", "[engine]") {
  const Run r = train("", {"train.steps=150", "train.log_every=10"}, 2);
  REQUIRE(r.losses.size() == 15);
  CHECK(r.losses.back() < 0.5 * r.losses.front());
  CHECK(r.eval.accuracy > 0.9);
  CHECK(r.eval.samples == 100);
}

TEST_CASE("a worker that throws ends the run with one error naming device, step and phase",
          "[engine]") {
  TrainerOptions options;
  options.phase_hook = [](int worker, int64_t step, Phase phase) {
    if (worker == 1 && step == 4 && phase == Phase::backward)
      throw std::runtime_error("injected fault");
  };
  const auto start = std::chrono::steady_clock::now();
  REQUIRE_THROWS_WITH(train("", {"train.steps=50"}, 3, options),
                      Catch::Contains("cpu1") && Catch::Contains("step 5") &&
                          Catch::Contains("backward") && Catch::Contains("injected fault"));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
}

TEST_CASE("a stalled worker is reported by the watchdog instead of hanging", "[engine]") {
  TrainerOptions options;
  options.phase_hook = [](int worker, int64_t step, Phase phase) {
    if (worker == 2 && step == 3 && phase == Phase::forward)
      std::this_thread::sleep_for(std::chrono::seconds(3));
  };
  const auto start = std::chrono::steady_clock::now();
  REQUIRE_THROWS_WITH(
      train("", {"train.steps=50", "train.watchdog_seconds=1"}, 3, options),
      Catch::Contains("stalled") && Catch::Contains("forward") && Catch::Contains("step 4"));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(15));
}

TEST_CASE("a worker's DataError or ConfigError keeps its kind, with worker, step and phase added",
          "[engine]") {
  // main() maps DataError and ConfigError to exit 2: an error raised inside a worker thread must
  // reach it as the same type, not as a generic runtime failure (exit 1).
  TrainerOptions bad_data;
  bad_data.phase_hook = [](int worker, int64_t step, Phase phase) {
    if (worker == 1 && step == 2 && phase == Phase::data)
      throw DataError("'labels.idx': label 12 at byte offset 20");
  };
  REQUIRE_THROWS_AS(train("", {"train.steps=10"}, 2, bad_data), DataError);
  REQUIRE_THROWS_WITH(train("", {"train.steps=10"}, 2, bad_data),
                      Catch::StartsWith("cpu1 failed at step 3 in phase 'data': ") &&
                          Catch::EndsWith("'labels.idx': label 12 at byte offset 20"));
  TrainerOptions bad_config;
  bad_config.phase_hook = [](int worker, int64_t, Phase phase) {
    if (worker == 0 && phase == Phase::setup) throw ConfigError("devices.threads: -1");
  };
  REQUIRE_THROWS_AS(train("", {}, 2, bad_config), ConfigError);
  REQUIRE_THROWS_WITH(train("", {}, 2, bad_config),
                      Catch::Contains("failed at step 1 in phase 'setup': devices.threads: -1"));
  // Anything else is a runtime failure (exit 1), and a divergence stays a divergence (exit 4).
  TrainerOptions diverged;
  diverged.phase_hook = [](int, int64_t step, Phase phase) {
    if (step == 1 && phase == Phase::update) throw DivergenceError("loss is nan");
  };
  REQUIRE_THROWS_AS(train("", {"train.steps=5"}, 1, diverged), DivergenceError);
}

TEST_CASE("a label outside the classes stops training with a DataError before any step",
          "[engine]") {
  // The CPU loss kernel would throw on it and the CUDA kernel would give a NaN loss; the worker's
  // check at set-up gives both backends this error (tests/gpu has the CUDA twin of this case).
  const Experiment e =
      parse_experiment(testing::small_network_yaml(), "label-test.yaml", {"devices.cpu_workers=2"});
  const Model model = Model::build(e.model);
  Dataset data = testing::synthetic_dataset(480, 100);
  data.train.labels[300] = 11;
  std::atomic<int> steps_started{0};  // the hook runs on both worker threads
  TrainerOptions options;
  options.phase_hook = [&](int, int64_t, Phase phase) {
    if (phase == Phase::data) ++steps_started;
  };
  auto start = [&] {
    auto comm = std::make_shared<ThreadCommunicator>(2);
    Trainer trainer(e, model, std::make_shared<const Dataset>(data),
                    plan_devices(e.devices, {}).factory(), 2, comm, 0, options);
  };
  REQUIRE_THROWS_AS(start(), DataError);
  REQUIRE_THROWS_WITH(start(), Catch::Contains("phase 'setup'") &&
                                   Catch::Contains("label 11 of training image 300") &&
                                   Catch::Contains("10 classes"));
  CHECK(steps_started == 0);
}

TEST_CASE("a worker the watchdog leaves behind owns what it touches and ends once it wakes",
          "[engine][watchdog]") {
  // Worker 1 blocks in its forward hop until released: the watchdog reports it, the trainer leaves
  // it behind (detached) and is destroyed, and so are the caller's dataset, communicator,
  // experiment and model. The stuck thread must still hold its own references to what it will
  // touch when it wakes, then end and release them. (Under AddressSanitizer, a touch of anything
  // freed fails here.)
  const auto release = std::make_shared<std::atomic<bool>>(false);
  const auto woke = std::make_shared<std::atomic<bool>>(false);
  TrainerOptions options;
  options.phase_hook = [release, woke](int worker, int64_t step, Phase phase) {
    if (worker != 1 || step != 2 || phase != Phase::forward) return;
    while (!release->load()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    *woke = true;
  };
  std::weak_ptr<const Dataset> data_alive;
  std::weak_ptr<Communicator> comm_alive;
  {
    const Experiment e =
        parse_experiment(testing::small_network_yaml(), "stall-test.yaml",
                         {"devices.cpu_workers=2", "train.steps=10", "train.watchdog_seconds=1"});
    const Model model = Model::build(e.model);
    auto data = std::make_shared<const Dataset>(testing::synthetic_dataset(480, 100));
    auto comm = std::make_shared<ThreadCommunicator>(2);
    data_alive = data;
    comm_alive = comm;
    Trainer trainer(e, model, std::move(data), plan_devices(e.devices, {}).factory(), 2,
                    std::move(comm), 0, options);
    const auto start = std::chrono::steady_clock::now();
    trainer.step();  // steps 1 and 2
    trainer.step();
    REQUIRE_THROWS_WITH(trainer.step(), Catch::Contains("cpu1 stalled") &&
                                            Catch::Contains("step 3") &&
                                            Catch::Contains("forward"));
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(10));
  }
  // Trainer, experiment, model and the caller's pointers are gone; the stuck worker keeps the
  // dataset and the communicator alive.
  CHECK_FALSE(*woke);
  CHECK_FALSE(data_alive.expired());
  CHECK_FALSE(comm_alive.expired());
  *release = true;
  // Woken, it runs its forward and backward (the replica built on its own copy of the model),
  // meets the aborted communicator in the all-reduce, ends, and frees what it held.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while ((!data_alive.expired() || !comm_alive.expired()) &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  CHECK(*woke);
  CHECK(data_alive.expired());
  CHECK(comm_alive.expired());
}

TEST_CASE("a snapshot restored into a fresh trainer continues bit for bit",
          "[engine][checkpoint]") {
  // Trainer::snapshot and Trainer::restore speak CheckpointState, the type save_checkpoint writes
  // and load_checkpoint reads: nothing is copied field by field between them.
  const Experiment e =
      parse_experiment(testing::small_network_yaml(), "snapshot-test.yaml",
                       {"devices.cpu_workers=2", "train.steps=6", "train.batch_norm=sync"});
  // (Sync batch norm: every replica holds the same running statistics, so the snapshot's are
  // those of the straight run's replicas; local batch norm would average them first.)
  const Model model = Model::build(e.model);
  const auto data = std::make_shared<const Dataset>(testing::synthetic_dataset(480, 100));
  auto start = [&] {
    return std::make_unique<Trainer>(e, model, data, plan_devices(e.devices, {}).factory(), 2,
                                     std::make_shared<ThreadCommunicator>(2));
  };
  auto straight = start();
  for (int s = 0; s < 6; ++s) straight->step();
  auto first = start();
  for (int s = 0; s < 3; ++s) first->step();
  const CheckpointState half = first->snapshot();
  CHECK(half.step == 3);
  CHECK(half.moment2.size() == model.param_count());  // Adam
  auto second = start();
  second->restore(half);
  CHECK(second->current_step() == 3);
  for (int s = 3; s < 6; ++s) second->step();
  CHECK(second->params() == straight->params());
  CHECK(second->state() == straight->state());
}

TEST_CASE("the log tells the all-reduce apart from waiting in it for a slower worker", "[engine]") {
  // Worker 1 spends 60 ms longer in its backward every step: worker 0 waits for it inside the
  // all-reduce. That wait is the log's `wait`, not its `comm` (once 60 ms of "comm" for a
  // reduction of 58 us).
  struct Times : RunObserver {
    std::vector<StepRecord> steps;
    void on_step(const StepRecord& r) override { steps.push_back(r); }
  };
  const Experiment e =
      parse_experiment(testing::small_network_yaml(), "engine-test.yaml",
                       {"devices.cpu_workers=2", "train.steps=3", "train.log_every=1"});
  const Model model = Model::build(e.model);
  const auto data = std::make_shared<const Dataset>(testing::synthetic_dataset(96, 32));
  TrainerOptions options;
  options.phase_hook = [](int worker, int64_t, Phase phase) {
    if (worker == 1 && phase == Phase::backward)
      std::this_thread::sleep_for(std::chrono::milliseconds(60));
  };
  Trainer trainer(e, model, data, plan_devices(e.devices, {}).factory(), 2,
                  std::make_shared<ThreadCommunicator>(2), 0, options);
  Times times;
  trainer.run(times);
  REQUIRE(times.steps.size() == 3);
  for (const StepRecord& r : times.steps) {
    INFO("step " << r.step << ": compute " << r.compute_ms << " ms, comm " << r.comm_ms
                 << " ms, wait " << r.wait_ms << " ms");
    CHECK(r.compute_ms >= 55);
    CHECK(r.wait_ms >= 40);
    CHECK(r.comm_ms < r.wait_ms);
  }
}
