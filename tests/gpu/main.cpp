// Entry point of gpu_tests: exits 77 (CTest SKIP_RETURN_CODE) when no GPU is visible, saying why,
// so a machine without a GPU reports these tests as skipped rather than passed.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <string>

#include "backend/cuda_devices.hpp"
#include "gpu/gpu_support.hpp"

int main(int argc, char* argv[]) {
  std::string why;
  if (mnist::visible_gpu_count(&why) == 0) {
    std::fprintf(stderr, "gpu_tests: skipped: %s\n", why.c_str());
    return 77;
  }
  const int failures = Catch::Session().run(argc, argv);
  // Free device memory and handles while the CUDA runtime is still alive (not in static teardown).
  gpu_test::release_backends();
  return failures;
}
