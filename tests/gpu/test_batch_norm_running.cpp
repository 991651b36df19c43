// Batch norm's running statistics on the GPU are bit-identical to the CPU's (both twins follow
// backend/batch_norm_rule.hpp), however many steps they accumulate over: a checkpoint written by a
// GPU run then evaluates the same on either device.
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <vector>

#include "backend/backend.hpp"
#include "gpu/gpu_support.hpp"

using namespace gpu_test;

namespace {

// Count of elements whose bit patterns differ (so -0 vs +0 and NaN payloads count too).
std::size_t bit_mismatches(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) ++wrong;
  return wrong;
}

}  // namespace

TEST_CASE("batch norm running statistics are bit-identical to the CPU over 100 updates",
          "[gpu][batch_norm]") {
  mnist::Backend& g = gpu();
  // The seed network's three batch norms (6 and 12 channels of 28x28 / 14x14 at batch 1024, 100
  // units) and an odd channel count; decay as the seed's, and one far from it.
  struct Case {
    int c;
    double count;
    float decay;
  };
  for (const Case& cc : {Case{6, 1024.0 * 784, 0.9f}, Case{12, 1024.0 * 196, 0.9f},
                         Case{100, 1024.0, 0.9f}, Case{7, 33.0, 0.37f}}) {
    INFO("channels " << cc.c << ", count " << cc.count << ", decay " << cc.decay);
    auto running_mean = upload(g, std::vector<float>(cc.c, 0.0f));
    auto running_var = upload(g, std::vector<float>(cc.c, 1.0f));
    std::size_t mean_wrong = 0, invstd_wrong = 0;
    for (int step = 0; step < 100; ++step) {
      // Plausible sums: per-channel means in [-1, 2) and variances in [0.01, 1.5).
      const auto means = random_floats(cc.c, 900 + step, -1.0f, 2.0f);
      const auto vars = random_floats(cc.c, 1900 + step, 0.01f, 1.5f);
      std::vector<float> sum(cc.c), sumsq(cc.c);
      for (int ch = 0; ch < cc.c; ++ch) {
        sum[ch] = static_cast<float>(means[ch] * cc.count);
        sumsq[ch] = static_cast<float>((vars[ch] + double(means[ch]) * means[ch]) * cc.count);
      }
      auto s = upload(g, sum);
      auto sq = upload(g, sumsq);
      auto mean = poisoned(g, cc.c);
      auto invstd = poisoned(g, cc.c);
      cpu().batch_norm_finalize(cc.c, cc.count, s.c(), sq.c(), 1e-3f, cc.decay, mean.c(),
                                invstd.c(), running_mean.c(), running_var.c());
      g.batch_norm_finalize(cc.c, cc.count, s.g(), sq.g(), 1e-3f, cc.decay, mean.g(), invstd.g(),
                            running_mean.g(), running_var.g());
      mean_wrong += bit_mismatches(download(cpu(), mean.cpu), download(g, mean.gpu));
      invstd_wrong += bit_mismatches(download(cpu(), invstd.cpu), download(g, invstd.gpu));
    }
    CHECK(mean_wrong == 0);
    CHECK(invstd_wrong == 0);
    CHECK(bit_mismatches(download(cpu(), running_mean.cpu), download(g, running_mean.gpu)) == 0);
    CHECK(bit_mismatches(download(cpu(), running_var.cpu), download(g, running_var.gpu)) == 0);

    // Evaluation reads them back through inference_params: the same bits again.
    auto inf_mean = poisoned(g, cc.c);
    auto inf_invstd = poisoned(g, cc.c);
    cpu().batch_norm_inference_params(cc.c, running_mean.c(), running_var.c(), 1e-3f, inf_mean.c(),
                                      inf_invstd.c());
    g.batch_norm_inference_params(cc.c, running_mean.g(), running_var.g(), 1e-3f, inf_mean.g(),
                                  inf_invstd.g());
    CHECK(bit_mismatches(download(cpu(), inf_invstd.cpu), download(g, inf_invstd.gpu)) == 0);
  }
}
