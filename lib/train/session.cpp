#include "train/session.hpp"

#include <chrono>
#include <cmath>
#include <functional>
#include <optional>

#include "core/error.hpp"
#include "data/dataset.hpp"
#include "train/checkpoint.hpp"
#include "train/communicators.hpp"
#include "train/run_agreement.hpp"
#include "train/run_log.hpp"
#include "train/run_memory.hpp"
#include "train/tensorboard.hpp"

namespace mnist {

namespace {

// Completes a trainer snapshot into what the run directory's checkpoint records.
void describe_checkpoint(CheckpointState& c, const Trainer& trainer, const Dataset& data,
                         int replicas) {
  // A checkpoint must hold the last good state: refuse to write non-finite parameters.
  for (std::size_t i = 0; i < c.params.size(); ++i)
    if (!std::isfinite(c.params[i]))
      MNIST_THROW(DivergenceError,
                  "step {}: parameter {} is {}; the run diverged (the previous checkpoint is kept)",
                  c.step, i, c.params[i]);
  c.epoch = static_cast<double>(c.step) * trainer.plan().global_batch / data.train.count;
  c.data_source = data.provenance;
  c.metadata["global_batch"] = std::to_string(trainer.plan().global_batch);
  c.metadata["replicas"] = std::to_string(replicas);
}

// Several processes on one node share its GPUs: each takes an equal, disjoint part of the list,
// chosen by its node-local rank.
DevicePlan this_process_devices(const DevicePlan& device_plan, const ProcessGroup& group) {
  DevicePlan devices = device_plan;
  if (devices.kind != DeviceKind::cuda || group.local_size() <= 1) return devices;
  const int total = static_cast<int>(devices.gpus.size()), parts = group.local_size();
  if (total % parts != 0)
    MNIST_THROW(ConfigError,
                "devices.gpus: {} GPUs cannot be shared evenly by the {} processes on {}; start "
                "one process per node, or as many as divide the GPU count",
                total, parts, group.host());
  const int each = total / parts;
  devices.gpus = std::vector<int>(devices.gpus.begin() + group.local_rank() * each,
                                  devices.gpus.begin() + (group.local_rank() + 1) * each);
  return devices;
}

// The run's dataset, read once for every worker of this process, and checked against the model,
// the memory the run will take and (several processes) every other rank's run and layout.
std::shared_ptr<const Dataset> load_run_data(const Experiment& experiment, const Model& model,
                                             const DevicePlan& devices, ProcessGroup& group,
                                             spdlog::logger& log) {
  const auto load_start = std::chrono::steady_clock::now();
  auto shared_data =
      std::make_shared<const Dataset>(load_dataset(experiment.data, experiment.model.classes));
  const Dataset& data = *shared_data;
  log.info(
      "data: {} ({} train{} / {} test images of {}x{}, read in {:.2f} s){}", data.name,
      data.train.count,
      data.validation.count > 0
          ? fmt::format(" / {} validation (held out of the training files)", data.validation.count)
          : "",
      data.test.count, data.train.rows, data.train.cols,
      std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count(),
      data.provenance.empty() ? "" : "; source: " + data.provenance);
  const ModelConfig& input = experiment.model;
  check_images_fit_model(data.train, input.input_c, input.input_h, input.input_w);
  check_images_fit_model(data.test, input.input_c, input.input_h, input.input_w);
  check_training_memory(experiment, model, devices, group.size(),
                        data.train.pixels.size() + data.train.labels.size() +
                            data.validation.pixels.size() + data.validation.labels.size() +
                            data.test.pixels.size() + data.test.labels.size());
  if (!devices.note.empty()) log.info("{}", devices.note);
  if (group.size() > 1) {
    check_same_run(group, experiment, data);
    for (const std::string& line : agree_on_layout(group, devices.workers(), devices.describe()))
      log.info("{}", line);
  }
  return shared_data;
}

// The checkpoint a run resumes from (--resume auto or a file), read and checked against the
// experiment before any device is touched; none when the run starts fresh.
struct ResumePoint {
  CheckpointState state;
  std::string path;
};
std::optional<ResumePoint> find_resume_point(const SessionOptions& options,
                                             const CheckpointDirectory& checkpoints,
                                             const Experiment& experiment, const Model& model,
                                             spdlog::logger& log) {
  std::optional<ResumePoint> resume;
  if (options.resume == "auto") {
    if (auto found = checkpoints.latest_valid(model))
      resume = ResumePoint{std::move(found->state), found->path};
    else
      log.info("--resume auto: no checkpoint in {}, starting from step 0", checkpoints.dir());
  } else if (!options.resume.empty()) {
    resume = ResumePoint{load_checkpoint(options.resume, model), options.resume};
  }
  if (!resume) return resume;
  if (options.force_resume) {
    for (const std::string& d :
         math_config_differences(experiment, resume->state.metadata["math_config"]))
      log.warn("--force-resume: {}", d);
  } else {
    check_resume_compatible(resume->state, experiment, resume->path);
  }
  return resume;
}

// The resume point against the trainer's batch plan: the same global batch (unless forced) and a
// step within the run.
void check_resume_fits_plan(const ResumePoint& resume, const BatchPlan& plan, bool force_resume) {
  const auto saved_batch = resume.state.metadata.find("global_batch");
  if (saved_batch != resume.state.metadata.end() &&
      saved_batch->second != std::to_string(plan.global_batch) && !force_resume)
    MNIST_THROW(ConfigError,
                "{}: the checkpoint was trained with a global batch of {} but this run's is {} "
                "(devices or batch keys changed); use --force-resume to continue anyway",
                resume.path, saved_batch->second, plan.global_batch);
  if (resume.state.step > plan.steps)
    MNIST_THROW(ConfigError, "{}: the checkpoint is at step {}, beyond this run's {} steps",
                resume.path, resume.state.step, plan.steps);
}

// A signal may reach one rank only; every rank must stop after the same step, so with several
// processes the request is agreed with a (tiny) collective after each step. Workers are idle
// then: no concurrent MPI use.
std::function<int()> agreed_stop_request(ProcessGroup& group, std::function<int()> local) {
  if (group.size() <= 1 || !local) return local;
  return [&group, local = std::move(local)] {
    const int mine = local();
    float votes[2] = {mine == kStopInterrupt ? 1.0f : 0.0f, mine == kStopRequeue ? 1.0f : 0.0f};
    group.all_reduce_sum(votes, 2);
    return votes[1] > 0 ? kStopRequeue : votes[0] > 0 ? kStopInterrupt : kNoStop;
  };
}

// A resumed run's best checkpoint is the one its selection names: the file of the best step. A
// file of another step (written after the checkpoint resumed from, by a run that then went
// elsewhere) is replaced at the next improvement; until then the summary cannot vouch for it.
void check_best_file(const SelectionState& selection, const CheckpointDirectory& checkpoints,
                     spdlog::logger& log) {
  if (selection.best_step < 0) return;
  const std::string path = checkpoints.best_path();
  try {
    const CheckpointState best = read_checkpoint_metadata(path);
    if (best.step != selection.best_step)
      log.warn(
          "{} holds step {}, but the run resumed chose step {} as its best so far; it is "
          "replaced at the next improvement",
          path, best.step, selection.best_step);
  } catch (const Error& e) {
    log.warn(
        "the best checkpoint (step {}) cannot be read: {}; it is written again at the next "
        "improvement",
        selection.best_step, e.what());
  }
}

// The test set on the best checkpoint, read back from its file (the one a user gets): the same
// evaluation as the final one, on every rank. nullopt, with a warning, when it cannot be read or
// holds another step than the selection's best (check_best_file).
std::optional<EvalRecord> evaluate_best(Trainer& trainer, const TrainSummary& summary,
                                        const CheckpointDirectory& checkpoints, const Model& model,
                                        spdlog::logger& log) {
  const int64_t best_step = summary.selection.best_step;
  EvalRecord r;
  if (best_step == summary.steps) {
    r = summary.final_eval;  // the final parameters are the best
  } else {
    CheckpointState best;
    try {
      best = load_checkpoint(checkpoints.best_path(), model);
    } catch (const DataError& e) {
      log.warn("no test figures for the best checkpoint: {}", e.what());
      return std::nullopt;
    }
    if (best.step != best_step) {
      log.warn("no test figures for the best checkpoint: {} holds step {}, not the best step {}",
               checkpoints.best_path(), best.step, best_step);
      return std::nullopt;
    }
    trainer.restore(best);
    r = trainer.evaluate(EvalSplit::test);
  }
  r.of_best = true;
  return r;
}

}  // namespace

SessionResult run_session(const Experiment& experiment, const Model& model,
                          const DevicePlan& device_plan, const SessionOptions& options,
                          std::shared_ptr<spdlog::logger> log, ProcessGroup& group) {
  const DevicePlan devices = this_process_devices(device_plan, group);
  const std::shared_ptr<const Dataset> shared_data =
      load_run_data(experiment, model, devices, group, *log);
  const Dataset& data = *shared_data;
  const bool rank0 = group.rank() == 0;
  const int replicas = devices.workers() * group.size();

  RunLog run_log(experiment, log, rank0);
  // Every rank reads checkpoints (to resume); rank 0 alone writes them.
  CheckpointDirectory checkpoints(run_log.dir(), experiment.checkpoint.keep, log);
  const std::optional<ResumePoint> resume =
      find_resume_point(options, checkpoints, experiment, model, *log);

  SessionResult result;
  Trainer* trainer_ptr = nullptr;
  TrainerOptions trainer_options = options.trainer;
  trainer_options.stop_requested = agreed_stop_request(group, options.trainer.stop_requested);
  trainer_options.checkpoint_every = experiment.checkpoint.every;
  // Every rank takes the snapshot (a collective with local batch norm); rank 0 writes it, and the
  // others wait for the write so a checkpoint exists on disk before any rank moves on.
  auto save = [&](Trainer& trainer) {
    CheckpointState snapshot = trainer.snapshot();
    std::string path;
    if (rank0) {
      describe_checkpoint(snapshot, trainer, data, replicas);
      path = checkpoints.save(model, experiment, snapshot);
    }
    group.barrier();
    return path;
  };
  // The trainer calls back between steps, when it is safe to snapshot it.
  trainer_options.on_checkpoint = [&](int64_t) {
    result.checkpoint = save(*trainer_ptr);
    if (rank0) log->info("checkpoint {}", result.checkpoint);
  };
  // The best checkpoint, replaced atomically as the others are written; every rank waits for it.
  trainer_options.on_best = [&](int64_t) {
    CheckpointState snapshot = trainer_ptr->snapshot();
    if (rank0) {
      describe_checkpoint(snapshot, *trainer_ptr, data, replicas);
      checkpoints.save_best(model, experiment, snapshot);
    }
    group.barrier();
  };
  const std::shared_ptr<Communicator> comm = make_communicator(devices, &group);
  Trainer trainer(experiment, model, shared_data, devices.factory(), devices.workers(), comm,
                  group.rank() * devices.workers(), trainer_options);
  trainer_ptr = &trainer;
  const BatchPlan& plan = trainer.plan();
  log->info("devices: {} ({}); gradients: {}; {} step{}, global batch {} ({} per replica){}",
            devices.describe(), trainer.device_names(), comm->name(), plan.steps,
            plan.steps == 1 ? "" : "s", plan.global_batch,
            plan.slice_begin[1] - plan.slice_begin[0],
            experiment.train.scale_lr_with_devices ? fmt::format(", lr scaled x{}", replicas) : "");
  if (resume) {
    check_resume_fits_plan(*resume, plan, options.force_resume);
    trainer.restore(resume->state);
    log->info("resumed from {} at step {}", resume->path, resume->state.step);
    check_best_file(resume->state.selection, checkpoints, *log);
  }

  std::vector<RunObserver*> observers{&run_log};
  if (options.progress) observers.push_back(options.progress.get());
  std::unique_ptr<TensorBoardWriter> tensorboard;
  if (rank0 && experiment.output.tensorboard) {
    tensorboard = std::make_unique<TensorBoardWriter>(run_log.dir() + "/tb");
    observers.push_back(tensorboard.get());
    log->info("TensorBoard events: {} (tensorboard --logdir {})", tensorboard->path(),
              run_log.dir());
  }
  RunObservers all(observers);
  result.summary = trainer.run(all);
  if (options.progress) options.progress->finish();
  run_log.early_stop(result.summary, plan.steps);
  result.checkpoint = save(trainer);
  if (result.summary.stop_reason != kNoStop) {
    result.outcome = result.summary.stop_reason == kStopRequeue ? SessionOutcome::requeue
                                                                : SessionOutcome::interrupted;
    if (rank0)
      log->warn("stopped at step {} of {} ({}); checkpoint {}; continue with --resume auto",
                result.summary.steps, plan.steps,
                result.outcome == SessionOutcome::requeue ? "SIGUSR1: requeue" : "interrupted",
                result.checkpoint);
    return result;
  }
  if (rank0) log->info("checkpoint {}", result.checkpoint);
  if (result.summary.selection.best_step >= 0) {
    result.summary.best_test = evaluate_best(trainer, result.summary, checkpoints, model, *log);
    if (result.summary.best_test) all.on_eval(*result.summary.best_test);
  }
  run_log.finish(result.summary, trainer.device_names(), data.provenance);
  return result;
}

}  // namespace mnist
