// The benchmark record: every layer timed, a throughput, the memory a replica holds.

#include <catch2/catch.hpp>

#include "model/model.hpp"
#include "support/synthetic.hpp"
#include "train/benchmark.hpp"

using namespace mnist;

TEST_CASE("the benchmark times every layer and reports a throughput", "[benchmark]") {
  const Experiment e = parse_experiment(testing::small_network_yaml(), "bench-test.yaml");
  const Model model = Model::build(e.model);
  auto backend = make_cpu_backend(BackendOptions{});
  BenchmarkOptions o;
  o.batch = 16;
  o.steps = 2;
  o.warmup = 1;
  const BenchmarkResult r = run_benchmark(model, *backend, o);
  CHECK(r.samples_per_second > 0);
  CHECK(r.step_ms > 0);
  REQUIRE(r.layers.size() == model.layers().size());
  CHECK(r.forward_ms[0] > 0);  // the first conv does real work
  CHECK(r.backward_ms[0] > 0);
  CHECK(format_benchmark(r).find("adam update") != std::string::npos);
  CHECK(benchmark_json(r).find("\"samples_per_second\"") != std::string::npos);
}
