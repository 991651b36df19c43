// cmake --install into a prefix of the user's own gives a tool that runs from any folder and finds
// its data through the data root (--data-root or MNIST_DATA), not the working directory.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <array>
#include <cstdio>
#include <filesystem>

#include "support/command.hpp"
#include "support/idx_writer.hpp"

namespace fs = std::filesystem;

namespace {

using Result = mnist::test::CommandResult;

Result shell(const std::string& command) {
  return mnist::test::run_command(command + " 2>&1");
}

bool has(const Result& r, const std::string& part) {
  return r.output.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("cmake --install gives a tool that runs anywhere and finds data through the data root",
          "[cli][install]") {
  const fs::path data = fs::path(MNIST_SOURCE_DIR) / "data";
  if (!fs::exists(data / "mnist-small/train-images-idx3-ubyte") &&
      !fs::exists(data / "mnist-small/train-images-idx3-ubyte.gz"))
    FAIL("this test trains on data/mnist-small: run scripts/fetch_data.sh mnist-small first");
  mnist::test::ScratchDir tmp;
  const std::string prefix = tmp.file("prefix");
  Result r = shell("cmake --install '" MNIST_BUILD_DIR "' --prefix '" + prefix + "'");
  INFO(r.output);
  REQUIRE(r.code == 0);
  const std::string bin = prefix + "/bin/mnist-train";
  const std::string share = prefix + "/share/mnist-train";
  CHECK(fs::exists(bin));
  CHECK(fs::exists(share + "/configs/cpu_quickstart.yaml"));
  CHECK(fs::exists(share + "/scripts/fetch_data.sh"));
  CHECK(fs::exists(share + "/scripts/slurm/one_node.sbatch"));

  // From a folder with no data/ in it.
  const std::string elsewhere = tmp.file("elsewhere");
  fs::create_directories(elsewhere);
  const std::string run = "cd '" + elsewhere + "' && env -u MNIST_DATA";
  const std::string config = " --config '" + share +
                             "/configs/cpu_quickstart.yaml' --set data.dataset=mnist-small "
                             "--set train.steps=1 --set train.batch_per_device=16 "
                             "--set devices.threads=1 ";
  r = shell(run + " '" + bin + "'" + config + "--dry-run");
  INFO(r.output);
  CHECK(r.code == 0);
  CHECK(has(r, "dir: data/mnist-small\n"));  // no root: the working directory's data/
  r = shell(run + " MNIST_DATA='" + data.string() + "' '" + bin + "'" + config + "--dry-run");
  CHECK(has(r, "dir: " + data.string() + "/mnist-small\n"));
  // Without a root the run does not find its data, and says where it looked.
  r = shell(run + " '" + bin + "'" + config + "--set output.dir=run0");
  CHECK(r.code == 2);
  CHECK(has(r, "data/mnist-small"));
  // MNIST_DATA, then --data-root (which wins over it): one step trained, a checkpoint written.
  r = shell(run + " MNIST_DATA='" + data.string() + "' '" + bin + "'" + config +
            "--set output.dir=run1");
  INFO(r.output);
  CHECK(r.code == 0);
  CHECK(fs::exists(elsewhere + "/run1/checkpoints/step-000001.safetensors"));
  r = shell(run + " MNIST_DATA=/nonexistent '" + bin + "'" + config + "--data-root '" +
            data.string() + "' --set output.dir=run2");
  INFO(r.output);
  CHECK(r.code == 0);
  // eval finds the checkpoint's data through the root as well.
  r = shell(run + " '" + bin + "' eval --data-root '" + data.string() +
            "' --checkpoint run2/checkpoints/step-000001.safetensors");
  INFO(r.output);
  CHECK(r.code == 0);
  CHECK(has(r, "test images 1505"));
}
