// The worker type: the step the trainer runs is the one a Worker runs on its own (what the
// benchmark times), the optimizer's one home, the label check every backend shares, and the
// watchdog's rule.
#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <memory>

#include "comm/communicator.hpp"
#include "comm/thread_communicator.hpp"
#include "core/error.hpp"
#include "data/sampler.hpp"
#include "model/model.hpp"
#include "support/faulty_communicator.hpp"
#include "support/synthetic.hpp"
#include "train/device_plan.hpp"
#include "train/schedule.hpp"
#include "train/trainer.hpp"
#include "train/watchdog.hpp"
#include "train/worker.hpp"

using namespace mnist;

namespace {
Experiment small_experiment(const std::vector<std::string>& overrides) {
  return parse_experiment(testing::small_network_yaml(), "worker-test.yaml", overrides);
}
}  // namespace

TEST_CASE("a Worker stepping on its own trains bit for bit as the trainer's worker does",
          "[worker][engine]") {
  // A schedule and SGD with decoupled decay, so the learning rate and the optimizer settings the
  // two paths hand to the update both matter.
  const Experiment e = small_experiment(
      {"train.steps=6", "optimizer.type=sgd", "optimizer.momentum=0.9", "optimizer.lr=0.05",
       "optimizer.weight_decay=0.01", "optimizer.weight_decay_mode=decoupled",
       "schedule.type=cosine", "schedule.warmup_steps=2", "data.random_shift=1"});
  const Model model = Model::build(e.model);
  const Dataset data = testing::synthetic_dataset(480, 100);
  const BackendFactory backends = plan_devices(e.devices, {}).factory();
  auto comm = std::make_shared<ThreadCommunicator>(1);
  Trainer trainer(e, model, std::make_shared<const Dataset>(data), backends, 1, comm);
  for (int64_t s = 0; s < e.train.steps; ++s) trainer.step();
  const std::vector<float> trained = trainer.params();

  auto alone = RunInputs::make(e, model, std::make_shared<const Dataset>(data), nullptr, 1);
  Worker worker(alone, backends(0), 0, 0);
  for (int64_t s = 0; s < e.train.steps; ++s)
    worker.train_step({s, learning_rate_at(e.schedule, e.optimizer.lr, s, alone->plan.steps)},
                      false);
  CHECK(worker.snapshot().params == trained);
  // ...and the steps did something.
  CHECK(trained != model.initial_params(e.seed));
}

TEST_CASE("make_optimizer_step carries the config's optimizer settings", "[worker]") {
  OptimizerConfig adam;
  adam.kind = OptimizerKind::adam;
  adam.beta1 = 0.8;
  adam.beta2 = 0.99;
  adam.epsilon = 1e-4;
  adam.weight_decay = 0.1;
  adam.weight_decay_mode = WeightDecayMode::l2;
  OptimizerStep s = make_optimizer_step(adam, 0.25, 4);
  CHECK(s.lr == 0.25f);
  CHECK(s.step == 5);  // 1-based for the bias correction
  CHECK(s.beta1 == 0.8f);
  CHECK(s.beta2 == 0.99f);
  CHECK(s.epsilon == 1e-4f);
  CHECK(s.l2 == 0.1f);
  CHECK(s.decoupled_wd == 0.0f);
  // TensorFlow's epsilon: added before the bias corrections scale the step.
  adam.epsilon_style = AdamEpsilon::tensorflow;
  s = make_optimizer_step(adam, 0.25, 4);
  CHECK(s.epsilon == Approx(1e-4 * std::sqrt(1.0 / (1.0 - std::pow(0.99, 5)))).epsilon(1e-6));

  OptimizerConfig sgd;
  sgd.kind = OptimizerKind::sgd;
  sgd.momentum = 0.9;
  sgd.nesterov = true;
  sgd.weight_decay = 0.01;
  sgd.weight_decay_mode = WeightDecayMode::decoupled;
  s = make_optimizer_step(sgd, 0.1, 0);
  CHECK(s.momentum == 0.9f);
  CHECK(s.nesterov);
  CHECK(s.l2 == 0.0f);
  CHECK(s.decoupled_wd == 0.01f);
}

TEST_CASE("a label outside the model's classes is a DataError at set-up, naming it", "[worker]") {
  const Experiment e = small_experiment({});
  const Model model = Model::build(e.model);
  auto data = std::make_shared<Dataset>(testing::synthetic_dataset(48, 20));
  data->train.labels[17] = 12;
  REQUIRE_THROWS_AS(
      Worker(RunInputs::make(e, model, data, nullptr, 1), make_cpu_backend(BackendOptions{}), 0, 0),
      DataError);
  REQUIRE_THROWS_WITH(
      Worker(RunInputs::make(e, model, data, nullptr, 1), make_cpu_backend(BackendOptions{}), 0, 0),
      Catch::Contains("label 12 of training image 17") && Catch::Contains("10 classes"));
  data->train.labels[17] = 3;
  data->test.labels[5] = 10;
  data->test.labels_path = "t10k-labels-idx1-ubyte";
  REQUIRE_THROWS_WITH(
      Worker(RunInputs::make(e, model, data, nullptr, 1), make_cpu_backend(BackendOptions{}), 0, 0),
      Catch::Contains("'t10k-labels-idx1-ubyte': label 10 of test image 5"));
}

// Puts `w` in phase `p` of 0-based `step` since `since_ns` (WorkerStatus::enter takes the clock's
// time; the watchdog's tests choose it).
namespace {
void busy(WorkerStatus& w, Phase p, int64_t since_ns, int64_t step) {
  w.phase = static_cast<int>(p);
  w.since_ns = since_ns;
  w.step = step;
}
}  // namespace

TEST_CASE("the watchdog names the worker longest in one phase, once past the limit",
          "[worker][watchdog]") {
  std::vector<WorkerStatus> workers(3);
  const std::vector<std::string> names = {"cpu0", "cpu1", "cpu2"};
  const int64_t s = 1'000'000'000;  // ns
  busy(workers[0], Phase::reduce, 8 * s, 6);
  busy(workers[1], Phase::forward, 5 * s, 6);
  // worker 2 idle
  CHECK(find_stall(workers, names, 10.0, 14 * s) == "");  // 9 s in forward: within the limit
  const std::string stall = find_stall(workers, names, 10.0, 16 * s);
  CHECK_THAT(stall, Catch::StartsWith("cpu1 stalled: step 7 has been in phase 'forward' for "
                                      "11.0 s (train.watchdog_seconds = 10)"));
  CHECK_THAT(stall, Catch::Contains("cpu0 in 'reduce' for 8.0 s, cpu2 in 'idle'"));
  workers[1].leave();
  workers[0].leave();
  CHECK(find_stall(workers, names, 10.0, 100 * s) == "");
}

TEST_CASE("the watchdog names the worker holding the collective up, not one waiting in it",
          "[worker][watchdog]") {
  // On a loaded machine a worker thread can start its forward after its peer already waits in
  // 'reduce': the waiting one has been busy longer, but the one in 'forward' is the stall.
  std::vector<WorkerStatus> workers(2);
  const std::vector<std::string> names = {"cpu0", "cpu1"};
  const int64_t s = 1'000'000'000;  // ns
  busy(workers[0], Phase::reduce, 1 * s, 2);
  busy(workers[1], Phase::forward, 2 * s, 2);
  CHECK(find_stall(workers, names, 10.0, 12 * s) == "");  // cpu1 10 s in forward: not past it
  CHECK_THAT(find_stall(workers, names, 10.0, 13 * s),
             Catch::StartsWith("cpu1 stalled: step 3 has been in phase 'forward' for 11.0 s") &&
                 Catch::Contains("cpu0 in 'reduce' for 12.0 s"));
  // Every busy worker in 'reduce': the collective itself hangs; the longest there is named.
  workers[1].phase = static_cast<int>(Phase::reduce);
  CHECK_THAT(find_stall(workers, names, 10.0, 13 * s),
             Catch::StartsWith("cpu0 stalled: step 3 has been in phase 'reduce' for 12.0 s"));
}

namespace {
// The small network on CPU workers with `overrides`, its synthetic data and backends.
struct CpuSetup {
  Experiment e;
  Model model;
  std::shared_ptr<const Dataset> data;
  BackendFactory backends;
  explicit CpuSetup(const std::vector<std::string>& overrides)
      : e(small_experiment(overrides)),
        model(Model::build(e.model)),
        data(std::make_shared<const Dataset>(testing::synthetic_dataset(96, 32))),
        backends(plan_devices(e.devices, {}).factory()) {}
};

struct LoggedSteps : RunObserver {
  std::vector<int64_t> steps;
  void on_step(const StepRecord& r) override { steps.push_back(r.step); }
};
}  // namespace

TEST_CASE("a transport that sums wrongly stops the run at set-up naming it and the element",
          "[worker][comm]") {
  const CpuSetup run({"train.steps=2", "devices.cpu_workers=2"});
  {
    // The real transport passes the check and trains.
    auto comm = std::make_shared<ThreadCommunicator>(2);
    Trainer trainer(run.e, run.model, run.data, run.backends, 2, comm);
    trainer.step();
  }
  // One that gets element 5 of replica 1's sums wrong from the first call: what a GPU link with a
  // broken peer path does.
  auto comm =
      std::make_shared<testing::FaultyCommunicator>(std::make_shared<ThreadCommunicator>(2), 1, 5);
  comm->arm();
  try {
    Trainer trainer(run.e, run.model, run.data, run.backends, 2, comm);
    FAIL("a trainer over a transport that sums wrongly started");
  } catch (const RuntimeError& error) {
    const std::string message = error.what();
    CHECK_THAT(message, Catch::Contains("summed known values wrongly before training"));
    CHECK_THAT(message, Catch::Contains("faulty in-process sum"));
    CHECK_THAT(message, Catch::Contains("element 5 of replica 1 is 19, the sum over the 2 "
                                        "replicas is 18"));
  }
}

TEST_CASE("replicas whose parameters part stop the run at the next logged step, naming them",
          "[worker][comm]") {
  const CpuSetup run(
      {"train.steps=8", "train.log_every=2", "devices.cpu_workers=3", "train.global_batch=48"});
  // Worker 2's gradient sums go wrong from step 5 (0-based 4) on, after the set-up check passed.
  auto comm =
      std::make_shared<testing::FaultyCommunicator>(std::make_shared<ThreadCommunicator>(3), 2);
  std::vector<int64_t> checkpoints;
  TrainerOptions options;
  options.phase_hook = [&](int, int64_t step, Phase phase) {
    if (step == 4 && phase == Phase::reduce) comm->arm();
  };
  options.checkpoint_every = 2;
  Trainer* trainer_ptr = nullptr;
  // Like the session's checkpoint writer: a checkpoint is a snapshot, which checks first.
  options.on_checkpoint = [&](int64_t step) {
    trainer_ptr->snapshot();
    checkpoints.push_back(step);
  };
  Trainer trainer(run.e, run.model, run.data, run.backends, 3, comm, 0, options);
  trainer_ptr = &trainer;
  LoggedSteps logged;
  try {
    trainer.run(logged);
    FAIL("replicas trained apart and the run went on");
  } catch (const RuntimeError& error) {
    const std::string message = error.what();
    CHECK_THAT(message, Catch::Contains("after step 6 the replicas' parameters differ: replica 2"));
    CHECK_THAT(message, Catch::Contains("equal at step 4"));
    CHECK_THAT(message, Catch::Contains("faulty"));
    CHECK_THAT(message, Catch::Contains("no checkpoint is written past step 4"));
    CHECK_THAT(message, !Catch::Contains("replica 1"));
  }
  // Steps 2 and 4 were logged and checkpointed; step 6, where the parting showed, is neither.
  CHECK(logged.steps == std::vector<int64_t>{2, 4});
  CHECK(checkpoints == std::vector<int64_t>{2, 4});
}

TEST_CASE("replicas that agree pass every check, and a checkpoint between logs is checked too",
          "[worker][comm]") {
  const CpuSetup run(
      {"train.steps=5", "train.log_every=2", "devices.cpu_workers=2", "train.global_batch=32"});
  auto comm =
      std::make_shared<testing::FaultyCommunicator>(std::make_shared<ThreadCommunicator>(2), 1);
  Trainer trainer(run.e, run.model, run.data, run.backends, 2, comm);
  LoggedSteps logged;
  trainer.run(logged);
  CHECK(logged.steps == std::vector<int64_t>{2, 4, 5});
  trainer.snapshot();  // agrees
  // Parted after the last log: the checkpoint's snapshot refuses.
  comm->arm();
  trainer.step();
  CHECK_THROWS_WITH(trainer.snapshot(),
                    Catch::Contains("after step 6 the replicas' parameters differ: replica 1") &&
                        Catch::Contains("equal at step 5"));
}
