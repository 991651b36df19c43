// scripts/bench_cpu_vs_pytorch.sh compares against PyTorch with glibc's allocator tuned and prints
// the untuned figure beside it. A stand-in interpreter plays PyTorch: 4000 samples/s when it sees
// the tuning, 1000 without, so each ratio can be checked against mnist-train's own figure.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>

#include "support/command.hpp"
#include "support/idx_writer.hpp"

TEST_CASE("the CPU comparison's ratio is against the tuned PyTorch, the untuned one beside it",
          "[scripts]") {
  mnist::test::ScratchDir tmp;
  const std::string python = tmp.file("python");
  std::ofstream(python) << "#!/bin/sh\n"
                           "[ \"$1\" = -c ] && exit 0\n"
                           "cat >/dev/null\n"
                           "if [ \"${MALLOC_MMAP_MAX_:-}\" = 0 ] && "
                           "[ \"${MALLOC_TRIM_THRESHOLD_:-}\" = -1 ]; then\n"
                           "  echo 'pytorch cpu: 4.000 ms/step, 4000 samples/s'\n"
                           "else\n"
                           "  echo 'pytorch cpu: 16.000 ms/step, 1000 samples/s'\n"
                           "fi\n";
  std::filesystem::permissions(python, std::filesystem::perms::owner_all);
  const std::string command = "cd '" MNIST_SOURCE_DIR "' && PYTHON='" + python +
                              "' MNIST_TRAIN='" MNIST_TRAIN_BIN
                              "' bash scripts/bench_cpu_vs_pytorch.sh --rounds 1 --batch 16 "
                              "--steps 1 --threads 1 2>&1";
  const mnist::test::CommandResult r = mnist::test::run_command(command);
  const std::string& out = r.output;
  INFO(out);
  REQUIRE(r.code != -1);
  REQUIRE(r.code == 0);
  std::smatch m;
  REQUIRE(std::regex_search(out, m,
                            std::regex(R"(mnist-train \(native, 1 threads\) (\d+) samples/s)")));
  const double ours = std::stod(m[1]);
  char expected[160];
  std::snprintf(expected, sizeof(expected),
                "ratio: %.2fx against tuned pytorch (%.2fx against untuned)", ours / 4000,
                ours / 1000);
  CHECK(out.find(expected) != std::string::npos);
  CHECK(out.find("pytorch tuned 4000 samples/s") != std::string::npos);
  CHECK(out.find("pytorch untuned 1000 samples/s") != std::string::npos);
  CHECK(out.find("load average while measuring: ") != std::string::npos);
}
