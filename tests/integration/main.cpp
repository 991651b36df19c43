// Catch2 entry point for the integration tests: they run the mnist-train binary or read real data.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdlib>

int main(int argc, char* argv[]) {
  // As the tool sets it for itself (apps/mnist-train/main.cpp), so a run started by a test does
  // not start itself a second time to set it; a variable already set (a test of the tool's own
  // default unsets it for its run) is kept.
  ::setenv("OMP_WAIT_POLICY", "passive", 0);
  return Catch::Session().run(argc, argv);
}
