#pragma once
// The data-parallel engine: persistent worker threads (one per device), each owning a replica, and
// a coordinator (the thread that calls run()) that schedules steps and watches the workers.
//
// One step:  coordinator: global batch indices for step s  ──►  every worker k:
//   data     gather its slice [begin_k, end_k) of the global batch on its device
//   forward  forward + loss (sync batch norm all-reduces statistics here)
//   backward gradients of (per-sample loss sum) / global batch into the flat gradient buffer
//   reduce   one all-reduce (sum) over [gradients | loss sum, correct, samples]
//   update   the same optimizer step on every replica, so replicas never drift
// A failure in any worker aborts the communicator (waking the others) and surfaces from run() as
// one RuntimeError naming the worker, device, step and phase; a worker that stays in one phase
// longer than train.watchdog_seconds is reported as stalled instead of hanging the run.

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

namespace mnist {

enum class Phase { idle, setup, data, forward, backward, reduce, update, evaluate };
const char* to_string(Phase p);

// Figures of one logged training step (the global batch's, reduced over all replicas).
struct StepRecord {
  int64_t step = 0;  // 1-based: steps completed
  int64_t total_steps = 0;
  double epoch = 0;
  double loss = 0, accuracy = 0;
  double lr = 0;
  double samples_per_second = 0;  // since the previous logged step
  double compute_ms = 0;          // per step, slowest worker, data + forward + backward
  double comm_ms = 0;             // per step, slowest worker, gradient all-reduce
};

struct EvalRecord {
  int64_t step = 0;
  double loss = 0, accuracy = 0;
  int64_t samples = 0;
};

// Where the run stands after every step (logged or not): what a live progress display needs.
struct ProgressRecord {
  int64_t step = 0;  // steps completed
  int64_t total_steps = 0;
  int64_t first_step = 0;         // where this run started (non-zero after a resume)
  double elapsed_seconds = 0;     // wall time since this run's first step started
  double samples_per_second = 0;  // over this run so far
};

struct TrainSummary {
  int64_t steps = 0;
  int global_batch = 0;
  double wall_seconds = 0;        // training steps only (setup and evaluation excluded)
  double samples_per_second = 0;  // steps * global batch / wall_seconds
  StepRecord last_step;
  EvalRecord final_eval;  // not filled when the run stopped early
  int stop_reason = 0;    // non-zero: TrainerOptions::stop_requested ended the run at `steps`
};

class RunObserver {
 public:
  virtual ~RunObserver() = default;
  virtual void on_step(const StepRecord&) {}
  virtual void on_eval(const EvalRecord&) {}
  virtual void on_progress(const ProgressRecord&) {}
};

// Several observers fed the same records, in the order given.
class RunObservers : public RunObserver {
 public:
  explicit RunObservers(std::vector<RunObserver*> observers) : observers_(std::move(observers)) {}
  void on_step(const StepRecord& r) override {
    for (RunObserver* o : observers_) o->on_step(r);
  }
  void on_eval(const EvalRecord& r) override {
    for (RunObserver* o : observers_) o->on_eval(r);
  }
  void on_progress(const ProgressRecord& r) override {
    for (RunObserver* o : observers_) o->on_progress(r);
  }

 private:
  std::vector<RunObserver*> observers_;
};

// Creates worker k's backend; called on worker k's own thread (a CUDA context is per thread).
using BackendFactory = std::function<std::unique_ptr<Backend>(int worker)>;

struct TrainerOptions {
  // Called by every worker when it enters a phase; tests throw from it to inject failures.
  std::function<void(int worker, int64_t step, Phase phase)> phase_hook;
  // Polled by the coordinator after every step: when it returns non-zero, run() finishes the step
  // in flight and returns early with TrainSummary::stop_reason set to that value (signal handlers
  // set it).
  std::function<int()> stop_requested;
  // Called by the coordinator after every step whose number is a multiple of `checkpoint_every`
  // (and not after the last step: the caller saves the final state itself).
  int64_t checkpoint_every = 0;
  std::function<void(int64_t step)> on_checkpoint;
};

// Global batch layout of a run: how many samples each local worker trains on per step.
struct BatchPlan {
  int global_batch = 0;
  std::vector<int> slice_begin;  // size workers + 1, for the GLOBAL replica index
  int64_t steps = 0;
};
// Resolves train.batch_per_device / global_batch and steps / epochs against `replicas` replicas.
BatchPlan plan_batches(const TrainConfig& train, int replicas, int train_size);

class Trainer {
 public:
  // `first_replica`: global index of this process's first worker (MPI rank * local workers).
  Trainer(const Experiment& experiment, const Model& model, const Dataset& data,
          BackendFactory factory, int local_workers, Communicator& comm, int first_replica = 0,
          TrainerOptions options = {});
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Trains plan().steps steps from the current step, logging and evaluating as configured.
  TrainSummary run(RunObserver& observer);
  // Runs one step (no logging); returns nothing. For tests and benchmarks.
  void step();
  // Test-set loss and accuracy in evaluation mode, over all replicas' shards.
  EvalRecord evaluate();

  const BatchPlan& plan() const { return plan_; }
  int64_t current_step() const { return next_step_; }
  std::string device_names() const;
  // Worker 0's parameters / batch-norm state, copied to the host.
  std::vector<float> params();
  std::vector<float> state();

  // Everything a checkpoint holds: parameters, batch-norm running statistics (averaged over the
  // replicas first with local batch norm), optimizer moments; `step` = steps completed.
  struct Snapshot {
    int64_t step = 0;
    std::vector<float> params, state, moment1, moment2;
  };
  Snapshot snapshot();
  // Loads a snapshot into every replica and continues from its step. Sizes must match the model.
  void restore(const Snapshot& snapshot);

 private:
  struct Shared;
  struct Worker;
  void dispatch(int job);
  void train_step(bool want_metrics);
  void worker_main(int k);

  const Experiment& experiment_;
  const Model& model_;
  const Dataset& data_;
  Communicator& comm_;
  BatchPlan plan_;
  int local_workers_;
  int first_replica_;
  int64_t next_step_ = 0;
  std::unique_ptr<EpochSampler> sampler_;
  std::shared_ptr<Shared> shared_;
};

}  // namespace mnist
