// Accuracy on the official MNIST that scripts/test.sh fetches (60,000 / 10,000 images). Sized for
// a few seconds on 2 idle cores (300 steps of 256 = 76,800 images, 1.3 passes); the full seed
// run's figures are in docs/results.md.
#include <catch2/catch.hpp>

#include <filesystem>
#include <memory>

#include "comm/thread_communicator.hpp"
#include "config/experiment.hpp"
#include "data/dataset.hpp"
#include "model/model.hpp"
#include "train/device_plan.hpp"
#include "train/trainer.hpp"

using namespace mnist;

TEST_CASE("the seed network learns the full MNIST on the CPU", "[accuracy]") {
  const std::filesystem::path dir = std::filesystem::path(MNIST_SOURCE_DIR) / "data/mnist";
  if (!std::filesystem::exists(dir / kTrainImages) &&
      !std::filesystem::exists(dir / (std::string(kTrainImages) + ".gz"))) {
    // CTest reports this test as skipped on this line (tests/CMakeLists.txt); scripts/test.sh
    // fetches the files first, so CI runs it.
    WARN(MNIST_TEST_SKIPPED "no MNIST files in " << dir.string()
                                                 << ": run scripts/fetch_data.sh mnist");
    return;
  }
  const Experiment e =
      load_experiment(std::string(MNIST_SOURCE_DIR) + "/configs/seed_single_gpu.yaml",
                      {"devices.backend=cpu", "train.steps=300", "train.batch_per_device=256",
                       "train.log_every=100", "data.dir=" + dir.string()});
  const Model model = Model::build(e.model);
  const auto data = std::make_shared<const Dataset>(load_dataset(e.data, e.model.classes));
  REQUIRE(data->train.count == 60000);
  REQUIRE(data->test.count == 10000);
  Trainer trainer(e, model, data, plan_devices(e.devices, {}).factory(), 1,
                  std::make_shared<ThreadCommunicator>(1));
  RunObserver quiet;
  const TrainSummary s = trainer.run(quiet);
  INFO("test accuracy " << s.final_eval.accuracy << ", loss " << s.final_eval.loss);
  // Measured with this command line (mnist-train --config configs/seed_single_gpu.yaml --set
  // devices.backend=cpu --set train.steps=300 --set train.batch_per_device=256 --set seed=S):
  // 0.9856 (seed 42, the config's), 0.9870 / 0.9862 / 0.9876 (seeds 1-3). The floor leaves 0.0056
  // below the lowest, for float-order differences between machines and thread counts.
  CHECK(s.final_eval.accuracy >= 0.980);
  CHECK(s.final_eval.samples == 10000);
}
