#include "train/trainer.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <thread>

#include <spdlog/spdlog.h>

#include "backend/optimizer_rule.hpp"
#include "core/error.hpp"
#include "data/augment.hpp"
#include "data/sampler.hpp"
#include "model/replica.hpp"
#include "train/schedule.hpp"

namespace mnist {

const char* to_string(Phase p) {
  switch (p) {
    case Phase::idle:
      return "idle";
    case Phase::setup:
      return "setup";
    case Phase::data:
      return "data";
    case Phase::forward:
      return "forward";
    case Phase::backward:
      return "backward";
    case Phase::reduce:
      return "reduce";
    case Phase::update:
      return "update";
    case Phase::evaluate:
      return "evaluate";
  }
  return "?";
}

BatchPlan plan_batches(const TrainConfig& train, int replicas, int train_size) {
  BatchPlan plan;
  plan.global_batch =
      train.global_batch > 0 ? train.global_batch : train.batch_per_device * replicas;
  if (plan.global_batch < replicas)
    MNIST_THROW(ConfigError,
                "train.global_batch: {} samples cannot be split over {} replicas: each needs at "
                "least one",
                plan.global_batch, replicas);
  for (int k = 0; k <= replicas; ++k)
    plan.slice_begin.push_back(slice_begin(plan.global_batch, replicas, k));
  plan.steps = train.steps > 0
                   ? train.steps
                   : static_cast<int64_t>(std::ceil(train.epochs * train_size / plan.global_batch));
  return plan;
}

namespace {
using Clock = std::chrono::steady_clock;
enum Job : int { kNone, kTrain, kAverageState, kEvaluate, kFetch, kRestore, kStop };
}  // namespace

struct Trainer::Worker {
  std::thread thread;
  std::string name;  // backend name once known
  std::atomic<int> phase{static_cast<int>(Phase::idle)};
  std::atomic<int64_t> phase_step{0};
  std::atomic<int64_t> phase_since_ns{0};
  double compute_ms = 0, comm_ms = 0;  // last step; read by the coordinator after the step
};

struct Trainer::Shared {
  std::mutex mutex;
  std::condition_variable work_cv, done_cv;
  uint64_t job_id = 0;
  int job = kNone;
  int64_t job_step = 0;
  bool want_metrics = false;
  double lr = 0;
  int done = 0;
  bool failed = false;
  std::string error;
  std::vector<int32_t> batch;  // dataset indices of the current global batch
  std::vector<Worker> workers;
  // Results copied out by worker 0.
  float metrics[kMetricSlots] = {0, 0, 0};
  std::vector<float> params, state, moment1, moment2;  // kFetch (worker 0) and kRestore (all)
  BackendFactory factory;
  TrainerOptions options;
};

Trainer::Trainer(const Experiment& experiment, const Model& model, const Dataset& data,
                 BackendFactory factory, int local_workers, Communicator& comm, int first_replica,
                 TrainerOptions options)
    : experiment_(experiment),
      model_(model),
      data_(data),
      comm_(comm),
      local_workers_(local_workers),
      first_replica_(first_replica),
      shared_(std::make_shared<Shared>()) {
  MNIST_CHECK(local_workers >= 1, "need at least one worker, got {}", local_workers);
  MNIST_CHECK(comm.local_size() == local_workers, "communicator has {} local workers, trainer {}",
              comm.local_size(), local_workers);
  plan_ = plan_batches(experiment.train, comm.global_size(), data.train.count);
  sampler_ = std::make_unique<EpochSampler>(data.train.count, experiment.seed);
  shared_->factory = std::move(factory);
  shared_->options = std::move(options);
  shared_->batch.resize(plan_.global_batch);
  shared_->workers = std::vector<Worker>(local_workers);
  for (int k = 0; k < local_workers; ++k) shared_->workers[k].name = fmt::format("worker {}", k);
  for (int k = 0; k < local_workers; ++k)
    shared_->workers[k].thread = std::thread([this, k] { worker_main(k); });
  dispatch(kNone);  // waits until every worker has set up its replica (or one failed)
}

Trainer::~Trainer() {
  try {
    if (!shared_->failed) dispatch(kStop);
  } catch (...) {
    // Destructors never throw; the error was already reported by whoever saw it first.
  }
  for (Worker& w : shared_->workers)
    if (w.thread.joinable()) w.thread.join();
}

std::string Trainer::device_names() const {
  std::string names;
  for (const Worker& w : shared_->workers) names += (names.empty() ? "" : ", ") + w.name;
  return names;
}

// Hands `job` to every worker and waits until all finished it, a worker failed, or one stalled.
void Trainer::dispatch(int job) {
  Shared& sh = *shared_;
  std::unique_lock<std::mutex> lock(sh.mutex);
  if (job != kNone) {
    MNIST_CHECK(!sh.failed, "trainer already failed: {}", sh.error);
    sh.job = job;
    sh.done = 0;
    ++sh.job_id;
    sh.work_cv.notify_all();
    if (job == kStop) return;  // workers exit; the destructor joins them
  }
  const auto watchdog = std::chrono::duration<double>(experiment_.train.watchdog_seconds);
  while (!sh.failed && sh.done < local_workers_) {
    sh.done_cv.wait_for(lock, std::chrono::milliseconds(200));
    // The worker longest in its phase is the one holding the others up (they wait for it in a
    // collective), so it is the one named.
    const int64_t now = Clock::now().time_since_epoch().count();
    const Worker* slowest = nullptr;
    std::chrono::duration<double> longest{0};
    for (const Worker& w : sh.workers) {
      if (static_cast<Phase>(w.phase.load()) == Phase::idle) continue;
      const std::chrono::duration<double> busy{
          std::chrono::nanoseconds(now - w.phase_since_ns.load())};
      if (busy > longest) {
        longest = busy;
        slowest = &w;
      }
    }
    if (slowest && longest > watchdog && !sh.failed) {
      std::string others;
      for (const Worker& w : sh.workers) {
        if (&w == slowest) continue;
        const double busy = (now - w.phase_since_ns.load()) / 1e9;
        others += fmt::format("{}{} in '{}'", others.empty() ? "" : ", ", w.name,
                              to_string(static_cast<Phase>(w.phase.load())));
        if (static_cast<Phase>(w.phase.load()) != Phase::idle)
          others += fmt::format(" for {:.1f} s", busy);
      }
      sh.failed = true;
      sh.error = fmt::format(
          "{} stalled: step {} has been in phase '{}' for {:.1f} s (train.watchdog_seconds = "
          "{:g}); aborting the run{}",
          slowest->name, slowest->phase_step.load() + 1,
          to_string(static_cast<Phase>(slowest->phase.load())), longest.count(),
          experiment_.train.watchdog_seconds, others.empty() ? "" : " (" + others + ")");
    }
  }
  if (!sh.failed) return;
  const std::string error = sh.error;
  lock.unlock();
  comm_.abort();
  {
    std::lock_guard<std::mutex> guard(sh.mutex);
    sh.job = kStop;
    ++sh.job_id;
  }
  sh.work_cv.notify_all();
  // Workers blocked in a collective were woken by abort(); give each a moment, and leave behind
  // (detached, holding the shared state alive) any that is stuck inside a device call.
  for (Worker& w : sh.workers) {
    if (!w.thread.joinable()) continue;
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    while (static_cast<Phase>(w.phase.load()) != Phase::idle && Clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (static_cast<Phase>(w.phase.load()) == Phase::idle) {
      w.thread.join();
    } else {
      w.thread.detach();
    }
  }
  throw RuntimeError(error);
}

void Trainer::worker_main(int k) {
  std::shared_ptr<Shared> keep = shared_;
  Shared& sh = *keep;
  Worker& self = sh.workers[k];
  const int replica_index = first_replica_ + k;
  const int replicas = comm_.global_size();
  int64_t step = 0;
  auto enter = [&](Phase phase) {
    self.phase_step = step;
    self.phase_since_ns = Clock::now().time_since_epoch().count();
    self.phase = static_cast<int>(phase);
    if (sh.options.phase_hook) sh.options.phase_hook(k, step, phase);
  };
  auto finish_job = [&] {
    self.phase = static_cast<int>(Phase::idle);
    std::lock_guard<std::mutex> lock(sh.mutex);
    ++sh.done;
    sh.done_cv.notify_all();
  };
  try {
    enter(Phase::setup);
    std::unique_ptr<Backend> backend = sh.factory(k);
    Backend& be = *backend;
    {
      std::lock_guard<std::mutex> lock(sh.mutex);
      self.name = be.name();
    }
    const int slice_lo = plan_.slice_begin[replica_index];
    const int slice_n = plan_.slice_begin[replica_index + 1] - slice_lo;
    const int eval_batch = experiment_.train.eval_batch;
    Replica replica(model_, be, std::max(slice_n, eval_batch));
    // The dataset lives on the device; a step only gathers its slice there.
    auto upload = [&](const std::vector<uint8_t>& host) {
      DeviceBuffer<uint8_t> buffer(be, host.size());
      be.copy_to_device(buffer.data(), host.data(), host.size());
      return buffer;
    };
    DeviceBuffer<uint8_t> train_pixels = upload(data_.train.pixels);
    DeviceBuffer<uint8_t> train_labels = upload(data_.train.labels);
    DeviceBuffer<uint8_t> test_pixels = upload(data_.test.pixels);
    DeviceBuffer<uint8_t> test_labels = upload(data_.test.labels);
    DeviceBuffer<int32_t> indices(be, replica.max_batch());
    std::vector<int32_t> host_indices(replica.max_batch());
    // data.random_shift: the slice is gathered and shifted on the host (data/augment.hpp), then
    // copied to these buffers and gathered in order, so every backend sees the same images.
    const int random_shift = experiment_.data.random_shift;
    DeviceBuffer<uint8_t> shifted_pixels(
        be,
        random_shift > 0 ? static_cast<std::size_t>(slice_n) * data_.train.pixels_per_image() : 1);
    DeviceBuffer<uint8_t> shifted_labels(be, random_shift > 0 ? std::max(slice_n, 1) : 1);
    DeviceBuffer<int32_t> in_order(be, random_shift > 0 ? std::max(slice_n, 1) : 1);
    std::vector<uint8_t> host_shifted_pixels, host_shifted_labels;
    if (random_shift > 0 && slice_n > 0) {
      for (int i = 0; i < slice_n; ++i) host_indices[i] = i;
      be.copy_to_device(in_order.data(), host_indices.data(), sizeof(int32_t) * slice_n);
    }
    const std::vector<float> init = model_.initial_params(experiment_.seed);
    be.copy_to_device(replica.params(), init.data(), init.size() * sizeof(float));
    const std::vector<float> init_state = model_.initial_state();
    be.copy_to_device(replica.state(), init_state.data(), init_state.size() * sizeof(float));
    const int pixels = data_.train.pixels_per_image();

    PassContext pass;
    pass.seed = experiment_.seed;
    pass.global_n = plan_.global_batch;
    if (experiment_.train.batch_norm == BatchNormMode::sync)
      pass.all_reduce_sum = [&](float* data, std::size_t count) {
        comm_.all_reduce_sum(k, be, data, count);
      };
    const OptimizerConfig& opt = experiment_.optimizer;

    uint64_t seen_job = 0;
    finish_job();
    for (;;) {
      int job;
      {
        std::unique_lock<std::mutex> lock(sh.mutex);
        sh.work_cv.wait(lock, [&] { return sh.job_id != seen_job; });
        seen_job = sh.job_id;
        job = sh.job;
        step = sh.job_step;
      }
      if (job == kStop) break;
      if (job == kTrain) {
        const auto t0 = Clock::now();
        enter(Phase::data);
        if (random_shift > 0) {
          gather_shifted(data_.train, sh.batch.data() + slice_lo, slice_n, experiment_.seed, step,
                         slice_lo, random_shift, host_shifted_pixels, host_shifted_labels);
          be.copy_to_device(shifted_pixels.data(), host_shifted_pixels.data(),
                            host_shifted_pixels.size());
          be.copy_to_device(shifted_labels.data(), host_shifted_labels.data(),
                            host_shifted_labels.size());
          be.gather_batch(shifted_pixels.data(), shifted_labels.data(), pixels, in_order.data(),
                          slice_n, replica.input(), replica.labels());
        } else {
          be.copy_to_device(indices.data(), sh.batch.data() + slice_lo, sizeof(int32_t) * slice_n);
          be.gather_batch(train_pixels.data(), train_labels.data(), pixels, indices.data(), slice_n,
                          replica.input(), replica.labels());
        }
        replica.reset_metrics();
        pass.n = slice_n;
        pass.training = true;
        pass.step = static_cast<uint32_t>(step);
        pass.first_sample = static_cast<uint32_t>(slice_lo);
        enter(Phase::forward);
        replica.forward_train(pass, 1.0f / plan_.global_batch);
        enter(Phase::backward);
        replica.backward(pass);
        const auto t1 = Clock::now();
        enter(Phase::reduce);
        comm_.all_reduce_sum(k, be, replica.grads(), replica.reduce_count());
        const auto t2 = Clock::now();
        enter(Phase::update);
        OptimizerStep s;
        s.lr = static_cast<float>(sh.lr);
        s.beta1 = static_cast<float>(opt.beta1);
        s.beta2 = static_cast<float>(opt.beta2);
        s.epsilon = static_cast<float>(opt.epsilon);
        // TensorFlow 1 adds epsilon to sqrt(v), before the bias corrections scale the step:
        // the same as adding epsilon * sqrt(1 / (1 - beta2^t)) to sqrt(v_hat).
        if (opt.epsilon_style == AdamEpsilon::tensorflow)
          s.epsilon =
              static_cast<float>(opt.epsilon * std::sqrt(adam_bias_correction(
                                                   static_cast<float>(opt.beta2), step + 1)));
        s.momentum = static_cast<float>(opt.momentum);
        s.nesterov = opt.nesterov;
        s.step = step + 1;
        if (opt.weight_decay_mode == WeightDecayMode::l2)
          s.l2 = static_cast<float>(opt.weight_decay);
        else
          s.decoupled_wd = static_cast<float>(opt.weight_decay);
        if (opt.kind == OptimizerKind::adam)
          be.adam_update(model_.param_count(), model_.decayed_count(), s, replica.params(),
                         replica.grads(), replica.moment1(), replica.moment2());
        else
          be.sgd_update(model_.param_count(), model_.decayed_count(), s, replica.params(),
                        replica.grads(), replica.moment1());
        if (sh.want_metrics && experiment_.train.log_after_update) {
          // TensorFlow 1's display in the seed: after the update, a second training-mode pass
          // over the same batch (batch statistics and dropout; the running statistics move).
          replica.reset_metrics();
          replica.forward_loss(pass);
          comm_.all_reduce_sum(k, be, replica.metrics(), kMetricSlots);
        }
        if (k == 0 && sh.want_metrics)
          be.copy_to_host(sh.metrics, replica.metrics(), sizeof(sh.metrics));
        self.compute_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
        self.comm_ms = std::chrono::duration<double, std::milli>(t2 - t1).count();
      } else if (job == kAverageState) {
        // Local batch norm leaves each replica its own running statistics; their mean is the
        // model's, so evaluation and checkpoints do not depend on which replica is read.
        enter(Phase::reduce);
        if (model_.state_count() > 0 && replicas > 1) {
          comm_.all_reduce_sum(k, be, replica.state(), model_.state_count());
          be.scale(model_.state_count(), 1.0f / replicas, replica.state());
        }
      } else if (job == kEvaluate) {
        enter(Phase::evaluate);
        replica.reset_metrics();
        const int total = data_.test.count;
        const int lo = slice_begin(total, replicas, replica_index);
        const int hi = slice_begin(total, replicas, replica_index + 1);
        pass.training = false;
        for (int begin = lo; begin < hi; begin += replica.max_batch()) {
          const int n = std::min(replica.max_batch(), hi - begin);
          for (int i = 0; i < n; ++i) host_indices[i] = begin + i;
          be.copy_to_device(indices.data(), host_indices.data(), sizeof(int32_t) * n);
          be.gather_batch(test_pixels.data(), test_labels.data(), pixels, indices.data(), n,
                          replica.input(), replica.labels());
          pass.n = n;
          pass.first_sample = 0;
          replica.forward_loss(pass);
        }
        enter(Phase::reduce);
        comm_.all_reduce_sum(k, be, replica.metrics(), kMetricSlots);
        if (k == 0) be.copy_to_host(sh.metrics, replica.metrics(), sizeof(sh.metrics));
      } else if (job == kFetch) {
        if (k == 0) {
          const std::size_t n = model_.param_count();
          sh.params.resize(n);
          sh.state.resize(model_.state_count());
          sh.moment1.resize(n);
          sh.moment2.resize(n);
          be.copy_to_host(sh.params.data(), replica.params(), n * sizeof(float));
          be.copy_to_host(sh.state.data(), replica.state(), sh.state.size() * sizeof(float));
          be.copy_to_host(sh.moment1.data(), replica.moment1(), n * sizeof(float));
          be.copy_to_host(sh.moment2.data(), replica.moment2(), n * sizeof(float));
        }
      } else if (job == kRestore) {
        const std::size_t n = model_.param_count();
        be.copy_to_device(replica.params(), sh.params.data(), n * sizeof(float));
        be.copy_to_device(replica.state(), sh.state.data(), sh.state.size() * sizeof(float));
        be.copy_to_device(replica.moment1(), sh.moment1.data(), n * sizeof(float));
        if (sh.moment2.empty())
          be.fill(replica.moment2(), n, 0.0f);
        else
          be.copy_to_device(replica.moment2(), sh.moment2.data(), n * sizeof(float));
      }
      // A training step stays queued on the device (no host round trip) unless its metrics
      // were read; every other job completes before the coordinator moves on.
      if (job != kTrain) be.synchronize();
      finish_job();
    }
    self.phase = static_cast<int>(Phase::idle);
  } catch (const AbortedError&) {
    // Another worker failed first and aborted the collective; its error is the one reported.
    self.phase = static_cast<int>(Phase::idle);
  } catch (const std::exception& e) {
    const auto phase = static_cast<Phase>(self.phase.load());
    {
      std::lock_guard<std::mutex> lock(sh.mutex);
      if (!sh.failed) {
        sh.failed = true;
        sh.error = fmt::format("{} failed at step {} in phase '{}': {}", self.name, step + 1,
                               to_string(phase), e.what());
      }
      sh.done_cv.notify_all();
    }
    comm_.abort();
    self.phase = static_cast<int>(Phase::idle);
  }
}

void Trainer::train_step(bool want_metrics) {
  Shared& sh = *shared_;
  sampler_->batch_indices(next_step_, plan_.global_batch, sh.batch.data());
  double base_lr = experiment_.optimizer.lr;
  if (experiment_.train.scale_lr_with_devices) base_lr *= comm_.global_size();
  {
    std::lock_guard<std::mutex> lock(sh.mutex);
    sh.job_step = next_step_;
    sh.lr = learning_rate_at(experiment_.schedule, base_lr, next_step_, plan_.steps);
    sh.want_metrics = want_metrics;
  }
  dispatch(kTrain);
  ++next_step_;
}

void Trainer::step() {
  train_step(false);
}

EvalRecord Trainer::evaluate() {
  if (experiment_.train.batch_norm == BatchNormMode::local) dispatch(kAverageState);
  dispatch(kEvaluate);
  const Shared& sh = *shared_;
  EvalRecord r;
  r.step = next_step_;
  r.samples = static_cast<int64_t>(sh.metrics[kSamples]);
  r.loss = sh.metrics[kLossSum] / std::max(1.0f, sh.metrics[kSamples]);
  r.accuracy = sh.metrics[kCorrect] / std::max(1.0f, sh.metrics[kSamples]);
  return r;
}

TrainSummary Trainer::run(RunObserver& observer) {
  Shared& sh = *shared_;
  const TrainConfig& tc = experiment_.train;
  TrainSummary summary;
  summary.global_batch = plan_.global_batch;
  double train_seconds = 0, compute_ms = 0, comm_ms = 0;
  const int64_t first_step = next_step_;
  int64_t window_steps = 0;
  auto window_start = Clock::now();
  const auto run_start = window_start;
  while (next_step_ < plan_.steps) {
    const int64_t s = next_step_;
    const bool log = tc.log_every > 0 && ((s + 1) % tc.log_every == 0 || s + 1 == plan_.steps);
    const auto t0 = Clock::now();
    train_step(log);
    train_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
    ++window_steps;
    double step_compute = 0, step_comm = 0;
    for (const Worker& w : sh.workers) {
      step_compute = std::max(step_compute, w.compute_ms);
      step_comm = std::max(step_comm, w.comm_ms);
    }
    compute_ms += step_compute;
    comm_ms += step_comm;
    if (log) {
      StepRecord r;
      r.step = next_step_;
      r.total_steps = plan_.steps;
      r.epoch = sampler_->epochs_after(next_step_, plan_.global_batch);
      const float samples = std::max(1.0f, sh.metrics[kSamples]);
      r.loss = sh.metrics[kLossSum] / samples;
      r.accuracy = sh.metrics[kCorrect] / samples;
      r.lr = sh.lr;
      const double window = std::chrono::duration<double>(Clock::now() - window_start).count();
      r.samples_per_second = window_steps * plan_.global_batch / std::max(window, 1e-9);
      r.compute_ms = compute_ms / window_steps;
      r.comm_ms = comm_ms / window_steps;
      if (!std::isfinite(r.loss))
        MNIST_THROW(DivergenceError,
                    "step {}: the training loss is {} (learning rate {:g}); stopping", r.step,
                    r.loss, r.lr);
      observer.on_step(r);
      summary.last_step = r;
      window_steps = 0;
      compute_ms = comm_ms = 0;
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
    if (tc.eval_every > 0 && next_step_ % tc.eval_every == 0 && next_step_ < plan_.steps)
      observer.on_eval(evaluate());
    const TrainerOptions& options = shared_->options;
    if (options.on_checkpoint && options.checkpoint_every > 0 &&
        next_step_ % options.checkpoint_every == 0 && next_step_ < plan_.steps)
      options.on_checkpoint(next_step_);
    if (options.stop_requested) {
      summary.stop_reason = options.stop_requested();
      if (summary.stop_reason != 0) break;
    }
  }
  summary.steps = next_step_;
  summary.wall_seconds = train_seconds;
  summary.samples_per_second = (next_step_ - first_step) * static_cast<double>(plan_.global_batch) /
                               std::max(train_seconds, 1e-9);
  if (summary.stop_reason == 0) {
    summary.final_eval = evaluate();
    observer.on_eval(summary.final_eval);
  }
  return summary;
}

std::vector<float> Trainer::params() {
  dispatch(kFetch);
  return shared_->params;
}

std::vector<float> Trainer::state() {
  dispatch(kFetch);
  return shared_->state;
}

Trainer::Snapshot Trainer::snapshot() {
  if (experiment_.train.batch_norm == BatchNormMode::local) dispatch(kAverageState);
  dispatch(kFetch);
  Snapshot s;
  s.step = next_step_;
  s.params = shared_->params;
  s.state = shared_->state;
  s.moment1 = shared_->moment1;
  if (experiment_.optimizer.kind == OptimizerKind::adam) s.moment2 = shared_->moment2;
  return s;
}

void Trainer::restore(const Snapshot& s) {
  const std::size_t n = model_.param_count();
  MNIST_CHECK(s.params.size() == n && s.moment1.size() == n &&
                  (s.moment2.empty() || s.moment2.size() == n) &&
                  s.state.size() == model_.state_count(),
              "snapshot sizes do not match the model ({} parameters, {} state values)", n,
              model_.state_count());
  MNIST_CHECK(s.step >= 0 && s.step <= plan_.steps, "snapshot step {} outside [0, {}]", s.step,
              plan_.steps);
  shared_->params = s.params;
  shared_->state = s.state;
  shared_->moment1 = s.moment1;
  shared_->moment2 = s.moment2;
  dispatch(kRestore);
  next_step_ = s.step;
}

}  // namespace mnist
