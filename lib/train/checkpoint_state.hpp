#pragma once
// What a checkpoint holds, as host copies of one replica's buffers: the worker fills and loads it
// (Worker::snapshot, restore), train/checkpoint.hpp writes and reads it as a safetensors file.
// Its own header so that a worker need not know the file format.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace mnist {

// Everything a resume needs. Vectors are host copies of the replica's flat buffers.
struct CheckpointState {
  int64_t step = 0;            // steps completed: training resumes with step `step` (0-based)
  double epoch = 0;            // informational
  std::string data_source;     // Dataset::provenance
  std::vector<float> params;   // [model.param_count()]
  std::vector<float> state;    // [model.state_count()]
  std::vector<float> moment1;  // [model.param_count()]: Adam m, or SGD velocity
  std::vector<float> moment2;  // [model.param_count()] for Adam; empty for SGD
  // save: extra keys to record besides the required ones (a required key here is an error).
  // load: every metadata key of the file, required ones included.
  std::map<std::string, std::string> metadata;
};

}  // namespace mnist
