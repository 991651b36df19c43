#pragma once
// Which samples each step trains on.
//
// The training stream is the concatenation of epoch permutations: epoch e is a Fisher-Yates shuffle
// of [0, N) keyed by (seed, e). Step s takes stream positions [s*B, (s+1)*B): a batch that crosses
// an epoch boundary takes the end of one epoch and the start of the next, so every sample is seen
// once per epoch and no sample is dropped. The order is a pure function of (seed, N, B, s):
// resuming at step s, or splitting the batch across any number of workers, sees the same samples.

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace mnist {

// Where a run's batches come from: the dataset indices of the global batch of a step, a pure
// function of the step. Each worker owns one and draws its own slice from it, so the coordinator
// sends workers step numbers, and a captured step can upload many steps' indices at once. Not
// shared between threads (a source may cache).
class BatchSource {
 public:
  virtual ~BatchSource() = default;
  // out[0, batch) = dataset indices of the global batch of `step`.
  virtual void batch_indices(int64_t step, int batch, int32_t* out) = 0;
};
// Makes one worker's source. Runs use the epoch sampler (RunInputs); tests inject their own.
using BatchSourceFactory = std::function<std::unique_ptr<BatchSource>()>;

class EpochSampler : public BatchSource {
 public:
  EpochSampler(int dataset_size, uint64_t seed);

  void batch_indices(int64_t step, int batch, int32_t* out) override;
  int dataset_size() const { return size_; }

 private:
  const std::vector<int32_t>& permutation(int64_t epoch);

  int size_;
  uint64_t seed_;
  // The two most recent epochs' permutations (a batch spans at most two when B <= N).
  int64_t cached_epoch_[2] = {-1, -1};
  std::vector<int32_t> cached_[2];
};

// Fractional epoch reached after `steps` steps of `batch` over a dataset of `dataset_size`.
inline double epochs_after(int64_t steps, int batch, int dataset_size) {
  return static_cast<double>(steps) * batch / dataset_size;
}

// Splits n samples into `parts` contiguous slices as evenly as possible: slice k is
// [begin(k), begin(k+1)), sizes differ by at most one, earlier slices take the extra samples.
inline int slice_begin(int n, int parts, int k) {
  return static_cast<int>(static_cast<int64_t>(n) * k / parts);
}

}  // namespace mnist
