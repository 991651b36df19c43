#pragma once
// The data-parallel engine: persistent worker threads (one per device), each running one Worker
// (train/worker.hpp: its replica and the step's hops), and a coordinator (the thread that calls
// run()) that hands every worker the next step number and watches them.
//
// One step:  coordinator: step s and its learning rate  ──►  every worker k:
//   Worker::train_step: gather its slice of step s's batch (drawn from its own batch source),
//   forward, backward, all-reduce, optimizer update.
// At every logged step and before every checkpoint the coordinator compares the replicas'
// parameter checksums (check_replicas_agree): replicas that no longer agree stop the run.
// A failure in any worker aborts the communicator (waking the others) and surfaces from the
// trainer's call as the worker's own exception (same type, so a DataError still exits 2) with
// "<device> failed at step N in phase 'P': " before its message. A worker that stays in one phase
// longer than train.watchdog_seconds is reported as stalled (train/watchdog.hpp) instead of
// hanging the run.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "comm/communicator.hpp"
#include "config/experiment.hpp"
#include "data/dataset.hpp"
#include "data/sampler.hpp"
#include "model/model.hpp"
#include "train/selection.hpp"
#include "train/worker.hpp"

namespace mnist {

// Figures of one logged training step (the global batch's, reduced over all replicas).
struct StepRecord {
  int64_t step = 0;  // 1-based: steps completed
  int64_t total_steps = 0;
  double epoch = 0;
  double loss = 0, accuracy = 0;
  double lr = 0;
  double samples_per_second = 0;  // since the previous logged step
  double compute_ms = 0;          // per step, slowest worker, data + forward + backward
  // Per step, the gradient all-reduce, split from the waiting in it: every worker leaves the
  // collective together, so the last to arrive (the shortest time in it) measures the reduction
  // itself, and the others waited for it besides. comm: that shortest time; wait: the longest
  // minus the shortest, how long the fastest worker waited for the slowest (0 with one worker).
  // Across processes the reduction includes waiting for the other processes.
  double comm_ms = 0;
  double wait_ms = 0;
};

// Figures of one evaluation (evaluation mode, over every replica's shard of the split).
struct EvalRecord {
  int64_t step = 0;  // steps completed by the parameters evaluated
  double loss = 0, accuracy = 0;
  int64_t samples = 0;
  EvalSplit split = EvalSplit::test;
  // validation, judged by train.keep_best (train/selection.hpp): whether it improved on the best
  // so far, and where the best stands after it (best_step -1: no best kept).
  bool improved = false;
  int64_t best_step = -1;
  int evaluations_since_best = 0;
  // test: the figures of the best checkpoint (at `step`), not of the parameters trained last.
  bool of_best = false;
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
  int64_t steps = 0;       // the step reached
  int64_t first_step = 0;  // the step this process started from (a resume's checkpoint step)
  int global_batch = 0;
  double wall_seconds = 0;        // the steps this process ran only (setup, evaluation excluded)
  double samples_per_second = 0;  // (steps - first_step) * global batch / wall_seconds
  StepRecord last_step;
  // The test set on the final parameters; not filled when a stop request ended the run.
  EvalRecord final_eval;
  int stop_reason = 0;  // non-zero: TrainerOptions::stop_requested ended the run at `steps`
  // With a validation split (data.validation_size > 0); the evaluations are not filled when a
  // stop request ended the run.
  bool has_validation = false;
  EvalRecord final_validation;  // the validation split on the final parameters
  KeepBest keep_best = KeepBest::none;
  SelectionState selection;    // the best evaluation by keep_best (best_step -1: none kept)
  bool stopped_early = false;  // train.patience evaluations without improvement ended the run
  // The test set on the best checkpoint: filled by the caller that saved it (run_session), nullopt
  // when none was kept or it could not be read back.
  std::optional<EvalRecord> best_test;
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
  // Called by the coordinator, between steps, after an evaluation of the validation split that
  // improved on the best so far (train.keep_best): the caller saves the best checkpoint
  // (snapshot() holds the parameters just evaluated). Called before the evaluation is reported.
  std::function<void(int64_t step)> on_best;
};

class Trainer {
 public:
  // `first_replica`: global index of this process's first worker (MPI rank * local workers).
  // The experiment and model are copied; the dataset and communicator are shared with the worker
  // threads, which own everything they touch (a worker the watchdog leaves behind may outlive the
  // Trainer and its caller's objects). Build `comm` before the Trainer (NCCL sets every rank up
  // before the first collective).
  Trainer(const Experiment& experiment, const Model& model, std::shared_ptr<const Dataset> data,
          BackendFactory factory, int local_workers, std::shared_ptr<Communicator> comm,
          int first_replica = 0, TrainerOptions options = {});
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Trains plan().steps steps from the current step, logging and evaluating as configured: every
  // train.eval_every steps the validation split when the dataset has one (judged by
  // train.keep_best; train.patience evaluations without improvement stop the run early, as does a
  // restored selection whose patience is spent), else the test set. At the end (unless a stop
  // request ended the run) the validation split, judged too, then the test set.
  TrainSummary run(RunObserver& observer);
  // Runs one step (no logging); returns nothing. For tests and benchmarks.
  void step();
  // Loss and accuracy of `split` in evaluation mode, over all replicas' shards (not judged).
  EvalRecord evaluate(EvalSplit split = EvalSplit::test);
  const Selection& selection() const { return selection_; }

  const BatchPlan& plan() const { return plan_; }
  int64_t current_step() const { return next_step_; }
  std::string device_names() const;
  // Worker 0's parameters / batch-norm state, copied to the host.
  std::vector<float> params();
  std::vector<float> state();

  // With several replicas, every replica's parameter checksum compared (one small all-reduce);
  // run() calls it at every logged step and snapshot() before every checkpoint. Replicas that
  // differ are a RuntimeError naming them, the step and the last step they agreed at.
  void check_replicas_agree();
  // The tensors of a checkpoint (train/checkpoint.hpp's CheckpointState, the one type for what a
  // checkpoint holds), once check_replicas_agree() passed: parameters, batch-norm running
  // statistics (averaged over the replicas first with local batch norm), optimizer moments (moment2
  // for Adam only), the selection's state; `step` = steps completed. Epoch, data source and
  // metadata are left for the caller.
  CheckpointState snapshot();
  // Loads a checkpoint's tensors and selection state into every replica and continues from its
  // step. Sizes must match the model and optimizer (moment2 may be empty: zeros).
  void restore(const CheckpointState& checkpoint);

 private:
  struct Shared;
  void dispatch(int job);
  void train_step(bool want_metrics);
  // Evaluates the validation split, judges it, calls on_best when it improved, reports it; true
  // when early stopping is due.
  bool validate(RunObserver& observer);
  static void worker_main(std::shared_ptr<Shared> shared, int k);

  std::shared_ptr<const RunInputs> inputs_;
  const BatchPlan& plan_;  // inputs_->plan
  int local_workers_;
  int64_t next_step_ = 0;
  int64_t agreed_step_ = 0;  // the last step check_replicas_agree() passed (or the restored one)
  Selection selection_;
  EvalRecord last_validation_;  // this process's last validation evaluation (step -1: none)
  std::shared_ptr<Shared> shared_;
};

}  // namespace mnist
