// The sampler: epoch permutations, batches across epoch boundaries, sharding across workers.
#include <catch2/catch.hpp>

#include <set>

#include "data/sampler.hpp"

using namespace mnist;

TEST_CASE("each epoch visits every sample exactly once, across batch boundaries", "[sampler]") {
  const int n = 1000, batch = 96;  // 1000 is not a multiple of 96: batches straddle epochs
  EpochSampler sampler(n, 5);
  std::vector<int32_t> stream;
  std::vector<int32_t> buf(batch);
  for (int64_t step = 0; step < 3 * n / batch + 1; ++step) {
    sampler.batch_indices(step, batch, buf.data());
    stream.insert(stream.end(), buf.begin(), buf.end());
  }
  for (int epoch = 0; epoch < 3; ++epoch) {
    std::set<int32_t> seen(stream.begin() + epoch * n, stream.begin() + (epoch + 1) * n);
    CHECK(seen.size() == static_cast<std::size_t>(n));
    CHECK(*seen.begin() == 0);
    CHECK(*seen.rbegin() == n - 1);
  }
  // Different epochs are shuffled differently; different seeds differ.
  CHECK(!std::equal(stream.begin(), stream.begin() + n, stream.begin() + n));
  EpochSampler other(n, 6);
  other.batch_indices(0, batch, buf.data());
  CHECK(!std::equal(buf.begin(), buf.end(), stream.begin()));
}

TEST_CASE("batches are a pure function of the step (resume and order independence)", "[sampler]") {
  EpochSampler a(500, 9), b(500, 9);
  std::vector<int32_t> x(64), y(64);
  a.batch_indices(17, 64, x.data());
  b.batch_indices(3, 64, y.data());  // visit other epochs first
  b.batch_indices(40, 64, y.data());
  b.batch_indices(17, 64, y.data());
  CHECK(x == y);
}

TEST_CASE("worker slices partition the global batch", "[sampler]") {
  for (int workers : {1, 2, 3, 4, 7}) {
    for (int batch : {7, 24, 1000, 1001}) {
      if (batch < workers) continue;
      int total = 0;
      for (int k = 0; k < workers; ++k) {
        const int size = slice_begin(batch, workers, k + 1) - slice_begin(batch, workers, k);
        CHECK(size >= batch / workers);
        CHECK(size <= batch / workers + 1);
        total += size;
      }
      CHECK(total == batch);
      CHECK(slice_begin(batch, workers, 0) == 0);
    }
  }
  // In one epoch, the union of all workers' slices is the epoch, with no sample twice.
  const int n = 600, batch = 60, workers = 3;
  EpochSampler sampler(n, 1);
  std::vector<int32_t> global(batch);
  std::multiset<int32_t> seen;
  for (int step = 0; step < n / batch; ++step) {
    sampler.batch_indices(step, batch, global.data());
    for (int k = 0; k < workers; ++k)
      for (int i = slice_begin(batch, workers, k); i < slice_begin(batch, workers, k + 1); ++i)
        seen.insert(global[i]);
  }
  CHECK(seen.size() == static_cast<std::size_t>(n));
  CHECK(std::set<int32_t>(seen.begin(), seen.end()).size() == static_cast<std::size_t>(n));
}
