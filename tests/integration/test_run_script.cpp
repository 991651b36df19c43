// scripts/run.sh fetches the dataset the run will read: the config's, or the one a --set
// data.dataset=X override names. Run in a copy of the scripts whose set-up, build and fetch are
// stand-ins that record what they were asked.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "support/command.hpp"
#include "support/idx_writer.hpp"

namespace fs = std::filesystem;

namespace {

std::string fetched_for(const std::string& args) {
  mnist::test::ScratchDir tmp;
  const fs::path root = tmp.path();
  fs::create_directories(root / "scripts");
  fs::create_directories(root / "configs");
  fs::create_directories(root / "build/bin");
  fs::copy_file(fs::path(MNIST_SOURCE_DIR) / "scripts/run.sh", root / "scripts/run.sh");
  fs::copy_file(fs::path(MNIST_SOURCE_DIR) / "configs/cpu_quickstart.yaml",
                root / "configs/cpu_quickstart.yaml");
  auto stub = [](const fs::path& path, const std::string& body) {
    std::ofstream(path) << "#!/bin/sh\n" << body;
    fs::permissions(path, fs::perms::owner_all);
  };
  stub(root / "scripts/setup.sh", "exit 0\n");
  stub(root / "scripts/build.sh", "exit 0\n");
  stub(root / "scripts/fetch_data.sh", "echo \"$1\" > \"$(dirname \"$0\")/../fetched\"\n");
  stub(root / "build/bin/mnist-train", "exit 0\n");
  const std::string command = "env -u BUILD_DIR bash '" + (root / "scripts/run.sh").string() +
                              "' configs/cpu_quickstart.yaml " + args + " 2>&1";
  const mnist::test::CommandResult r = mnist::test::run_command(command);
  const std::string& out = r.output;
  INFO(out);
  REQUIRE(r.code != -1);
  REQUIRE(r.code == 0);
  std::ifstream in(root / "fetched");
  std::string fetched;
  std::getline(in, fetched);
  return fetched;
}

}  // namespace

TEST_CASE("run.sh fetches the dataset an override names, not only the config's", "[scripts]") {
  CHECK(fetched_for("") == "mnist");  // cpu_quickstart.yaml's
  CHECK(fetched_for("--set data.dataset=fashion-mnist") == "fashion-mnist");
  CHECK(fetched_for("--set train.steps=5 --set data.dataset=mnist-small") == "mnist-small");
  CHECK(fetched_for("--set=data.dataset=mnist-small") == "mnist-small");
}
