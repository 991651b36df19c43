#include "data/sampler.hpp"

#include <numeric>

#include "core/error.hpp"
#include "core/rng.hpp"

namespace mnist {

EpochSampler::EpochSampler(int dataset_size, uint64_t seed) : size_(dataset_size), seed_(seed) {
  MNIST_CHECK(dataset_size >= 1, "sampler over an empty dataset");
}

const std::vector<int32_t>& EpochSampler::permutation(int64_t epoch) {
  for (int i = 0; i < 2; ++i)
    if (cached_epoch_[i] == epoch) return cached_[i];
  // Replace the older of the two cached epochs.
  const int slot = cached_epoch_[0] <= cached_epoch_[1] ? 0 : 1;
  std::vector<int32_t>& perm = cached_[slot];
  perm.resize(size_);
  std::iota(perm.begin(), perm.end(), 0);
  const RngKey key = make_rng_key(seed_, 0x3000u);
  for (int i = size_ - 1; i > 0; --i) {
    const uint32_t bits = philox4x32(static_cast<uint32_t>(i), static_cast<uint32_t>(epoch),
                                     static_cast<uint32_t>(epoch >> 32), 0, key.k0, key.k1)
                              .v[0];
    // Multiply-shift maps 32 random bits onto [0, i] (bias below 2^-32 * N, negligible here).
    const int j =
        static_cast<int>((static_cast<uint64_t>(bits) * static_cast<uint64_t>(i + 1)) >> 32);
    std::swap(perm[i], perm[j]);
  }
  cached_epoch_[slot] = epoch;
  return perm;
}

void EpochSampler::batch_indices(int64_t step, int batch, int32_t* out) {
  MNIST_CHECK(step >= 0 && batch >= 1, "bad sampler request: step {}, batch {}", step, batch);
  int64_t position = step * static_cast<int64_t>(batch);
  for (int filled = 0; filled < batch;) {
    const int64_t epoch = position / size_;
    const int offset = static_cast<int>(position % size_);
    const std::vector<int32_t>& perm = permutation(epoch);
    const int take = std::min(batch - filled, size_ - offset);
    std::copy(perm.begin() + offset, perm.begin() + offset + take, out + filled);
    filled += take;
    position += take;
  }
}

}  // namespace mnist
