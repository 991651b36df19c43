#pragma once
// What a checkpoint holds, as host copies of one replica's buffers: the worker fills and loads it
// (Worker::snapshot, restore), train/checkpoint.hpp writes and reads it as a safetensors file.
// Its own header so that a worker need not know the file format.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace mnist {

// Where the choice of the best checkpoint stands (train.keep_best, train.patience,
// train/selection.hpp): what a resumed run needs to go on judging its validation evaluations as
// the uninterrupted run would have. Saved in a checkpoint's metadata; best_step -1 (nothing
// judged yet, or a run that keeps no best) writes nothing.
struct SelectionState {
  int64_t best_step = -1;                   // steps completed at the best evaluation so far
  double best_accuracy = 0, best_loss = 0;  // its validation accuracy and loss
  int evaluations_since_best = 0;           // evaluations judged after it that did not improve
  int64_t last_step = -1;                   // the step of the last evaluation judged
};

// Everything a resume needs. Vectors are host copies of the replica's flat buffers.
struct CheckpointState {
  int64_t step = 0;            // steps completed: training resumes with step `step` (0-based)
  double epoch = 0;            // informational
  std::string data_source;     // Dataset::provenance
  std::vector<float> params;   // [model.param_count()]
  std::vector<float> state;    // [model.state_count()]
  std::vector<float> moment1;  // [model.param_count()]: Adam m, or SGD velocity
  std::vector<float> moment2;  // [model.param_count()] for Adam; empty for SGD
  SelectionState selection;    // the trainer's (Trainer::snapshot); a worker leaves it as is
  // save: extra keys to record besides the required ones (a required key here is an error).
  // load: every metadata key of the file, required ones included.
  std::map<std::string, std::string> metadata;
};

}  // namespace mnist
