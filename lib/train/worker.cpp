#include "train/worker.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>

#include "backend/optimizer_rule.hpp"
#include "core/crc32c.hpp"
#include "core/error.hpp"
#include "data/augment.hpp"
#include "data/sampler.hpp"
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
  // In 64 bits: batch_per_device and the replica count are each an int, their product may not be.
  const int64_t global = train.global_batch > 0
                             ? train.global_batch
                             : static_cast<int64_t>(train.batch_per_device) * replicas;
  if (global > std::numeric_limits<int>::max())
    MNIST_THROW(ConfigError,
                "train.batch_per_device: {} samples on each of {} replicas make a global batch of "
                "{}, more than the {} a step can hold",
                train.batch_per_device, replicas, global, std::numeric_limits<int>::max());
  plan.global_batch = static_cast<int>(global);
  if (plan.global_batch < replicas)
    MNIST_THROW(ConfigError,
                "train.global_batch: {} samples cannot be split over {} replicas: each needs at "
                "least one",
                plan.global_batch, replicas);
  for (int k = 0; k <= replicas; ++k)
    plan.slice_begin.push_back(slice_begin(plan.global_batch, replicas, k));
  if (train.steps > 0) {
    if (train.steps > kMaxSteps)
      MNIST_THROW(ConfigError, "train.steps: {} is more than the {} steps a run can count",
                  train.steps, kMaxSteps);
    plan.steps = train.steps;
    return plan;
  }
  // epochs is any finite positive double: the step count is formed in double and refused when it
  // is beyond what a step counter holds, instead of converting out of range (undefined; in
  // practice INT64_MIN, a run of no steps).
  const double steps = std::ceil(train.epochs * train_size / plan.global_batch);
  if (!(steps <= static_cast<double>(kMaxSteps)))
    MNIST_THROW(ConfigError,
                "train.epochs: {} epochs of {} images in batches of {} make {:.4g} steps, more "
                "than the {} a run can count; use fewer epochs",
                train.epochs, train_size, plan.global_batch, steps, kMaxSteps);
  plan.steps = std::max<int64_t>(static_cast<int64_t>(steps), 1);
  return plan;
}

OptimizerStep make_optimizer_step(const OptimizerConfig& opt, double lr, int64_t step) {
  OptimizerStep s;
  s.lr = static_cast<float>(lr);
  s.beta1 = static_cast<float>(opt.beta1);
  s.beta2 = static_cast<float>(opt.beta2);
  s.epsilon =
      adam_epsilon(opt.epsilon, opt.epsilon_style == AdamEpsilon::tensorflow, s.beta2, step + 1);
  s.momentum = static_cast<float>(opt.momentum);
  s.nesterov = opt.nesterov;
  s.step = step + 1;
  s.configured_epsilon = opt.epsilon;
  s.tensorflow_epsilon = opt.epsilon_style == AdamEpsilon::tensorflow;
  if (opt.weight_decay_mode == WeightDecayMode::l2)
    s.l2 = static_cast<float>(opt.weight_decay);
  else
    s.decoupled_wd = static_cast<float>(opt.weight_decay);
  return s;
}

StepScalars step_values(const OptimizerConfig& opt, const StepContext& step) {
  return step_scalars_at(make_optimizer_step(opt, step.lr, step.step), step.step, opt.epsilon,
                         opt.epsilon_style == AdamEpsilon::tensorflow);
}

void apply_optimizer_step(const OptimizerConfig& opt, Replica& replica, StepScalars* step,
                          bool advance) {
  const Model& model = replica.model();
  Backend& be = replica.backend();
  // The constants only: the step's own values come from *step.
  const OptimizerStep constants = make_optimizer_step(opt, 0.0, 0);
  if (opt.kind == OptimizerKind::adam)
    be.adam_update(model.param_count(), model.decayed_count(), constants, step, advance,
                   replica.params(), replica.grads(), replica.moment1(), replica.moment2());
  else
    be.sgd_update(model.param_count(), model.decayed_count(), constants, step, advance,
                  replica.params(), replica.grads(), replica.moment1());
}

double RunInputs::learning_rate(int64_t step, int64_t total_steps) const {
  double base = experiment.optimizer.lr;
  if (experiment.train.scale_lr_with_devices) base *= replicas;
  return learning_rate_at(experiment.schedule, base, step, total_steps);
}

std::unique_ptr<BatchSource> RunInputs::make_batch_source() const {
  if (batch_source) return batch_source();
  return std::make_unique<EpochSampler>(data->train.count, experiment.seed);
}

std::shared_ptr<const RunInputs> RunInputs::make(const Experiment& experiment, const Model& model,
                                                 std::shared_ptr<const Dataset> data,
                                                 std::shared_ptr<Communicator> comm, int replicas,
                                                 BatchSourceFactory batch_source) {
  MNIST_CHECK(data != nullptr, "a run needs a dataset");
  MNIST_CHECK(replicas >= 1, "a run needs at least one replica, got {}", replicas);
  auto inputs = std::make_shared<RunInputs>();
  inputs->experiment = experiment;
  inputs->model = model;
  inputs->plan = plan_batches(experiment.train, replicas, data->train.count);
  inputs->data = std::move(data);
  inputs->comm = std::move(comm);
  inputs->replicas = replicas;
  inputs->batch_source = std::move(batch_source);
  return inputs;
}

namespace {

using Clock = std::chrono::steady_clock;

// The loss kernels read labels[i] as a class index: the CPU kernel throws on one out of range, the
// CUDA kernel cannot (it would give a NaN loss). Checked here, once per run, so both backends
// report the same DataError before any step.
void check_labels(const ImageSet& set, const char* split, int classes) {
  for (std::size_t i = 0; i < set.labels.size(); ++i) {
    if (set.labels[i] < classes) continue;
    const std::string where =
        set.labels_path.empty() ? fmt::format("the {} labels", split) : "'" + set.labels_path + "'";
    MNIST_THROW(DataError,
                "{}: label {} of {} image {} is outside the model's {} classes (labels must be "
                "0..{}; model.classes)",
                where, set.labels[i], split, i, classes, classes - 1);
  }
}

DeviceBuffer<uint8_t> upload(Backend& be, const std::vector<uint8_t>& host) {
  DeviceBuffer<uint8_t> buffer(be, host.size());
  if (!host.empty()) be.copy_to_device(buffer.data(), host.data(), host.size());
  return buffer;
}

}  // namespace

// data.random_shift: the slice is gathered and shifted on the host (data/augment.hpp), copied to
// these buffers and gathered in order, so every backend sees the same images.
struct Worker::Shifted {
  std::vector<uint8_t> host_pixels, host_labels;
  DeviceBuffer<uint8_t> pixels, labels;
  DeviceBuffer<int32_t> in_order;
};

Worker::Worker(std::shared_ptr<const RunInputs> inputs, std::unique_ptr<Backend> backend,
               int local_rank, int replica_index)
    : inputs_(std::move(inputs)),
      backend_(std::move(backend)),
      local_rank_(local_rank),
      replica_index_(replica_index) {
  const RunInputs& in = *inputs_;
  const Experiment& e = in.experiment;
  const Dataset& data = *in.data;
  Backend& be = *backend_;
  MNIST_CHECK(
      replica_index >= 0 && replica_index + 1 < static_cast<int>(in.plan.slice_begin.size()),
      "replica {} outside the batch plan's {} slices", replica_index,
      in.plan.slice_begin.size() - 1);
  MNIST_CHECK(in.comm != nullptr || in.replicas == 1,
              "{} replicas need a communicator to sum their gradients", in.replicas);
  slice_lo_ = in.plan.slice_begin[replica_index];
  slice_n_ = in.plan.slice_begin[replica_index + 1] - slice_lo_;
  check_labels(data.train, "training", in.model.classes());
  check_labels(data.validation, "validation", in.model.classes());
  check_labels(data.test, "test", in.model.classes());

  replica_ = std::make_unique<Replica>(in.model, be, std::max({slice_n_, e.train.eval_batch, 1}));
  // The dataset lives on the device; a step only gathers its slice there.
  train_pixels_ = upload(be, data.train.pixels);
  train_labels_ = upload(be, data.train.labels);
  test_pixels_ = upload(be, data.test.pixels);
  test_labels_ = upload(be, data.test.labels);
  validation_pixels_ = upload(be, data.validation.pixels);
  validation_labels_ = upload(be, data.validation.labels);
  indices_ = DeviceBuffer<int32_t>(be, replica_->max_batch());
  host_indices_.resize(replica_->max_batch());
  if (e.data.random_shift > 0 && slice_n_ > 0) {
    shifted_ = std::make_unique<Shifted>();
    shifted_->pixels = DeviceBuffer<uint8_t>(
        be, static_cast<std::size_t>(slice_n_) * data.train.pixels_per_image());
    shifted_->labels = DeviceBuffer<uint8_t>(be, slice_n_);
    shifted_->in_order = DeviceBuffer<int32_t>(be, slice_n_);
    for (int i = 0; i < slice_n_; ++i) host_indices_[i] = i;
    be.copy_to_device(shifted_->in_order.data(), host_indices_.data(), sizeof(int32_t) * slice_n_);
  }
  const std::vector<float> init = in.model.initial_params(e.seed);
  be.copy_to_device(replica_->params(), init.data(), init.size() * sizeof(float));
  const std::vector<float> init_state = in.model.initial_state();
  if (!init_state.empty())
    be.copy_to_device(replica_->state(), init_state.data(), init_state.size() * sizeof(float));

  // The per-step values every training kernel reads, set by each step's first hop.
  step_values_ = DeviceBuffer<StepScalars>(be, 1);
  pass_.step_scalars = step_values_.data();
  pass_.seed = e.seed;
  pass_.global_n = in.plan.global_batch;
  if (sums_across_replicas()) {
    // The checks' scratch, made once: 64 known values at set-up, two slots per replica after.
    check_values_ = DeviceBuffer<float>(
        be, std::max<std::size_t>(kKnownValues, 2 * static_cast<std::size_t>(in.replicas)));
    check_communicator_sums();
  }
  if (e.train.batch_norm == BatchNormMode::sync && in.comm)
    pass_.all_reduce_sum = [this](float* values, std::size_t count) {
      inputs_->comm->all_reduce_sum(local_rank_, *backend_, values, count);
    };
}

// The captured step: the graphs, the step scalars they read, the device ring of batch indices
// their gather reads, and what the host last told the device (to know when the scalars follow).
//
// The indices of kRingSteps steps go up in one copy: the worker draws them from its batch source
// (a step's batch is a function of the step alone), into slot step % kRingSteps of the device
// ring, where the captured gather finds them by the device's step.
struct Worker::Graphs {
  static constexpr int kRingSteps = 64;
  // Ring fills that may be queued at once: each has its page-locked staging area, written again
  // only when its copy has certainly run.
  static constexpr int kStagings = 4;
  Backend& be;
  DeviceBuffer<int32_t> ring;  // kRingSteps x slice, on the device
  int32_t* staging = nullptr;  // kStagings x kRingSteps x slice, page-locked host memory
  std::unique_ptr<Backend::Captured> step, update;
  int64_t next_step = -1;   // the step the device's values hold after the last replay; -1: none
  double lr = 0;            // the learning rate they hold
  int64_t ring_first = -1;  // the ring holds steps [ring_first, ring_first + kRingSteps); -1: none
  // Uploads so far, and how many of them had certainly been copied at the last wait for the device
  // (counted, not stepped: a restore sends the step number back).
  uint64_t uploads = 0, uploads_done = 0;
  Graphs(Backend& backend, int slice)
      : be(backend), ring(backend, static_cast<std::size_t>(kRingSteps) * slice) {
    staging = static_cast<int32_t*>(be.allocate_host(sizeof(int32_t) * kStagings * ring.size()));
  }
  ~Graphs() { be.release_host(staging); }
  Graphs(const Graphs&) = delete;
  Graphs& operator=(const Graphs&) = delete;
  // The next staging area; waits for the device only when all kStagings may still be queued and
  // nothing waited for the device since (a log step's metrics, an evaluation, a checkpoint).
  int32_t* next_staging(Worker& worker) {
    if (uploads - uploads_done >= kStagings) worker.synchronize();
    return staging + (uploads++ % kStagings) * ring.size();
  }
};

Worker::~Worker() = default;

bool Worker::can_capture() const {
  const Experiment& e = inputs_->experiment;
  return e.train.cuda_graph && backend_->supports_capture() && !shifted_ && slice_n_ > 0 &&
         !pass_.all_reduce_sum && !e.train.log_after_update &&
         e.optimizer.kind == OptimizerKind::adam;
}

const int32_t* Worker::slice_of(int64_t step) {
  // Made at the first training step: a worker that only evaluates (no training set) needs none.
  if (!batches_) {
    batches_ = inputs_->make_batch_source();
    global_batch_.resize(inputs_->plan.global_batch);
  }
  batches_->batch_indices(step, inputs_->plan.global_batch, global_batch_.data());
  return global_batch_.data() + slice_lo_;
}

StepTimes Worker::graph_step(const StepContext& ctx, const std::function<void(Phase)>& enter) {
  const auto t0 = Clock::now();
  enter(Phase::data);
  Backend& be = *backend_;
  const int64_t step = ctx.step;
  if (!graphs_) {
    graphs_ = std::make_unique<Graphs>(be, slice_n_);
    // Capture: the same hops as the eager step, reading the same step values; the update's last
    // block moves them on to the next step's.
    const int pixels = inputs_->data->train.pixels_per_image();
    // The step's gather is the forward pass's: an engine that fuses it into the first convolution
    // (FusedKind::gathered_convolution) runs one launch fewer.
    BatchGather gather;
    gather.images = train_pixels_.data();
    gather.labels = train_labels_.data();
    gather.pixels = pixels;
    gather.ring = graphs_->ring.data();
    gather.ring_steps = Graphs::kRingSteps;
    gather.step = step_values_.data();
    gather.x = replica_->input();
    gather.y = replica_->labels();
    be.begin_capture();
    pass_.gather = &gather;
    forward();
    pass_.gather = nullptr;
    backward();
    if (!sums_across_replicas()) update(/*advance=*/true);
    graphs_->step = be.end_capture();
    if (sums_across_replicas()) {
      be.begin_capture();
      update(/*advance=*/true);
      graphs_->update = be.end_capture();
    }
  }
  Graphs& g = *graphs_;
  // The values follow on the device from step to step at a constant learning rate; otherwise the
  // host sets them with its own rules (a kernel argument: nothing waits).
  if (g.next_step != step || g.lr != ctx.lr) {
    set_step_values(ctx);
    g.lr = ctx.lr;
  }
  g.next_step = step + 1;
  // The step's indices: in the device ring since its last fill, unless the step lies outside it;
  // then kRingSteps steps go up from this one, in one queued copy from page-locked memory.
  const std::size_t slice_bytes = sizeof(int32_t) * slice_n_;
  if (g.ring_first < 0 || step < g.ring_first || step >= g.ring_first + Graphs::kRingSteps) {
    int32_t* fill = g.next_staging(*this);
    for (int64_t s = step; s < step + Graphs::kRingSteps; ++s)
      std::memcpy(fill + (s % Graphs::kRingSteps) * slice_n_, slice_of(s), slice_bytes);
    be.copy_to_device_async(g.ring.data(), fill, g.ring.bytes());
    g.ring_first = step;
  }
  enter(Phase::forward);
  enter(Phase::backward);
  be.replay(*g.step);
  const auto t1 = Clock::now();
  enter(Phase::reduce);
  all_reduce();
  const auto t2 = Clock::now();
  enter(Phase::update);
  if (sums_across_replicas()) be.replay(*g.update);
  StepTimes times;
  times.compute_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
  times.comm_ms = std::chrono::duration<double, std::milli>(t2 - t1).count();
  return times;
}

void Worker::check_communicator_sums() {
  // Replica r contributes (r + 1) * (i + 1) at element i: integers whose sums float holds exactly
  // (for any run's replica count), distinct per replica and per element, so a transport that
  // drops, repeats or misplaces a contribution, or reads stale memory, cannot give the expected
  // sum. One small all-reduce, once per run, before any step.
  const Communicator& comm = *inputs_->comm;
  const int replicas = inputs_->replicas;
  std::vector<float> host(kKnownValues);
  for (std::size_t i = 0; i < kKnownValues; ++i)
    host[i] = static_cast<float>((replica_index_ + 1) * static_cast<int64_t>(i + 1));
  all_reduce_from_host(host);
  const int64_t replica_sum = static_cast<int64_t>(replicas) * (replicas + 1) / 2;
  for (std::size_t i = 0; i < kKnownValues; ++i) {
    const double want = static_cast<double>(replica_sum * static_cast<int64_t>(i + 1));
    if (host[i] == want) continue;
    MNIST_THROW(RuntimeError,
                "{}: the gradient all-reduce ({}) summed known values wrongly before training: "
                "element {} of replica {} is {}, the sum over the {} replicas is {}; the "
                "replicas would not train the same model. {}",
                backend_->name(), comm.name(), i, replica_index_, host[i], replicas, want,
                comm.name().find("NCCL") != std::string::npos
                    ? "On a box whose GPUs cannot reach each other directly (P2P through an "
                      "IOMMU, consumer cards), try NCCL_P2P_DISABLE=1; NCCL_DEBUG=INFO shows "
                      "the paths NCCL chose"
                    : "Check the devices and the transport between them");
  }
}

void Worker::all_reduce_from_host(std::vector<float>& values) {
  const std::size_t bytes = sizeof(float) * values.size();
  backend_->copy_to_device(check_values_.data(), values.data(), bytes);
  inputs_->comm->all_reduce_sum(local_rank_, *backend_, check_values_.data(), values.size());
  backend_->copy_to_host(values.data(), check_values_.data(), bytes);
}

std::vector<uint32_t> Worker::parameter_checksums() {
  const std::size_t n = inputs_->model.param_count();
  std::vector<float> params(n);
  backend_->copy_to_host(params.data(), replica_->params(), n * sizeof(float));
  caught_up();
  const uint32_t own = crc32c(params.data(), n * sizeof(float));
  if (!sums_across_replicas()) return {own};
  // Every replica writes its checksum as two 16-bit halves into its own two slots and zeros
  // elsewhere; the sum of one value and zeros is that value exactly in float, so one all-reduce
  // over the run's own transport hands every replica every checksum, on every backend.
  const std::size_t replicas = static_cast<std::size_t>(inputs_->replicas);
  std::vector<float> slots(2 * replicas, 0.0f);
  slots[2 * replica_index_] = static_cast<float>(own & 0xffffu);
  slots[2 * replica_index_ + 1] = static_cast<float>(own >> 16);
  all_reduce_from_host(slots);
  std::vector<uint32_t> sums(replicas);
  for (std::size_t r = 0; r < replicas; ++r)
    sums[r] = static_cast<uint32_t>(slots[2 * r]) | (static_cast<uint32_t>(slots[2 * r + 1]) << 16);
  return sums;
}

BatchGather Worker::resident_batch(const uint8_t* pixels, const uint8_t* labels,
                                   int pixels_per_image, const int32_t* indices) const {
  BatchGather b;
  b.images = pixels;
  b.labels = labels;
  b.pixels = pixels_per_image;
  b.ring = indices;
  b.x = replica_->input();
  b.y = replica_->labels();
  return b;
}

void Worker::set_step_values(const StepContext& ctx) {
  backend_->step_scalars_set(step_values_.data(), step_values(inputs_->experiment.optimizer, ctx));
}

void Worker::gather(const StepContext& ctx) {
  const Dataset& data = *inputs_->data;
  Backend& be = *backend_;
  const int pixels = data.train.pixels_per_image();
  const int64_t step = ctx.step;
  // The eager step sets its values every step (one launch) and its update leaves them as they
  // are, so a pass after the update (train.log_after_update) still reads this step's.
  set_step_values(ctx);
  if (graphs_) graphs_->next_step = -1;
  const int32_t* slice = slice_of(step);
  if (shifted_) {
    const Experiment& e = inputs_->experiment;
    gather_shifted(data.train, slice, slice_n_, e.seed, step, slice_lo_, e.data.random_shift,
                   shifted_->host_pixels, shifted_->host_labels);
    be.copy_to_device(shifted_->pixels.data(), shifted_->host_pixels.data(),
                      shifted_->host_pixels.size());
    be.copy_to_device(shifted_->labels.data(), shifted_->host_labels.data(),
                      shifted_->host_labels.size());
    be.gather_batch(resident_batch(shifted_->pixels.data(), shifted_->labels.data(), pixels,
                                   shifted_->in_order.data()),
                    slice_n_);
  } else {
    be.copy_to_device(indices_.data(), slice, sizeof(int32_t) * slice_n_);
    be.gather_batch(
        resident_batch(train_pixels_.data(), train_labels_.data(), pixels, indices_.data()),
        slice_n_);
  }
}

void Worker::forward() {
  replica_->reset_metrics();
  pass_.n = slice_n_;
  pass_.training = true;
  pass_.first_sample = static_cast<uint32_t>(slice_lo_);
  replica_->forward_train(pass_, 1.0f / inputs_->plan.global_batch);
}

void Worker::backward() {
  replica_->backward(pass_);
}

void Worker::all_reduce() {
  if (sums_across_replicas())
    inputs_->comm->all_reduce_sum(local_rank_, *backend_, replica_->grads(),
                                  replica_->reduce_count());
}

void Worker::update() {
  update(/*advance=*/false);
}

void Worker::update(bool advance) {
  apply_optimizer_step(inputs_->experiment.optimizer, *replica_, step_values_.data(), advance);
}

StepTimes Worker::train_step(const StepContext& ctx, bool want_metrics,
                             const PhaseCallback& on_phase) {
  auto enter = [&](Phase p) {
    if (on_phase) on_phase(p);
  };
  const auto t0 = Clock::now();
  if (can_capture()) {
    // The hops run inside the captured graphs; each phase is entered before the launch that
    // holds it, so hooks and the watchdog see the same sequence as eagerly.
    const StepTimes times = graph_step(ctx, enter);
    return times;
  }
  enter(Phase::data);
  gather(ctx);
  enter(Phase::forward);
  forward();
  enter(Phase::backward);
  backward();
  const auto t1 = Clock::now();
  enter(Phase::reduce);
  all_reduce();
  const auto t2 = Clock::now();
  enter(Phase::update);
  update();
  if (want_metrics && inputs_->experiment.train.log_after_update) {
    // TensorFlow 1's display in the seed: after the update, a second training-mode pass over the
    // same batch (batch statistics and dropout; the running statistics move).
    replica_->reset_metrics();
    replica_->forward_loss(pass_);
    if (sums_across_replicas())
      inputs_->comm->all_reduce_sum(local_rank_, *backend_, replica_->metrics(), kMetricSlots);
  }
  StepTimes times;
  times.compute_ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
  times.comm_ms = std::chrono::duration<double, std::milli>(t2 - t1).count();
  return times;
}

void Worker::average_state() {
  // Local batch norm leaves each replica its own running statistics; their mean is the model's,
  // so evaluation and checkpoints do not depend on which replica is read.
  const std::size_t n = inputs_->model.state_count();
  const int replicas = inputs_->replicas;
  if (n == 0 || !sums_across_replicas()) return;
  inputs_->comm->all_reduce_sum(local_rank_, *backend_, replica_->state(), n);
  backend_->scale(n, 1.0f / replicas, replica_->state());
}

void Worker::evaluate(EvalSplit split, const PhaseCallback& on_phase) {
  if (on_phase) on_phase(Phase::evaluate);
  const ImageSet& images = inputs_->data->split(split);
  replica_->reset_metrics();
  const int lo = slice_begin(images.count, inputs_->replicas, replica_index_);
  const int hi = slice_begin(images.count, inputs_->replicas, replica_index_ + 1);
  for (int begin = lo; begin < hi; begin += replica_->max_batch()) {
    const int n = std::min(replica_->max_batch(), hi - begin);
    gather_eval(split, begin, n);
    replica_->forward_loss(pass_);
  }
  if (on_phase) on_phase(Phase::reduce);
  if (sums_across_replicas())
    inputs_->comm->all_reduce_sum(local_rank_, *backend_, replica_->metrics(), kMetricSlots);
}

const float* Worker::test_logits(int begin, int n) {
  gather_eval(EvalSplit::test, begin, n);
  return replica_->forward_logits(pass_);
}

void Worker::gather_eval(EvalSplit split, int begin, int n) {
  const ImageSet& images = inputs_->data->split(split);
  MNIST_CHECK(n >= 1 && n <= replica_->max_batch() && begin >= 0 && begin + n <= images.count,
              "{} images [{}, {}) outside the set of {} or beyond the batch of {}",
              to_string(split), begin, begin + n, images.count, replica_->max_batch());
  for (int i = 0; i < n; ++i) host_indices_[i] = begin + i;
  backend_->copy_to_device(indices_.data(), host_indices_.data(), sizeof(int32_t) * n);
  const bool test = split == EvalSplit::test;
  backend_->gather_batch(resident_batch(test ? test_pixels_.data() : validation_pixels_.data(),
                                        test ? test_labels_.data() : validation_labels_.data(),
                                        images.pixels_per_image(), indices_.data()),
                         n);
  pass_.n = n;
  pass_.training = false;
  pass_.first_sample = 0;
}

void Worker::metrics(float out[kMetricSlots]) {
  backend_->copy_to_host(out, replica_->metrics(), sizeof(float) * kMetricSlots);
  caught_up();
}

void Worker::synchronize() {
  backend_->synchronize();
  caught_up();
}

void Worker::caught_up() {
  if (graphs_) graphs_->uploads_done = graphs_->uploads;
}

CheckpointState Worker::snapshot() {
  const Model& model = inputs_->model;
  const std::size_t n = model.param_count();
  CheckpointState s;
  s.params.resize(n);
  s.state.resize(model.state_count());
  s.moment1.resize(n);
  backend_->copy_to_host(s.params.data(), replica_->params(), n * sizeof(float));
  if (!s.state.empty())
    backend_->copy_to_host(s.state.data(), replica_->state(), s.state.size() * sizeof(float));
  backend_->copy_to_host(s.moment1.data(), replica_->moment1(), n * sizeof(float));
  if (inputs_->experiment.optimizer.kind == OptimizerKind::adam) {
    s.moment2.resize(n);
    backend_->copy_to_host(s.moment2.data(), replica_->moment2(), n * sizeof(float));
  }
  caught_up();
  return s;
}

void Worker::restore(const CheckpointState& s) {
  const Model& model = inputs_->model;
  const std::size_t n = model.param_count();
  MNIST_CHECK(s.params.size() == n && s.state.size() == model.state_count() &&
                  (s.moment1.empty() || s.moment1.size() == n) &&
                  (s.moment2.empty() || s.moment2.size() == n),
              "weights do not fit the model: {} parameters, {} state values, moments {} and {} "
              "(the model has {} parameters and {} state values)",
              s.params.size(), s.state.size(), s.moment1.size(), s.moment2.size(), n,
              model.state_count());
  Backend& be = *backend_;
  be.copy_to_device(replica_->params(), s.params.data(), n * sizeof(float));
  if (!s.state.empty())
    be.copy_to_device(replica_->state(), s.state.data(), s.state.size() * sizeof(float));
  if (s.moment1.empty())
    be.fill(replica_->moment1(), n, 0.0f);
  else
    be.copy_to_device(replica_->moment1(), s.moment1.data(), n * sizeof(float));
  if (s.moment2.empty())
    be.fill(replica_->moment2(), n, 0.0f);
  else
    be.copy_to_device(replica_->moment2(), s.moment2.data(), n * sizeof(float));
}

}  // namespace mnist
