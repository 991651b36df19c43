#include "train/benchmark.hpp"

#include <algorithm>
#include <chrono>

#include <thread>

#include "backend/cpu/native/isa.hpp"
#include "comm/communicator.hpp"
#include "core/cpu_threads.hpp"
#include "core/error.hpp"
#include "core/json.hpp"
#include "core/rng.hpp"
#include "data/sampler.hpp"
#include "model/layers.hpp"
#include "model/replica.hpp"
#include "train/run_memory.hpp"
#include "train/worker.hpp"

namespace mnist {

namespace {
using Clock = std::chrono::steady_clock;
double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}
}  // namespace

BenchmarkResult run_benchmark(const Experiment& experiment, const Model& model,
                              std::unique_ptr<Backend> backend, std::shared_ptr<Communicator> comm,
                              const BenchmarkOptions& o) {
  MNIST_CHECK(o.batch >= 1 && o.steps >= 1 && o.warmup >= 0,
              "bad benchmark options: batch {}, steps {}", o.batch, o.steps);
  MNIST_CHECK(!comm || (comm->local_size() == 1 && comm->global_size() == 1),
              "the benchmark runs one replica; its communicator '{}' has {} workers",
              comm ? comm->name() : "", comm ? comm->global_size() : 0);
  // Sized before anything is allocated (options.batch is `bench --batch`): the replica, and the
  // random image pool, which on the CPU share the host's memory.
  {
    std::vector<MemoryTerm> terms = replica_memory(model, o.batch, "--batch");
    terms[0].bytes += static_cast<uint64_t>(std::max(o.batch, 4096)) * model.input().size();
    if (backend->kind() == DeviceKind::cpu)
      check_host_memory(terms, 1, available_host_bytes(), "the benchmark");
  }
  const int profiled = std::max(1, std::min(o.steps, 5));
  const int total_steps = o.warmup + o.steps + profiled;
  // The config as one replica with the benchmark's batch trains it; the replica is sized for that
  // batch alone (the benchmark does not evaluate).
  Experiment e = experiment;
  e.seed = o.seed;
  e.train.global_batch = o.batch;
  e.train.steps = total_steps;
  e.train.eval_batch = o.batch;
  // A random image pool, uploaded as training uploads the dataset; each step gathers from it.
  const int pool = std::max(o.batch, 4096);
  auto data = std::make_shared<Dataset>();
  data->name = "random";
  ImageSet& images = data->train;
  images.count = pool;
  images.rows = data->test.rows = model.input().h;
  images.cols = data->test.cols = model.input().w;
  images.pixels.resize(static_cast<std::size_t>(pool) * model.input().size());
  images.labels.resize(pool);
  const RngKey key = make_rng_key(o.seed, 0x4000u);
  for (std::size_t i = 0; i < images.pixels.size(); ++i)
    images.pixels[i] =
        static_cast<uint8_t>(philox4x32(static_cast<uint32_t>(i), 0, 0, 0, key.k0, key.k1).v[0]);
  for (int i = 0; i < pool; ++i) images.labels[i] = static_cast<uint8_t>(i % model.classes());
  const std::string communicator = comm ? comm->name() : "";
  Worker worker(RunInputs::make(e, model, std::move(data), std::move(comm), 1), std::move(backend),
                0, 0);
  Backend& be = worker.backend();
  Replica& replica = worker.replica();

  // Each step's batch: the worker's own epoch sampler over the pool, as in training.
  auto lr_at = [&](int64_t step) { return worker.inputs().learning_rate(step, total_steps); };
  auto one_step = [&](int64_t step) { worker.train_step({step, lr_at(step)}, false); };
  for (int i = 0; i < o.warmup; ++i) one_step(i);
  worker.synchronize();
  const auto start = Clock::now();
  const LaunchCounts counted_from = be.counts();
  for (int i = 0; i < o.steps; ++i) one_step(o.warmup + i);
  const LaunchCounts counted = be.counts() - counted_from;  // the steps' own, not the wait below
  worker.synchronize();
  const double total_ms = ms_between(start, Clock::now());

  // Profiled pass: the same hops, with a synchronisation around every layer, the all-reduce and
  // the update.
  Replica::LayerTimes times;
  times.forward_ms.assign(model.layers().size(), 0.0);
  times.backward_ms.assign(model.layers().size(), 0.0);
  double allreduce_ms = 0, update_ms = 0;
  replica.set_profile(&times);
  for (int i = 0; i < profiled; ++i) {
    const int64_t step = o.warmup + o.steps + i;
    worker.gather({step, lr_at(step)});
    worker.forward();
    worker.backward();
    worker.synchronize();
    auto t0 = Clock::now();
    worker.all_reduce();
    worker.synchronize();
    allreduce_ms += ms_between(t0, Clock::now());
    t0 = Clock::now();
    worker.update();
    worker.synchronize();
    update_ms += ms_between(t0, Clock::now());
  }
  replica.set_profile(nullptr);
  // The loss kernel's share: the training forward (every layer + loss) timed alone, less the
  // per-layer forward times measured above.
  double loss_ms = 0;
  {
    worker.synchronize();
    const auto t0 = Clock::now();
    for (int i = 0; i < profiled; ++i) worker.forward();
    worker.synchronize();
    double forward_total = 0;
    for (double v : times.forward_ms) forward_total += v;
    loss_ms = std::max(0.0, ms_between(t0, Clock::now()) - forward_total) / profiled;
  }

  BenchmarkResult r;
  r.device = be.name();
  r.batch = o.batch;
  r.steps = o.steps;
  r.step_ms = total_ms / o.steps;
  r.samples_per_second = o.batch * o.steps / (total_ms / 1000.0);
  r.kernels_per_step = static_cast<double>(counted.kernels) / o.steps;
  r.library_calls_per_step = static_cast<double>(counted.library_calls) / o.steps;
  r.copies_per_step = static_cast<double>(counted.copies) / o.steps;
  r.host_syncs_per_step = static_cast<double>(counted.host_syncs) / o.steps;
  // One row per layer as the replica runs them (a fused block is one row, timed at its first plan).
  for (const auto& layer : replica.layers()) {
    const int i = layer->plan().index;
    r.layers.push_back(layer->label());
    r.forward_ms.push_back(times.forward_ms[i] / profiled);
    r.backward_ms.push_back(times.backward_ms[i] / profiled);
  }
  r.loss_ms = loss_ms;
  r.update_ms = update_ms / profiled;
  r.optimizer = e.optimizer.kind == OptimizerKind::adam ? "adam" : "sgd";
  r.communicator = communicator;
  r.allreduce_ms = allreduce_ms / profiled;
  r.device_bytes = replica.device_bytes();
  r.flops_per_sample = model.flops_per_sample();
  for (const LayerPlan& p : model.layers()) {
    if (p.spec.kind != LayerKind::conv2d) continue;
    const Conv2dAlgorithms a = be.conv2d_algorithms(conv2d_geom(p, o.batch));
    if (a.forward == "native" && a.backward_data == "native" && a.backward_weights == "native")
      continue;
    r.conv_algorithms.push_back(fmt::format("{}: forward {}, backward-data {}, backward-weights {}",
                                            p.label(), a.forward, a.backward_data,
                                            a.backward_weights));
  }
  return r;
}

AllReduceResult run_allreduce_benchmark(const std::function<std::unique_ptr<Backend>(int)>& factory,
                                        int workers, Communicator& comm, std::size_t count,
                                        int iterations) {
  MNIST_CHECK(workers >= 1 && iterations >= 1 && count >= 1, "bad all-reduce benchmark request");
  double seconds = 0;
  std::vector<std::string> errors(workers);
  std::vector<std::thread> threads;
  for (int k = 0; k < workers; ++k) {
    threads.emplace_back([&, k] {
      try {
        std::unique_ptr<Backend> be = factory(k);
        DeviceBuffer<float> buffer(*be, count);
        be->fill(buffer.data(), count, 1.0f);
        for (int i = 0; i < 5; ++i) comm.all_reduce_sum(k, *be, buffer.data(), count);
        be->synchronize();
        comm.all_reduce_sum(k, *be, buffer.data(), 1);  // line the workers up
        be->synchronize();
        const auto start = Clock::now();
        for (int i = 0; i < iterations; ++i) comm.all_reduce_sum(k, *be, buffer.data(), count);
        be->synchronize();
        if (k == 0) seconds = ms_between(start, Clock::now()) / 1000.0;
      } catch (const std::exception& e) {
        errors[k] = e.what();
        comm.abort();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int k = 0; k < workers; ++k)
    if (!errors[k].empty() && errors[k].find("aborted") == std::string::npos)
      MNIST_THROW(RuntimeError, "all-reduce benchmark, worker {}: {}", k, errors[k]);
  AllReduceResult r;
  r.communicator = comm.name();
  r.workers = workers;
  r.floats = count;
  r.iterations = iterations;
  r.us_per_call = seconds * 1e6 / iterations;
  r.algbw_gb_s = count * sizeof(float) / (seconds / iterations) / 1e9;
  r.busbw_gb_s = r.algbw_gb_s * 2.0 * (workers - 1) / workers;
  return r;
}

std::string format_allreduce(const AllReduceResult& r) {
  if (r.workers == 1 && r.us_per_call < 1.0)
    return fmt::format("all-reduce ({}, 1 worker): nothing to reduce ({:.2f} us/call)\n",
                       r.communicator, r.us_per_call);
  return fmt::format(
      "all-reduce ({}, {} workers): {} floats ({:.1f} KiB), {} calls: {:.1f} us/call, algbw {:.2f} "
      "GB/s, busbw {:.2f} GB/s\n",
      r.communicator, r.workers, r.floats, r.floats * 4 / 1024.0, r.iterations, r.us_per_call,
      r.algbw_gb_s, r.busbw_gb_s);
}

FmaPeak probe_cpu_fma_peak(int threads) {
  FmaPeak p;
  const cpu::native::Isa isa = cpu::native::chosen_isa();
  p.isa = cpu::native::isa_name(isa);
  p.threads = threads > 0 ? threads : usable_cpu_threads().count;
  p.gflops = cpu::native::fma_peak_gflops(isa, p.threads);
  return p;
}

double benchmark_gflops(const BenchmarkResult& r) {
  return r.samples_per_second * 3.0 * r.flops_per_sample / 1e9;
}

namespace {
// The CPU backend launches nothing and counts nothing: no line of zeros for it.
bool be_counts(const BenchmarkResult& r) {
  return r.kernels_per_step > 0 || r.copies_per_step > 0 || r.host_syncs_per_step > 0;
}
}  // namespace

std::string format_benchmark(const BenchmarkResult& r) {
  std::string out = fmt::format(
      "{}: batch {}, {} timed steps: {:.2f} ms/step, {:.0f} samples/s ({:.1f} GFLOP/s of forward+"
      "backward at 3x forward FLOPs), replica memory {:.1f} MiB\n",
      r.device, r.batch, r.steps, r.step_ms, r.samples_per_second, benchmark_gflops(r),
      r.device_bytes / 1048576.0);
  if (be_counts(r))
    out += fmt::format(
        "  per step (counted): kernels {:g} (cuBLAS/cuDNN calls {:g}), copies {:g}, host syncs "
        "{:g}\n",
        r.kernels_per_step, r.library_calls_per_step, r.copies_per_step, r.host_syncs_per_step);
  double total = r.loss_ms + r.update_ms + r.allreduce_ms;
  for (std::size_t i = 0; i < r.layers.size(); ++i) total += r.forward_ms[i] + r.backward_ms[i];
  std::size_t width = 14;  // fused blocks have long names
  for (const std::string& l : r.layers) width = std::max(width, l.size());
  out += fmt::format("  {:<{}} {:>10} {:>10} {:>7}   (profiled: synchronised around each layer)\n",
                     "layer", width, "fwd ms", "bwd ms", "share");
  for (std::size_t i = 0; i < r.layers.size(); ++i)
    out +=
        fmt::format("  {:<{}} {:>10.3f} {:>10.3f} {:>6.1f}%\n", r.layers[i], width, r.forward_ms[i],
                    r.backward_ms[i], 100.0 * (r.forward_ms[i] + r.backward_ms[i]) / total);
  for (const std::string& line : r.conv_algorithms) out += fmt::format("  algorithms {}\n", line);
  out += fmt::format("  {:<{}} {:>10.3f} {:>10} {:>6.1f}%\n", "loss", width, r.loss_ms, "",
                     100.0 * r.loss_ms / total);
  if (r.communicator.empty())
    out += fmt::format("  {:<{}} {:>10} {:>10}          (left out: --no-allreduce)\n", "all-reduce",
                       width, "", "");
  else
    out += fmt::format("  {:<{}} {:>10} {:>10.3f} {:>6.1f}%   ({})\n", "all-reduce", width, "",
                       r.allreduce_ms, 100.0 * r.allreduce_ms / total, r.communicator);
  out += fmt::format("  {:<{}} {:>10} {:>10.3f} {:>6.1f}%\n", r.optimizer + " update", width, "",
                     r.update_ms, 100.0 * r.update_ms / total);
  return out;
}

std::string benchmark_json(const BenchmarkResult& r) {
  std::string layers;
  for (std::size_t i = 0; i < r.layers.size(); ++i)
    layers +=
        fmt::format("{}{{\"layer\":{},\"forward_ms\":{:.6g},\"backward_ms\":{:.6g}}}", i ? "," : "",
                    json::quote(r.layers[i]), r.forward_ms[i], r.backward_ms[i]);
  std::string algorithms;
  for (std::size_t i = 0; i < r.conv_algorithms.size(); ++i)
    algorithms += (i ? "," : "") + json::quote(r.conv_algorithms[i]);
  return fmt::format(
      "{{\"engine\":{},\"device\":{},\"batch\":{},\"steps\":{},\"step_ms\":{:.6g},\"samples_per_"
      "second\":{:.6g},"
      "\"kernels_per_step\":{:.6g},\"library_calls_per_step\":{:.6g},\"copies_per_step\":{:.6g},"
      "\"host_syncs_per_step\":{:.6g},\"loss_ms\":{:.6g},\"update_ms\":{:.6g},\"optimizer\":{},"
      "\"allreduce_ms\":{:.6g},"
      "\"communicator\":{},\"device_bytes\":{},\"layers\":[{}],\"conv_algorithms\":[{}]}}",
      json::quote(r.engine), json::quote(r.device), r.batch, r.steps, r.step_ms,
      r.samples_per_second, r.kernels_per_step, r.library_calls_per_step, r.copies_per_step,
      r.host_syncs_per_step, r.loss_ms, r.update_ms, json::quote(r.optimizer), r.allreduce_ms,
      json::quote(r.communicator), r.device_bytes, layers, algorithms);
}

}  // namespace mnist
