#include "train/trainer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <thread>

#include <spdlog/spdlog.h>

#include "core/error.hpp"
#include "data/sampler.hpp"
#include "train/watchdog.hpp"

namespace mnist {

namespace {
using Clock = std::chrono::steady_clock;
enum Job : int { kNone, kTrain, kAverageState, kEvaluate, kFetch, kRestore, kChecksums, kStop };

// A worker's error with `prefix` (who, step, phase) before its message, as the same type, so the
// exit code main() picks for it stays the one of the error the worker met.
template <class E>
std::exception_ptr prefixed(const E& e, const std::string& prefix) {
  return std::make_exception_ptr(E(prefix + e.what()));
}
std::exception_ptr with_context(std::exception_ptr error, const std::string& prefix) {
  try {
    std::rethrow_exception(error);
  } catch (const DivergenceError& e) {
    return prefixed(e, prefix);
  } catch (const AbortedError& e) {
    return prefixed(e, prefix);
  } catch (const RuntimeError& e) {
    return prefixed(e, prefix);
  } catch (const DataError& e) {
    return prefixed(e, prefix);
  } catch (const ConfigError& e) {
    return prefixed(e, prefix);
  } catch (const UsageError& e) {
    return prefixed(e, prefix);
  } catch (const std::exception& e) {
    return std::make_exception_ptr(RuntimeError(prefix + e.what()));
  } catch (...) {
    return std::make_exception_ptr(RuntimeError(prefix + "an exception of unknown type"));
  }
}
}  // namespace

// What the coordinator and the worker threads share. Worker threads hold it (and through it the
// run's inputs) by shared pointer, never the Trainer itself.
struct Trainer::Shared {
  std::mutex mutex;
  std::condition_variable work_cv, done_cv;
  uint64_t job_id = 0;
  int job = kNone;
  int64_t job_step = 0;
  bool want_metrics = false;
  EvalSplit eval_split = EvalSplit::test;
  double lr = 0;
  int done = 0;
  bool failed = false;
  std::exception_ptr error;  // the first failure: a worker's, or the watchdog's
  std::vector<WorkerStatus> status;
  std::vector<std::string> names;  // backend names once known ("cpu1", "gpu0")
  std::vector<StepTimes> times;    // last step's, per worker; read after the step
  std::vector<std::thread> threads;
  // Results copied out by worker 0.
  float metrics[kMetricSlots] = {0, 0, 0};
  CheckpointState transfer;         // kFetch (worker 0 writes) and kRestore (every worker reads)
  std::vector<uint32_t> checksums;  // kChecksums: every replica's parameter checksum
  std::shared_ptr<const RunInputs> inputs;
  BackendFactory factory;
  TrainerOptions options;
  int first_replica = 0;
};

Trainer::Trainer(const Experiment& experiment, const Model& model,
                 std::shared_ptr<const Dataset> data, BackendFactory factory, int local_workers,
                 std::shared_ptr<Communicator> comm, int first_replica, TrainerOptions options)
    : inputs_(RunInputs::make(experiment, model, std::move(data), comm,
                              comm ? comm->global_size() : 0)),
      plan_(inputs_->plan),
      local_workers_(local_workers),
      selection_(experiment.train.keep_best, experiment.train.patience),
      shared_(std::make_shared<Shared>()) {
  last_validation_.step = -1;
  MNIST_CHECK(local_workers >= 1, "need at least one worker, got {}", local_workers);
  MNIST_CHECK(inputs_->comm, "a trainer needs a communicator");
  MNIST_CHECK(inputs_->comm->local_size() == local_workers,
              "communicator has {} local workers, trainer {}", inputs_->comm->local_size(),
              local_workers);
  Shared& sh = *shared_;
  sh.inputs = inputs_;
  sh.factory = std::move(factory);
  sh.options = std::move(options);
  sh.first_replica = first_replica;
  sh.status = std::vector<WorkerStatus>(local_workers);
  sh.times.resize(local_workers);
  for (int k = 0; k < local_workers; ++k) sh.names.push_back(fmt::format("worker {}", k));
  for (int k = 0; k < local_workers; ++k)
    sh.threads.emplace_back([keep = shared_, k] { worker_main(keep, k); });
  dispatch(kNone);  // waits until every worker has set up its replica (or one failed)
}

Trainer::~Trainer() {
  try {
    if (!shared_->failed) dispatch(kStop);
  } catch (...) {
    // Destructors never throw; the error was already reported by whoever saw it first.
  }
  for (std::thread& t : shared_->threads)
    if (t.joinable()) t.join();
}

std::string Trainer::device_names() const {
  std::lock_guard<std::mutex> lock(shared_->mutex);
  std::string names;
  for (const std::string& n : shared_->names) names += (names.empty() ? "" : ", ") + n;
  return names;
}

// Hands `job` to every worker and waits until all finished it, a worker failed, or the watchdog
// found one stalled; rethrows the failure.
void Trainer::dispatch(int job) {
  Shared& sh = *shared_;
  std::unique_lock<std::mutex> lock(sh.mutex);
  if (job != kNone) {
    if (sh.failed) std::rethrow_exception(sh.error);
    sh.job = job;
    sh.done = 0;
    ++sh.job_id;
    sh.work_cv.notify_all();
    if (job == kStop) return;  // workers exit; the destructor joins them
  }
  const double watchdog = inputs_->experiment.train.watchdog_seconds;
  while (!sh.failed && sh.done < local_workers_) {
    sh.done_cv.wait_for(lock, std::chrono::milliseconds(200));
    if (sh.failed) break;
    const std::string stall =
        find_stall(sh.status, sh.names, watchdog, Clock::now().time_since_epoch().count());
    if (!stall.empty()) {
      sh.failed = true;
      sh.error = std::make_exception_ptr(RuntimeError(stall));
    }
  }
  if (!sh.failed) return;
  const std::exception_ptr error = sh.error;
  sh.job = kStop;
  ++sh.job_id;
  lock.unlock();
  if (inputs_->comm) inputs_->comm->abort();
  sh.work_cv.notify_all();
  // Workers blocked in a collective were woken by abort(); give each as long as the watchdog gave
  // it (1 to 10 s) to leave its phase, and leave behind (detached) any still stuck inside a device
  // call. Such a thread owns all it can touch (`keep` in worker_main): when its call returns it
  // meets the aborted communicator, ends, and frees what it held.
  const auto grace = std::chrono::duration<double>(std::clamp(watchdog, 1.0, 10.0));
  for (std::size_t k = 0; k < sh.threads.size(); ++k) {
    std::thread& t = sh.threads[k];
    if (!t.joinable()) continue;
    const auto deadline = Clock::now() + grace;
    while (sh.status[k].current() != Phase::idle && Clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (sh.status[k].current() == Phase::idle)
      t.join();
    else
      t.detach();
  }
  std::rethrow_exception(error);
}

// The body of worker thread k. It touches only `sh` (and what `sh` owns) and its own Worker, never
// the Trainer: a thread the watchdog leaves behind may outlive it.
void Trainer::worker_main(std::shared_ptr<Shared> keep, int k) {
  Shared& sh = *keep;
  const RunInputs& in = *sh.inputs;
  WorkerStatus& status = sh.status[k];
  int64_t step = 0;
  const PhaseCallback enter = [&](Phase phase) {
    status.enter(phase, step);
    if (sh.options.phase_hook) sh.options.phase_hook(k, step, phase);
  };
  auto finish_job = [&] {
    status.leave();
    std::lock_guard<std::mutex> lock(sh.mutex);
    ++sh.done;
    sh.done_cv.notify_all();
  };
  try {
    enter(Phase::setup);
    std::unique_ptr<Backend> backend = sh.factory(k);
    {
      std::lock_guard<std::mutex> lock(sh.mutex);
      sh.names[k] = backend->name();
    }
    Worker worker(sh.inputs, std::move(backend), k, sh.first_replica + k);
    uint64_t seen_job = 0;
    finish_job();
    for (;;) {
      int job;
      bool want_metrics;
      double lr;
      EvalSplit split;
      {
        std::unique_lock<std::mutex> lock(sh.mutex);
        sh.work_cv.wait(lock, [&] { return sh.job_id != seen_job; });
        seen_job = sh.job_id;
        job = sh.job;
        step = sh.job_step;
        want_metrics = sh.want_metrics;
        lr = sh.lr;
        split = sh.eval_split;
      }
      if (job == kStop) break;
      if (job == kTrain) {
        sh.times[k] = worker.train_step({step, lr}, want_metrics, enter);
        if (k == 0 && want_metrics) worker.metrics(sh.metrics);
      } else if (job == kAverageState) {
        enter(Phase::reduce);
        worker.average_state();
      } else if (job == kEvaluate) {
        worker.evaluate(split, enter);
        if (k == 0) worker.metrics(sh.metrics);
      } else if (job == kFetch) {
        if (k == 0) sh.transfer = worker.snapshot();
      } else if (job == kRestore) {
        worker.restore(sh.transfer);
      } else if (job == kChecksums) {
        enter(Phase::reduce);
        std::vector<uint32_t> sums = worker.parameter_checksums();
        if (k == 0) sh.checksums = std::move(sums);
      }
      // A training step stays queued on the device (no host round trip) unless its metrics
      // were read; every other job completes before the coordinator moves on.
      if (job != kTrain) worker.synchronize();
      finish_job();
    }
    status.leave();
  } catch (const AbortedError&) {
    // Another worker failed first and aborted the collective; its error is the one reported.
    status.leave();
  } catch (...) {
    std::string name;
    {
      std::lock_guard<std::mutex> lock(sh.mutex);
      name = sh.names[k];
    }
    const std::exception_ptr error = with_context(
        std::current_exception(), fmt::format("{} failed at step {} in phase '{}': ", name,
                                              step + 1, to_string(status.current())));
    {
      std::lock_guard<std::mutex> lock(sh.mutex);
      if (!sh.failed) {
        sh.failed = true;
        sh.error = error;
      }
      sh.done_cv.notify_all();
    }
    if (in.comm) in.comm->abort();
    status.leave();
  }
}

void Trainer::train_step(bool want_metrics) {
  Shared& sh = *shared_;
  {
    std::lock_guard<std::mutex> lock(sh.mutex);
    sh.job_step = next_step_;
    sh.lr = inputs_->learning_rate(next_step_, plan_.steps);
    sh.want_metrics = want_metrics;
  }
  dispatch(kTrain);
  ++next_step_;
}

void Trainer::step() {
  train_step(false);
}

void Trainer::check_replicas_agree() {
  if (inputs_->replicas <= 1) return;
  dispatch(kChecksums);
  const std::vector<uint32_t>& sums = shared_->checksums;
  std::string differing;
  for (std::size_t r = 1; r < sums.size(); ++r)
    if (sums[r] != sums[0])
      differing += fmt::format("{}replica {} ({:08x})", differing.empty() ? "" : ", ", r, sums[r]);
  if (differing.empty()) {
    agreed_step_ = next_step_;
    return;
  }
  MNIST_THROW(RuntimeError,
              "after step {} the replicas' parameters differ: {} against replica 0 ({:08x}), "
              "CRC-32C of the flat parameter buffer; they were equal at step {}. Synchronous "
              "data parallelism keeps them bit for bit equal, so the gradient all-reduce ({}) "
              "delivered different sums to different replicas. Stopping: no checkpoint is "
              "written past step {}, the ones written before are kept",
              next_step_, differing, sums[0], agreed_step_, inputs_->comm->name(), agreed_step_);
}

EvalRecord Trainer::evaluate(EvalSplit split) {
  if (inputs_->experiment.train.batch_norm == BatchNormMode::local) dispatch(kAverageState);
  {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    shared_->eval_split = split;
  }
  dispatch(kEvaluate);
  const Shared& sh = *shared_;
  EvalRecord r;
  r.split = split;
  r.step = next_step_;
  r.samples = static_cast<int64_t>(sh.metrics[kSamples]);
  r.loss = sh.metrics[kLossSum] / std::max(1.0f, sh.metrics[kSamples]);
  r.accuracy = sh.metrics[kCorrect] / std::max(1.0f, sh.metrics[kSamples]);
  return r;
}

bool Trainer::validate(RunObserver& observer) {
  EvalRecord r = evaluate(EvalSplit::validation);
  r.improved = selection_.judge(r.step, r.loss, r.accuracy);
  r.best_step = selection_.state().best_step;
  r.evaluations_since_best = selection_.state().evaluations_since_best;
  // The best checkpoint is on disk before the evaluation that chose it is reported.
  if (r.improved && shared_->options.on_best) shared_->options.on_best(r.step);
  observer.on_eval(r);
  last_validation_ = r;
  return selection_.patience_exhausted();
}

TrainSummary Trainer::run(RunObserver& observer) {
  Shared& sh = *shared_;
  const TrainConfig& tc = inputs_->experiment.train;
  TrainSummary summary;
  summary.global_batch = plan_.global_batch;
  // With a validation split the evaluations during training are of it, and the test set is left
  // for the end: choosing anything (a step, a run) on the test set would make its figure
  // optimistic.
  const bool validation = inputs_->data->validation.count > 0;
  summary.has_validation = validation;
  summary.keep_best = selection_.metric();
  // A run resumed after it stopped early (its patience spent) stops again at once.
  bool stopped_early = validation && selection_.patience_exhausted();
  double train_seconds = 0, compute_ms = 0, comm_ms = 0, wait_ms = 0;
  const int64_t first_step = next_step_;
  int64_t window_steps = 0;
  auto window_start = Clock::now();
  const auto run_start = window_start;
  while (!stopped_early && next_step_ < plan_.steps) {
    const int64_t s = next_step_;
    const bool log = tc.log_every > 0 && ((s + 1) % tc.log_every == 0 || s + 1 == plan_.steps);
    const auto t0 = Clock::now();
    train_step(log);
    train_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
    ++window_steps;
    double step_compute = 0, shortest_comm = sh.times[0].comm_ms, longest_comm = 0;
    for (const StepTimes& t : sh.times) {
      step_compute = std::max(step_compute, t.compute_ms);
      shortest_comm = std::min(shortest_comm, t.comm_ms);
      longest_comm = std::max(longest_comm, t.comm_ms);
    }
    compute_ms += step_compute;
    comm_ms += shortest_comm;
    wait_ms += longest_comm - shortest_comm;
    if (log) {
      check_replicas_agree();
      StepRecord r;
      r.step = next_step_;
      r.total_steps = plan_.steps;
      r.epoch = epochs_after(next_step_, plan_.global_batch, inputs_->data->train.count);
      const float samples = std::max(1.0f, sh.metrics[kSamples]);
      r.loss = sh.metrics[kLossSum] / samples;
      r.accuracy = sh.metrics[kCorrect] / samples;
      r.lr = sh.lr;
      const double window = std::chrono::duration<double>(Clock::now() - window_start).count();
      r.samples_per_second = window_steps * plan_.global_batch / std::max(window, 1e-9);
      r.compute_ms = compute_ms / window_steps;
      r.comm_ms = comm_ms / window_steps;
      r.wait_ms = wait_ms / window_steps;
      if (!std::isfinite(r.loss))
        MNIST_THROW(DivergenceError,
                    "step {}: the training loss is {} (learning rate {:g}); stopping", r.step,
                    r.loss, r.lr);
      observer.on_step(r);
      summary.last_step = r;
      window_steps = 0;
      compute_ms = comm_ms = wait_ms = 0;
      window_start = Clock::now();
    }
    {
      ProgressRecord p;
      p.step = next_step_;
      p.total_steps = plan_.steps;
      p.first_step = first_step;
      p.elapsed_seconds = std::chrono::duration<double>(Clock::now() - run_start).count();
      p.samples_per_second = (next_step_ - first_step) * static_cast<double>(plan_.global_batch) /
                             std::max(p.elapsed_seconds, 1e-9);
      observer.on_progress(p);
    }
    if (tc.eval_every > 0 && next_step_ % tc.eval_every == 0 && next_step_ < plan_.steps) {
      if (validation)
        stopped_early = validate(observer);
      else
        observer.on_eval(evaluate());
    }
    if (stopped_early) break;  // the caller saves the final state, as at the last step
    const TrainerOptions& options = sh.options;
    if (options.on_checkpoint && options.checkpoint_every > 0 &&
        next_step_ % options.checkpoint_every == 0 && next_step_ < plan_.steps)
      options.on_checkpoint(next_step_);
    if (options.stop_requested) {
      summary.stop_reason = options.stop_requested();
      if (summary.stop_reason != 0) break;
    }
  }
  summary.steps = next_step_;
  summary.first_step = first_step;
  summary.wall_seconds = train_seconds;
  summary.samples_per_second = (next_step_ - first_step) * static_cast<double>(plan_.global_batch) /
                               std::max(train_seconds, 1e-9);
  summary.stopped_early = stopped_early;
  if (summary.stop_reason == 0) {
    if (validation) {
      // The final parameters are a candidate too, unless this step was evaluated just now.
      if (last_validation_.step != next_step_) validate(observer);
      summary.final_validation = last_validation_;
    }
    summary.final_eval = evaluate();
    observer.on_eval(summary.final_eval);
  }
  summary.selection = selection_.state();
  return summary;
}

std::vector<float> Trainer::params() {
  dispatch(kFetch);
  return shared_->transfer.params;
}

std::vector<float> Trainer::state() {
  dispatch(kFetch);
  return shared_->transfer.state;
}

CheckpointState Trainer::snapshot() {
  check_replicas_agree();
  if (inputs_->experiment.train.batch_norm == BatchNormMode::local) dispatch(kAverageState);
  dispatch(kFetch);
  CheckpointState s = std::move(shared_->transfer);
  shared_->transfer = {};
  s.step = next_step_;
  s.selection = selection_.state();
  return s;
}

void Trainer::restore(const CheckpointState& s) {
  const Model& model = inputs_->model;
  const std::size_t n = model.param_count();
  MNIST_CHECK(s.params.size() == n && s.moment1.size() == n &&
                  (s.moment2.empty() || s.moment2.size() == n) &&
                  s.state.size() == model.state_count(),
              "checkpoint sizes do not match the model ({} parameters, {} state values)", n,
              model.state_count());
  MNIST_CHECK(s.step >= 0 && s.step <= plan_.steps, "checkpoint step {} outside [0, {}]", s.step,
              plan_.steps);
  shared_->transfer = s;
  dispatch(kRestore);
  shared_->transfer = {};
  next_step_ = s.step;
  agreed_step_ = s.step;
  selection_.restore(s.selection);
}

}  // namespace mnist
