// The benchmark record: every layer timed, a throughput, the memory a replica holds; the step it
// times is training's (the config's optimizer, the all-reduce unless left out).

#include <catch2/catch.hpp>

#include "comm/thread_communicator.hpp"
#include "model/model.hpp"
#include "support/synthetic.hpp"
#include "train/benchmark.hpp"

using namespace mnist;

TEST_CASE("the benchmark times every layer and reports a throughput", "[benchmark]") {
  const Experiment e = parse_experiment(testing::small_network_yaml(), "bench-test.yaml");
  const Model model = Model::build(e.model);
  BenchmarkOptions o;
  o.batch = 16;
  o.steps = 2;
  o.warmup = 1;
  const BenchmarkResult r = run_benchmark(e, model, make_cpu_backend(BackendOptions{}),
                                          std::make_shared<ThreadCommunicator>(1), o);
  CHECK(r.samples_per_second > 0);
  CHECK(r.step_ms > 0);
  // One row per layer as run: the native engine fuses conv2d -> batch_norm -> relu -> max_pool.
  REQUIRE(r.layers.size() == model.layers().size() - 3);
  CHECK(r.layers[0] == "0:conv2d+batch_norm+relu+max_pool");
  CHECK(r.layers[1] == "4:conv2d");
  CHECK(r.forward_ms[0] > 0);  // the first conv does real work
  CHECK(r.backward_ms[0] > 0);
  CHECK(format_benchmark(r).find("  0:conv2d+batch_norm+relu+max_pool ") != std::string::npos);
  CHECK(format_benchmark(r).find("adam update") != std::string::npos);
  CHECK(benchmark_json(r).find("\"samples_per_second\"") != std::string::npos);
}

TEST_CASE("the benchmark reports the convolution algorithms an engine chose", "[benchmark]") {
  // The CPU backend runs its own kernels: nothing to report.
  const Experiment e = parse_experiment(testing::small_network_yaml(), "bench-test.yaml");
  const Model model = Model::build(e.model);
  BenchmarkOptions o;
  o.batch = 8;
  o.steps = 1;
  o.warmup = 0;
  const BenchmarkResult cpu =
      run_benchmark(e, model, make_cpu_backend(BackendOptions{}), nullptr, o);
  CHECK(cpu.conv_algorithms.empty());
  CHECK(format_benchmark(cpu).find("algorithms") == std::string::npos);
  CHECK(benchmark_json(cpu).find("\"conv_algorithms\":[]") != std::string::npos);

  // What the cudnn engine's lines look like in the table and the JSON.
  BenchmarkResult r = cpu;
  r.conv_algorithms = {
      "0:conv2d: forward IMPLICIT_GEMM, backward-data ALGO_1, backward-weights "
      "ALGO_1"};
  CHECK(format_benchmark(r).find("\n  algorithms 0:conv2d: forward IMPLICIT_GEMM, backward-data "
                                 "ALGO_1, backward-weights ALGO_1\n") != std::string::npos);
  CHECK(benchmark_json(r).find("\"conv_algorithms\":[\"0:conv2d: forward IMPLICIT_GEMM, "
                               "backward-data ALGO_1, backward-weights ALGO_1\"]") !=
        std::string::npos);
}

TEST_CASE("the benchmark runs the config's optimizer and the all-reduce unless left out",
          "[benchmark]") {
  const Experiment adam = parse_experiment(testing::small_network_yaml(), "bench-test.yaml");
  const Model model = Model::build(adam.model);
  BenchmarkOptions o;
  o.batch = 8;
  o.steps = 1;
  o.warmup = 0;
  const BenchmarkResult with = run_benchmark(adam, model, make_cpu_backend(BackendOptions{}),
                                             std::make_shared<ThreadCommunicator>(1), o);
  CHECK(with.optimizer == "adam");
  CHECK(with.communicator == "in-process sum over 1 worker");
  CHECK(format_benchmark(with).find("  all-reduce ") != std::string::npos);
  CHECK(format_benchmark(with).find("(in-process sum over 1 worker)") != std::string::npos);
  CHECK(benchmark_json(with).find("\"communicator\":\"in-process sum over 1 worker\"") !=
        std::string::npos);

  const Experiment sgd = parse_experiment(testing::small_network_yaml(), "bench-test.yaml",
                                          {"optimizer.type=sgd", "optimizer.momentum=0.9"});
  const BenchmarkResult without =
      run_benchmark(sgd, model, make_cpu_backend(BackendOptions{}), nullptr, o);
  CHECK(without.optimizer == "sgd");
  CHECK(without.communicator.empty());
  CHECK(format_benchmark(without).find("sgd update") != std::string::npos);
  CHECK(format_benchmark(without).find("adam update") == std::string::npos);
  CHECK(format_benchmark(without).find("left out: --no-allreduce") != std::string::npos);
  CHECK(benchmark_json(without).find("\"optimizer\":\"sgd\"") != std::string::npos);

  // One replica: a communicator of several workers is refused rather than left waiting.
  REQUIRE_THROWS_WITH(run_benchmark(adam, model, make_cpu_backend(BackendOptions{}),
                                    std::make_shared<ThreadCommunicator>(2), o),
                      Catch::Contains("one replica"));
}
