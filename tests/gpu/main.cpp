// Entry point of gpu_tests: exits 77 (CTest SKIP_RETURN_CODE) when no GPU is visible, saying why,
// so a machine without a GPU reports these tests as skipped rather than passed.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <string>

#include "backend/cuda_devices.hpp"
#include "build_info.hpp"
#include "gpu/gpu_support.hpp"

int main(int argc, char* argv[]) {
  if (MNIST_CUDA_EMULATED) {
    // The cuDNN cases only mean something with cuDNN on a real GPU: a run asking for them alone
    // is reported skipped, never passed (CTest's gpu_tests_emulated_cudnn).
    for (int i = 1; i < argc; ++i) {
      if (std::string(argv[i]) == "[cudnn]") {
        std::fprintf(stderr, "gpu_tests: skipped: the [cudnn] cases: cuDNN is not emulated\n");
        return 77;
      }
    }
  }
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
