#pragma once
// That every process of a multi-process run trains the same thing. Lives in train/, not comm/:
// it needs the experiment and the data, which the transport layer knows nothing of.

#include "comm/process_group.hpp"
#include "config/experiment.hpp"
#include "data/dataset.hpp"

namespace mnist {

// Collective, after every rank has loaded its config and data: each rank reads its own files, so
// a node with another config file, other --set overrides or other data would silently train a
// different model and the replicas' updates would no longer agree. Compares a hash of the resolved
// experiment (without devices, output and data paths, which may differ per node) and of the
// dataset's pixels and labels; throws ConfigError (experiment) or DataError (data) on every rank
// alike, naming the ranks that differ from rank 0.
void check_same_run(ProcessGroup& group, const Experiment& experiment, const Dataset& data);

}  // namespace mnist
