#pragma once
// TensorBoard event files for `output.tensorboard: true`:
// RUN_DIR/tb/events.out.tfevents.<time>.<host> with scalar summaries train/loss, train/accuracy,
// lr, samples_per_second (every logged step), eval/loss, eval/accuracy (every evaluation of the
// test set) and validation/loss, validation/accuracy (of the validation split), so
// `tensorboard --logdir runs/` shows a run as it trains.
//
// The file is a TFRecord stream: each record is
//   uint64 length (little-endian) | uint32 masked CRC-32C of those 8 bytes | data | uint32 masked
//   CRC-32C of data
// and each record's data is a protobuf `Event` (tensorflow/core/util/event.proto). The few fields
// written are encoded by hand here, which keeps protobuf out of the build:
//   Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
//   Summary { repeated Value value = 1; }
//   Value   { string tag = 1; float simple_value = 2; }

#include <cstdint>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "train/trainer.hpp"

namespace mnist {

namespace tensorboard {
// One Event message: wall time, step and scalar (tag, value) pairs; with no scalars and a non-empty
// `file_version`, the file's opening event.
std::string encode_event(double wall_time, int64_t step,
                         const std::vector<std::pair<std::string, float>>& scalars,
                         const std::string& file_version = "");
// `data` framed as one TFRecord.
std::string frame_record(const std::string& data);
}  // namespace tensorboard

class TensorBoardWriter : public RunObserver {
 public:
  // Creates `dir` (parents too) and a new event file in it, opened with the version event.
  explicit TensorBoardWriter(const std::string& dir);

  void on_step(const StepRecord& r) override;
  void on_eval(const EvalRecord& r) override;
  const std::string& path() const { return path_; }

 private:
  void write(int64_t step, const std::vector<std::pair<std::string, float>>& scalars);

  std::string path_;
  std::ofstream out_;
};

}  // namespace mnist
