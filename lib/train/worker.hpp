#pragma once
// One replica's worker: what one device does for a run, hop by hop, on the thread that calls it.
// The trainer runs one per device thread; `mnist-train bench` and `mnist-train eval` run one on the
// main thread. All three go through the same set-up (backend, replica, dataset upload, weights) and
// the same step, so the benchmark times exactly what training runs.
//
// One training step s at learning rate lr of worker k (Worker::train_step({s, lr}, ...)):
//   gather     step s's values (StepScalars: the step, lr, bias corrections, epsilon) into device
//              memory, one launch, and its slice [slice_begin[k], slice_begin[k+1]) of step s's
//              global batch, drawn from its own batch source (RunInputs::make_batch_source)
//   forward    every layer + loss (sync batch norm all-reduces statistics here)
//   backward   gradients of (per-sample loss sum) / global batch into the flat gradient buffer
//   all_reduce one sum over [gradients | loss sum, correct, samples] across every replica
//   update     apply_optimizer_step: the same update on every replica
// Each hop is a method of its own, so a caller can time, watch or capture them one by one. Only
// gather takes the step (StepContext); every later hop's kernels read the step's values where
// gather put them, so the hops have one signature eager and captured.
//
// train.cuda_graph on a backend that captures (CUDA): the step's device work is captured once and
// replayed. The per-step values (dropout's step, Adam's bias corrections, epsilon, learning rate)
// live in the same StepScalars on the device, advanced there by the last kernel of each replay; the
// host sets them only when they do not follow (the first step, after a restore, a learning rate the
// schedule changed). The captured gather reads the slice's indices from a device ring of 64 steps,
// which the worker fills from its batch source in one queued copy every 64 steps; nothing waits.
// With one replica the step is one graph (there is nothing to sum); with several, the all-reduce
// runs between the graph of gather, forward and backward and the graph of the update. Eager
// instead: data.random_shift (host-side augmentation), sync batch norm over several replicas
// (collectives inside the forward pass), log_after_update, SGD (no test pins its captured step
// yet), and every backend that cannot capture.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "comm/communicator.hpp"
#include "config/experiment.hpp"
#include "data/dataset.hpp"
#include "data/sampler.hpp"
#include "model/model.hpp"
#include "model/replica.hpp"
#include "train/checkpoint_state.hpp"

namespace mnist {

enum class Phase { idle, setup, data, forward, backward, reduce, update, evaluate };
const char* to_string(Phase p);

// Global batch layout of a run: how many samples each replica trains on per step.
struct BatchPlan {
  int global_batch = 0;
  std::vector<int> slice_begin;  // size replicas + 1, indexed by GLOBAL replica index
  int64_t steps = 0;
};
// The most steps a run may plan: the steps of the schedule, the step counters of checkpoints and
// the dropout key (a 32-bit step, Backend::dropout_forward) all stay exact below it.
inline constexpr int64_t kMaxSteps = int64_t{1} << 31;
// Resolves train.batch_per_device / global_batch and steps / epochs against `replicas` replicas.
// Throws ConfigError when the global batch or the step count is beyond what the run represents.
BatchPlan plan_batches(const TrainConfig& train, int replicas, int train_size);

// What a training step's hops are told: its 0-based number and its learning rate.
struct StepContext {
  int64_t step = 0;
  double lr = 0;
};

// The optimizer's one home. The update of step `step` (0-based) at learning rate `lr` for the
// config's optimizer (Adam or SGD, its betas / momentum, epsilon style, weight decay mode).
OptimizerStep make_optimizer_step(const OptimizerConfig& config, double lr, int64_t step);
// The values step `step` puts in device memory for its kernels (Backend::step_scalars_set).
StepScalars step_values(const OptimizerConfig& config, const StepContext& step);
// The update of the step whose values are in *step (the replica's backend memory) on the
// replica's flat parameters from its flat gradients, updating its moments; with `advance` it
// leaves the next step's values there (the end of a step captured once and replayed).
void apply_optimizer_step(const OptimizerConfig& config, Replica& replica, StepScalars* step,
                          bool advance);

// Everything every worker of a run reads, for the whole run. Workers hold it by shared pointer, so
// a worker the watchdog had to leave behind inside a device call still owns all it can touch when
// (if ever) that call returns, whatever became of the trainer and its caller.
struct RunInputs {
  Experiment experiment;
  Model model;
  std::shared_ptr<const Dataset> data;
  // Null: a single replica with nothing to sum (`bench --no-allreduce`, evaluation); every
  // collective hop is then skipped, which for one replica changes no value.
  std::shared_ptr<Communicator> comm;
  BatchPlan plan;
  int replicas = 1;  // across all processes
  // Each worker's own batch source: the training set's EpochSampler with the run's seed, unless
  // make() was given another (tests).
  BatchSourceFactory batch_source;
  std::unique_ptr<BatchSource> make_batch_source() const;

  // The schedule's learning rate for 0-based `step` of `total_steps`, from optimizer.lr (times the
  // replicas with train.scale_lr_with_devices): the one rule the trainer and the benchmark use.
  double learning_rate(int64_t step, int64_t total_steps) const;

  static std::shared_ptr<const RunInputs> make(const Experiment& experiment, const Model& model,
                                               std::shared_ptr<const Dataset> data,
                                               std::shared_ptr<Communicator> comm, int replicas,
                                               BatchSourceFactory batch_source = nullptr);
};

// Called when a worker enters a hop (the trainer's watchdog and test hooks); may throw.
using PhaseCallback = std::function<void(Phase)>;

// Wall times of one step's hops on the host (device work may still be queued on a GPU).
struct StepTimes {
  double compute_ms = 0;  // gather + forward + backward
  double comm_ms = 0;     // gradient all-reduce
};

class Worker {
 public:
  // Set-up: the replica sized for the larger of its slice and train.eval_batch, the dataset (its
  // three splits) copied to the device once (its labels checked against the model's classes first:
  // a label out of range is a DataError, whatever the backend), the initial parameters
  // Model::initial_params(seed) and state; with several replicas, one all-reduce of known values
  // proves the transport sums right (check_communicator_sums). `local_rank`: index among this
  // process's workers (the communicator's); `replica_index`: index among all replicas (the batch
  // slice, the test-set shard).
  Worker(std::shared_ptr<const RunInputs> inputs, std::unique_ptr<Backend> backend, int local_rank,
         int replica_index);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // ---- the training step, hop by hop --------------------------------------------------------
  // The batch is the worker's batch source's for step.step.
  void gather(const StepContext& step);
  void forward();
  void backward();
  void all_reduce();  // the flat gradients and the metric slots, summed over every replica
  void update();
  // The whole step: the hops above in order, `on_phase` called before each. With `want_metrics`
  // the summed metric slots are ready for metrics() afterwards (after one more training-mode pass
  // with train.log_after_update). Without them nothing waits for the device.
  StepTimes train_step(const StepContext& step, bool want_metrics,
                       const PhaseCallback& on_phase = nullptr);

  // ---- around the steps ---------------------------------------------------------------------
  // Local batch norm: the running statistics replaced by their mean over the replicas.
  void average_state();
  // Loss and accuracy sums of this replica's shard of `split` (the test set or the validation
  // split: contiguous, as even as slice_begin makes them), summed over all replicas into the
  // metric slots (read them with metrics()).
  void evaluate(EvalSplit split, const PhaseCallback& on_phase = nullptr);
  // Evaluation-mode logits [n, classes] of test images [begin, begin + n), n <= max_batch()
  // (device pointer, valid until the next pass).
  const float* test_logits(int begin, int n);
  // The metric slots after train_step(want_metrics) or evaluate(): loss sum, correct, samples.
  void metrics(float out[kMetricSlots]);
  // Collective (every replica calls it): the CRC-32C of each replica's flat parameter buffer, in
  // global replica order, the same vector on every replica. Synchronous data parallelism keeps
  // the replicas' parameters bit for bit equal; a transport that delivered different sums to
  // different replicas makes them differ. With one replica, just its own.
  std::vector<uint32_t> parameter_checksums();

  // Host copies of the parameters, state and optimizer moments (moment2 only for Adam); `step` and
  // the metadata are the caller's.
  CheckpointState snapshot();
  // Loads `s` into the replica. Empty moments load as zeros (a model loaded for inference);
  // otherwise every size must match the model.
  void restore(const CheckpointState& s);

  // Waits for the device (and so for every queued copy out of the captured step's index ring).
  void synchronize();
  Backend& backend() const { return *backend_; }
  Replica& replica() { return *replica_; }
  int slice_size() const { return slice_n_; }
  const RunInputs& inputs() const { return *inputs_; }

 private:
  // Host-side copies for data.random_shift (see gather).
  struct Shifted;
  // The captured step (train.cuda_graph), when this worker's step can be captured.
  struct Graphs;
  bool can_capture() const;
  // The host just waited for every call queued so far (a copy back, a synchronize): every queued
  // upload of the captured step's indices has run, so their page-locked staging is free.
  void caught_up();
  // True when there is more than one replica to sum over: every collective hop is skipped
  // otherwise, which for one replica changes no value and saves a communicator call per step.
  bool sums_across_replicas() const { return inputs_->comm && inputs_->replicas > 1; }
  StepTimes graph_step(const StepContext& step, const std::function<void(Phase)>& enter);
  // Several replicas: one all-reduce of known values, compared on the host; a wrong sum is a
  // RuntimeError naming the transport (set-up, before any step).
  void check_communicator_sums();
  static constexpr std::size_t kKnownValues = 64;  // check_communicator_sums' values
  // `values` summed over every replica through check_values_ (the checks' own transport calls).
  void all_reduce_from_host(std::vector<float>& values);
  // The step's values into step_values_ (one launch).
  void set_step_values(const StepContext& step);
  // The update hop; `advance` only in the captured step (see apply_optimizer_step).
  void update(bool advance);
  // A gather of the resident images at `indices` (device memory) into the replica's input.
  BatchGather resident_batch(const uint8_t* pixels, const uint8_t* labels, int pixels_per_image,
                             const int32_t* indices) const;
  // This worker's slice of step `step`'s global batch (valid until the next call).
  const int32_t* slice_of(int64_t step);
  // Images [begin, begin + n) of `split` into the replica's input, and the pass set to evaluation
  // mode.
  void gather_eval(EvalSplit split, int begin, int n);

  std::shared_ptr<const RunInputs> inputs_;
  std::unique_ptr<Backend> backend_;
  int local_rank_, replica_index_;
  int slice_lo_ = 0, slice_n_ = 0;
  std::unique_ptr<Replica> replica_;
  DeviceBuffer<uint8_t> train_pixels_, train_labels_, test_pixels_, test_labels_;
  DeviceBuffer<uint8_t> validation_pixels_, validation_labels_;  // empty without a validation split
  DeviceBuffer<int32_t> indices_;
  std::vector<int32_t> host_indices_;
  std::unique_ptr<BatchSource> batches_;
  std::vector<int32_t> global_batch_;  // the last step's global batch, drawn by slice_of
  std::unique_ptr<Shifted> shifted_;
  std::unique_ptr<Graphs> graphs_;
  DeviceBuffer<StepScalars> step_values_;  // the step's values, which every training kernel reads
  DeviceBuffer<float> check_values_;       // with several replicas: the agreement checks' scratch
  PassContext pass_;
};

}  // namespace mnist
