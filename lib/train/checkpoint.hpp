#pragma once
// Checkpoints as safetensors files, and the run directory's rolling set of them.
//
// File layout (safetensors, https://github.com/huggingface/safetensors):
//   bytes [0, 8)        N, the header length, unsigned 64-bit little-endian
//   bytes [8, 8 + N)    JSON header, padded with spaces so that 8 + N is a multiple of 8
//   bytes [8 + N, end)  tensor data, raw little-endian float32, packed in header order, no gaps
// Header: {"__metadata__": {string: string}, "<tensor>": {"dtype": "F32", "shape": [...],
//          "data_offsets": [begin, end]}, ...}, offsets in bytes relative to the data section.
//
// clang-format off
// Tensors (names are the model's TensorSlot names):
//   every parameter              e.g. "layers.0.conv2d.weight" [6, 1, 5, 5]
//   every state slot             batch-norm running statistics,
//                                e.g. "layers.1.batch_norm.running_mean"
//   "optimizer.m.<param name>"   Adam: first moment; SGD: the velocity (momentum buffer)
//   "optimizer.v.<param name>"   Adam only: second moment (SGD checkpoints have no optimizer.v.*)
// clang-format on
// Metadata (all values strings, as safetensors requires): see kMeta* below.
//
// PyTorch reads these with safetensors.torch.load_file(path) (metadata: safe_open(...).metadata()).

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <spdlog/logger.h>

#include "config/experiment.hpp"
#include "config/math_config.hpp"
#include "model/model.hpp"
#include "train/checkpoint_state.hpp"

namespace mnist {

// Required metadata keys, written by save_checkpoint and checked by load_checkpoint.
inline constexpr const char* kMetaFormatVersion = "format_version";  // "1"
inline constexpr const char* kMetaStep = "step";                     // steps completed, decimal
inline constexpr const char* kMetaEpoch = "epoch";      // step * global batch / train size
inline constexpr const char* kMetaSampler = "sampler";  // kSamplerName
inline constexpr const char* kMetaSeed = "seed";        // experiment seed: keys every RNG stream
inline constexpr const char* kMetaOptimizer = "optimizer";       // "adam" | "sgd"
inline constexpr const char* kMetaConfig = "config";             // to_yaml(experiment)
inline constexpr const char* kMetaConfigHash = "config_hash";    // math_config_hash(experiment)
inline constexpr const char* kMetaMathConfig = "math_config";    // math_config_text(experiment)
inline constexpr const char* kMetaToolVersion = "tool_version";  // MNIST_VERSION
inline constexpr const char* kMetaDataSource = "data_source";    // Dataset::provenance (may be "")

// The selection's state (CheckpointState::selection, train/selection.hpp), written when it holds a
// best (best_step >= 0) and read back into it; all five or none. Numbers in decimal, exact.
inline constexpr const char* kMetaBestStep = "best_step";
inline constexpr const char* kMetaBestAccuracy = "best_validation_accuracy";
inline constexpr const char* kMetaBestLoss = "best_validation_loss";
inline constexpr const char* kMetaEvaluationsSinceBest = "evaluations_since_best";
inline constexpr const char* kMetaLastValidationStep = "last_validation_step";

inline constexpr const char* kCheckpointFormatVersion = "1";
// The sampler's position is a pure function of (seed, step): recording the step is enough to
// resume the data order exactly, as long as the sampler algorithm is this one.
inline constexpr const char* kSamplerName = "epoch-permutation/v1";
// safetensors' own limit on the header; anything larger is damage, not a checkpoint.
inline constexpr uint64_t kMaxHeaderBytes = 100'000'000;

// CheckpointState: train/checkpoint_state.hpp.

// Writes `ckpt` for `model` to `path` atomically: the bytes go to a temporary file in the same
// directory, which is fsynced and renamed over `path`, then the directory is fsynced. A crash at
// any moment leaves either the old file or the complete new one under `path`, never a partial one.
// Throws RuntimeError when the buffer sizes do not match the model and optimizer (a caller bug)
// or when the file cannot be written (disk full, permissions: a failure of the run, exit 1).
void save_checkpoint(const std::string& path, const Model& model, const Experiment& experiment,
                     const CheckpointState& ckpt);

// Reads `path` and validates all of it against `model` before returning anything: layout, header
// JSON, every tensor's dtype / shape / offsets, the set of tensor names, the required metadata.
// Throws DataError naming the file and the problem. Does NOT compare the config: call
// check_resume_compatible for that.
CheckpointState load_checkpoint(const std::string& path, const Model& model);

// The header and metadata only, validated (no tensors, no model needed): `mnist-train eval` reads
// the config the checkpoint was trained with from here before it can build the model.
CheckpointState read_checkpoint_metadata(const std::string& path);

// ---- what must match to resume ----------------------------------------------------------------

// math_config_text / math_config_hash / math_config_differences: config/math_config.hpp.
// Throws ConfigError naming `path` and listing the differing keys when the checkpoint's hash
// differs from the experiment's; also when its optimizer or sampler cannot continue this run.
void check_resume_compatible(const CheckpointState& ckpt, const Experiment& experiment,
                             const std::string& path);

// ---- the run directory's checkpoints ----------------------------------------------------------

// <run_dir>/checkpoints/step-<step, at least 6 digits>.safetensors; keeps the newest `keep`.
// Beside them best.safetensors, the best checkpoint by the validation metric (train.keep_best):
// never counted among the `keep`, never resumed from.
class CheckpointDirectory {
 public:
  // Creates the folder if needed and removes temporary files a crashed writer left behind.
  // `logger` receives warnings (spdlog's default logger when null).
  CheckpointDirectory(const std::string& run_dir, int keep,
                      std::shared_ptr<spdlog::logger> logger = nullptr);

  const std::string& dir() const { return dir_; }
  std::string path_for(int64_t step) const;
  std::string best_path() const;  // <run_dir>/checkpoints/best.safetensors

  // Saves atomically, then deletes the oldest checkpoints beyond `keep`. Returns the path written.
  std::string save(const Model& model, const Experiment& experiment, const CheckpointState& ckpt);
  // Saves `ckpt` atomically as best_path(), replacing the previous best. Returns the path.
  std::string save_best(const Model& model, const Experiment& experiment,
                        const CheckpointState& ckpt);

  // Final-named checkpoint files, oldest (lowest step) first.
  std::vector<std::string> list() const;

  struct Found {
    std::string path;
    CheckpointState state;
    std::vector<std::string> skipped;  // newer files that failed to load, with the reason
  };
  // The newest checkpoint that loads and validates against `model`; newer damaged ones are
  // skipped with a warning each. nullopt when there is none.
  std::optional<Found> latest_valid(const Model& model) const;

 private:
  std::string dir_;
  int keep_;
  std::shared_ptr<spdlog::logger> log_;
};

}  // namespace mnist
