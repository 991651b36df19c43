// `mnist-train sweep` without running anything: the spec (options and sweep files), its expansion
// into points, the checks that refuse a bad point before anything starts, placement arithmetic
// (CPU threads, GPU selection, pinning, the memory a card must hold, with the free memory given),
// and the results table built from summaries.

#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "sweep/placement.hpp"
#include "sweep/plan.hpp"
#include "sweep/results.hpp"
#include "sweep/spec.hpp"

namespace fs = std::filesystem;
using mnist::ConfigError;
using mnist::UsageError;

namespace {

// The message of the exception `f` throws as E ("" when it throws none).
template <class E, class F>
std::string message_of(F f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "";
}

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name)
      : path(fs::temp_directory_path() /
             ("mnist-sweep-unit-" + name + "-" + std::to_string(::getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

void write(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

const char* kBase = "configs/cpu_quickstart.yaml";  // the tests run from the project root

}  // namespace

TEST_CASE("sweep values split at the commas outside brackets and quotes", "[sweep]") {
  using V = std::vector<std::string>;
  CHECK(mnist::split_top_level("0.001, 0.01,0.1") == V{"0.001", "0.01", "0.1"});
  CHECK(mnist::split_top_level("[0, 1],[2,3]") == V{"[0, 1]", "[2,3]"});
  CHECK(mnist::split_top_level("{a: 1, b: 2},'x,y'") == V{"{a: 1, b: 2}", "'x,y'"});
  CHECK(mnist::split_top_level("a,,b") == V{"a", "", "b"});
}

TEST_CASE("sweep --grid, --list and --seeds are read and refused with the option named",
          "[sweep]") {
  const mnist::SweepAxis axis = mnist::parse_grid_option("optimizer.lr=0.001,0.005, 0.01");
  CHECK(axis.key == "optimizer.lr");
  CHECK(axis.values == std::vector<std::string>{"0.001", "0.005", "0.01"});
  CHECK_THAT(message_of<UsageError>([] { mnist::parse_grid_option("optimizer.lr"); }),
             Catch::Contains("--grid 'optimizer.lr'") && Catch::Contains("KEY=V1,V2"));
  CHECK_THAT(message_of<UsageError>([] { mnist::parse_grid_option("optimizer.lr=1,,2"); }),
             Catch::Contains("empty value"));
  CHECK_THAT(message_of<UsageError>([] { mnist::parse_grid_option("optimizer.lr=1,1"); }),
             Catch::Contains("'1' is given twice"));

  const auto group = mnist::parse_list_option("optimizer.type=sgd, optimizer.lr=0.1", 2);
  REQUIRE(group.size() == 2);
  CHECK(group[1].text() == "optimizer.lr=0.1");
  CHECK(group[1].origin == "--list 2");
  CHECK_THAT(message_of<UsageError>([] { mnist::parse_list_option("optimizer.lr", 1); }),
             Catch::Contains("--list 1") && Catch::Contains("not KEY=VALUE"));
  CHECK_THAT(message_of<UsageError>([] { mnist::parse_list_option("a.b=1,a.b=2", 3); }),
             Catch::Contains("a.b is set twice"));

  CHECK(mnist::parse_seeds_option("1,2,3") == std::vector<uint64_t>{1, 2, 3});
  CHECK(mnist::parse_seeds_option("4-6,9") == std::vector<uint64_t>{4, 5, 6, 9});
  CHECK_THAT(message_of<UsageError>([] { mnist::parse_seeds_option("1,x"); }),
             Catch::Contains("'x' is not a seed"));
  CHECK_THAT(message_of<UsageError>([] { mnist::parse_seeds_option("1-3,2"); }),
             Catch::Contains("seed 2 is given twice"));
  CHECK_THAT(message_of<UsageError>([] { mnist::parse_seeds_option("-1"); }),
             Catch::Contains("not a seed"));
}

TEST_CASE("sweep points are groups x grid x seeds, the last axis and the seed fastest", "[sweep]") {
  mnist::SweepSpec spec;
  spec.groups = {mnist::parse_list_option("optimizer.type=adam", 1),
                 mnist::parse_list_option("optimizer.type=sgd,optimizer.momentum=0.9", 2)};
  spec.grid = {mnist::parse_grid_option("optimizer.lr=0.1,0.01"),
               mnist::parse_grid_option("train.batch_per_device=16,32,64")};
  spec.seeds = {1, 2};
  const auto points = mnist::expand_points(spec);
  REQUIRE(points.size() == 2 * 2 * 3 * 2);
  CHECK(points[0].label() ==
        "optimizer.type=adam optimizer.lr=0.1 train.batch_per_device=16 seed=1");
  CHECK(points[1].label() ==
        "optimizer.type=adam optimizer.lr=0.1 train.batch_per_device=16 seed=2");
  CHECK(points[2].label() ==
        "optimizer.type=adam optimizer.lr=0.1 train.batch_per_device=32 seed=1");
  CHECK(points[6].label() ==
        "optimizer.type=adam optimizer.lr=0.01 train.batch_per_device=16 seed=1");
  CHECK(points[12].settings.size() == 4);  // the sgd group's two settings, then the grid's
  CHECK(points[12].overrides() ==
        std::vector<std::string>{"optimizer.type=sgd", "optimizer.momentum=0.9", "optimizer.lr=0.1",
                                 "train.batch_per_device=16", "seed=1"});
  for (std::size_t i = 0; i < points.size(); ++i) {
    CHECK(points[i].index == static_cast<int>(i));
    CHECK(points[i].row == static_cast<int>(i / 2));  // seeds share a row
  }

  mnist::SweepSpec none;  // no axes: the base config, once
  const auto one = mnist::expand_points(none);
  REQUIRE(one.size() == 1);
  CHECK(one[0].label() == "(the base config)");
  CHECK(one[0].overrides().empty());

  mnist::SweepSpec twice;
  twice.groups = {mnist::parse_list_option("optimizer.lr=0.1", 1)};
  twice.grid = {mnist::parse_grid_option("optimizer.lr=0.2,0.3")};
  CHECK_THAT(message_of<UsageError>([&] { mnist::expand_points(twice); }),
             Catch::Contains("--list 1 sets optimizer.lr") && Catch::Contains("--grid"));

  mnist::SweepSpec huge;
  for (const char* key : {"a.b", "a.c", "a.d", "a.e", "a.f"})
    huge.grid.push_back(mnist::parse_grid_option(std::string(key) + "=1,2,3,4,5,6,7"));
  CHECK_THAT(message_of<UsageError>([&] { mnist::expand_points(huge); }),
             Catch::Contains("16807 points"));
}

TEST_CASE("a sweep file holds the same spec, and its mistakes name the file, line and key",
          "[sweep]") {
  const mnist::SweepSpec spec = mnist::parse_sweep_file(R"(sweep:
  config: configs/cpu_quickstart.yaml
  grid:
    optimizer.lr: [0.001, 0.01]
    devices.gpus: [[0, 1], all]
  list:
    - {optimizer.type: sgd, optimizer.momentum: 0.9}
    - {optimizer.type: adam}
  seeds: [1, 2]
  set: {train.steps: 50}
  out: runs/lr
)",
                                                        "lr.yaml");
  CHECK(spec.config_path == "configs/cpu_quickstart.yaml");
  REQUIRE(spec.grid.size() == 2);
  CHECK(spec.grid[0].values == std::vector<std::string>{"0.001", "0.01"});
  CHECK(spec.grid[1].values == std::vector<std::string>{"[0, 1]", "all"});
  REQUIRE(spec.groups.size() == 2);
  CHECK(spec.groups[0][1].text() == "optimizer.momentum=0.9");
  CHECK(spec.seeds == std::vector<uint64_t>{1, 2});
  CHECK(spec.overrides == std::vector<std::string>{"train.steps=50"});
  CHECK(spec.out_dir == "runs/lr");
  CHECK(mnist::expand_points(spec).size() == 2 * 2 * 2 * 2);

  CHECK_THAT(message_of<ConfigError>([] {
               mnist::parse_sweep_file("sweep:\n  config: a.yaml\n  seed: [1]\n", "s.yaml");
             }),
             Catch::Contains("s.yaml:3:3: sweep.seed: unknown key"));
  CHECK_THAT(message_of<ConfigError>([] {
               mnist::parse_sweep_file("sweep:\n  grid:\n    optimizer.lr: 0.1\n", "s.yaml");
             }),
             Catch::Contains("s.yaml:3:19: sweep.grid.optimizer.lr: expected a non-empty list"));
  CHECK_THAT(message_of<ConfigError>([] { mnist::parse_sweep_file("grid: {}\n", "s.yaml"); }),
             Catch::Contains("a map with one key 'sweep'"));
}

TEST_CASE(
    "every sweep point is checked before anything starts: a bad value names its axis, "
    "value and point",
    "[sweep]") {
  mnist::SweepSpec spec;
  spec.config_path = kBase;
  spec.grid = {mnist::parse_grid_option("optimizer.lr=0.001,fast"),
               mnist::parse_grid_option("train.batch_per_device=16,32")};
  const auto points = mnist::expand_points(spec);
  const std::string message = message_of<ConfigError>(
      [&] { mnist::plan_points(spec, points, {"devices.threads=1"}, "", 1); });
  INFO(message);
  CHECK_THAT(message,
             Catch::StartsWith("sweep point 2 (optimizer.lr=fast train.batch_per_device=16)"));
  CHECK_THAT(message, Catch::Contains("axis optimizer.lr, value 'fast'"));
  CHECK_THAT(message, Catch::Contains("--set 'optimizer.lr=fast'"));  // the reader's own words
  CHECK_THAT(message, Catch::Contains("(2 of the 4 points fail)"));
  CHECK_THAT(message, Catch::Contains("nothing was started"));

  // A key the reader does not know is refused the same way.
  mnist::SweepSpec unknown;
  unknown.config_path = kBase;
  unknown.grid = {mnist::parse_grid_option("optimizer.lrate=0.1")};
  CHECK_THAT(message_of<ConfigError>(
                 [&] { mnist::plan_points(unknown, mnist::expand_points(unknown), {}, "", 1); }),
             Catch::Contains("axis optimizer.lrate, value '0.1'"));

  // A value the reader accepts that the network cannot take (a batch too large for the kernels'
  // 32-bit indexing): the same check a run makes.
  mnist::SweepSpec large;
  large.config_path = kBase;
  large.grid = {mnist::parse_grid_option("train.batch_per_device=64,100000000")};
  CHECK_THAT(message_of<ConfigError>(
                 [&] { mnist::plan_points(large, mnist::expand_points(large), {}, "", 1); }),
             Catch::Contains("sweep point 1") && Catch::Contains("train.batch_per_device"));
}

TEST_CASE(
    "a sweep point's folder is named by its settings and its config's hash, whatever the "
    "placement",
    "[sweep]") {
  mnist::SweepSpec spec;
  spec.config_path = kBase;
  spec.grid = {mnist::parse_grid_option("optimizer.lr=0.001,0.01")};
  spec.seeds = {1, 2};
  const auto points = mnist::expand_points(spec);
  const auto one_thread = mnist::plan_points(spec, points, {"devices.threads=1"}, "", 1);
  const auto two_threads = mnist::plan_points(spec, points, {"devices.threads=2"}, "", 1);
  REQUIRE(one_thread.size() == 4);
  for (std::size_t i = 0; i < 4; ++i) CHECK(one_thread[i].name == two_threads[i].name);
  CHECK_THAT(one_thread[0].name, Catch::StartsWith("0-lr=0.001-seed=1-"));
  CHECK(one_thread[0].name.size() == std::string("0-lr=0.001-seed=1-").size() + 8);
  CHECK(one_thread[0].hash != one_thread[1].hash);  // another seed is another run
  CHECK(one_thread[0].run_dir("runs/s") == "runs/s/points/" + one_thread[0].name);
  CHECK(one_thread[0].log_path("runs/s") == "runs/s/logs/" + one_thread[0].name + ".log");

  // The base config changed (more steps): every point gets a new folder.
  mnist::SweepSpec longer = spec;
  longer.overrides = {"train.steps=400"};
  const auto changed = mnist::plan_points(longer, points, {"devices.threads=1"}, "", 1);
  for (std::size_t i = 0; i < 4; ++i) CHECK(changed[i].hash != one_thread[i].hash);

  // Characters a path should not hold become '_'.
  mnist::SweepPoint odd;
  odd.index = 7;
  odd.settings = {{"devices.gpus", "[0, 1]", ""}, {"model.layers[5].dense.units", "50", ""}};
  CHECK(mnist::point_folder_name(odd, "0123abcd", 12) == "07-gpus=_0__1_-units=50-0123abcd");
}

TEST_CASE("sweep points on the CPU share its threads without oversubscribing it", "[sweep]") {
  const auto two = mnist::place_on_cpu(2, 2, "affinity mask");
  REQUIRE(two.slots.size() == 2);
  CHECK(two.slots[0].threads == 1);
  CHECK(two.slots[1].threads == 1);
  CHECK(two.slots[1].overrides() == std::vector<std::string>{"devices.threads=1"});
  CHECK(two.summary == "2 CPU slots x 1 thread (2 usable: affinity mask)");
  CHECK(mnist::place_on_cpu(1, 2, "affinity mask").slots[0].threads == 2);
  CHECK(mnist::place_on_cpu(2, 5, "affinity mask").slots[0].threads == 2);
  CHECK(mnist::place_on_cpu(3, 16, "affinity mask").slots[2].threads == 5);
  CHECK_THAT(message_of<UsageError>([] { mnist::place_on_cpu(3, 2, "OMP_NUM_THREADS=2"); }),
             Catch::Contains("--slots 3") && Catch::Contains("OMP_NUM_THREADS=2") &&
                 Catch::Contains("at most --slots 2"));
}

TEST_CASE("sweep GPUs are chosen as --gpus says and each point is pinned to its card", "[sweep]") {
  std::vector<mnist::GpuInfo> visible(4);
  const uint64_t gib = uint64_t{1} << 30;
  for (int i = 0; i < 4; ++i) {
    visible[i].ordinal = i;
    visible[i].name = "H100";
    visible[i].total_bytes = 80 * gib;
  }
  visible[0].free_bytes = 10 * gib;
  visible[1].free_bytes = 70 * gib;
  visible[2].free_bytes = 30 * gib;
  visible[3].free_bytes = 60 * gib;
  auto ordinals = [](const std::vector<mnist::GpuInfo>& gpus) {
    std::vector<int> o;
    for (const auto& g : gpus) o.push_back(g.ordinal);
    return o;
  };
  CHECK(ordinals(mnist::select_gpus("all", visible)) == std::vector<int>{0, 1, 2, 3});
  CHECK(ordinals(mnist::select_gpus("2,0", visible)) == std::vector<int>{2, 0});
  CHECK(ordinals(mnist::select_gpus("auto:2", visible)) == std::vector<int>{1, 3});
  CHECK_THAT(message_of<UsageError>([&] { mnist::select_gpus("4", visible); }),
             Catch::Contains("GPU 4 is not visible"));
  CHECK_THAT(message_of<UsageError>([&] { mnist::select_gpus("1,1", visible); }),
             Catch::Contains("--per-gpu"));
  CHECK_THAT(message_of<UsageError>([&] { mnist::select_gpus("auto:5", visible); }),
             Catch::Contains("only 4 GPUs are visible"));
  CHECK_THAT(message_of<UsageError>([&] { mnist::select_gpus("auto:x", visible); }),
             Catch::Contains("auto:N"));
  CHECK_THAT(message_of<UsageError>([] { mnist::select_gpus("all", {}); }),
             Catch::Contains("no GPU is visible"));

  // The child's CUDA_VISIBLE_DEVICES is the parent's entry for the ordinal.
  CHECK(mnist::child_visible_devices(1, nullptr) == "1");
  CHECK(mnist::child_visible_devices(1, "2,3") == "3");
  CHECK(mnist::child_visible_devices(0, "GPU-a1b2,GPU-c3d4") == "GPU-a1b2");
  CHECK_THROWS_AS(mnist::child_visible_devices(2, "2,3"), mnist::RuntimeError);

  // Two points per card, spread over the cards first.
  const auto placed = mnist::place_on_gpus({visible[1], visible[3]}, 2, gib, "4,5,6,7");
  REQUIRE(placed.slots.size() == 4);
  CHECK(placed.slots[0].gpu_ordinal == 1);
  CHECK(placed.slots[1].gpu_ordinal == 3);
  CHECK(placed.slots[2].gpu_ordinal == 1);
  CHECK(placed.slots[0].cuda_visible_devices == "5");
  CHECK(placed.slots[1].cuda_visible_devices == "7");
  CHECK(placed.slots[0].overrides() == std::vector<std::string>{"devices.gpus=all"});
  CHECK(placed.slots[1].describe() == "GPU 3 (CUDA_VISIBLE_DEVICES=7)");
}

TEST_CASE("sweep --per-gpu K is refused when K runs would not fit the card's free memory",
          "[sweep]") {
  const uint64_t mib = uint64_t{1} << 20;
  mnist::GpuInfo card;
  card.ordinal = 2;
  card.name = "NVIDIA H100";
  card.free_bytes = 4096 * mib;
  mnist::check_gpu_fit(card, 4, 1024 * mib);  // exactly fits
  const std::string message =
      message_of<UsageError>([&] { mnist::check_gpu_fit(card, 5, 1024 * mib); });
  CHECK_THAT(message, Catch::Contains("--per-gpu 5: 5 runs at once need about 5120 MiB on GPU 2 "
                                      "(NVIDIA H100), which has 4096 MiB free"));
  CHECK_THAT(message, Catch::Contains("use at most --per-gpu 4"));
  CHECK_THAT(message_of<UsageError>([&] { mnist::check_gpu_fit(card, 1, 5000 * mib); }),
             Catch::Contains("not even one run fits"));
  CHECK_THROWS_AS(mnist::place_on_gpus({card}, 8, 1024 * mib, nullptr), UsageError);

  // The run's estimate: its replicas and data, plus a CUDA context.
  CHECK(mnist::gpu_run_bytes(100 * mib, 1, 55 * mib) == 155 * mib + mnist::kCudaContextBytes);
  CHECK(mnist::gpu_run_bytes(100 * mib, 2, 55 * mib) == 310 * mib + mnist::kCudaContextBytes);

  // From a real config: the seed network's run is far below a card.
  mnist::SweepSpec spec;
  spec.config_path = kBase;
  spec.grid = {mnist::parse_grid_option("train.batch_per_device=128,4096")};
  const auto planned = mnist::plan_points(spec, mnist::expand_points(spec), {}, "", 1);
  CHECK(planned[1].replica_bytes > planned[0].replica_bytes);  // the batch's share grows
  CHECK(planned[0].dataset_bytes == 70000u * 785u);            // the config's data: mnist
}

namespace {

mnist::PlannedPoint planned(int index, int row, const std::string& lr, uint64_t seed) {
  mnist::PlannedPoint p;
  p.point.index = index;
  p.point.row = row;
  p.point.settings = {{"optimizer.lr", lr, "--grid"}};
  p.point.seed = seed;
  p.name = "p" + std::to_string(index);
  return p;
}

mnist::PointResult done(double acc, double loss, std::optional<double> val = std::nullopt) {
  mnist::PointResult r;
  r.state = mnist::PointState::done;
  r.exit_code = 0;
  r.test_accuracy = acc;
  r.test_loss = loss;
  r.validation_accuracy = val;
  r.steps_per_second = 10;
  r.wall_seconds = 2;
  return r;
}

}  // namespace

TEST_CASE("the sweep table has a row per setting with each seed, mean and spread, best first",
          "[sweep]") {
  const std::vector<mnist::PlannedPoint> points = {
      planned(0, 0, "0.001", 1), planned(1, 0, "0.001", 2), planned(2, 1, "0.01", 1),
      planned(3, 1, "0.01", 2)};
  mnist::PointResult diverged;
  diverged.state = mnist::PointState::failed;
  diverged.exit_code = 4;
  diverged.message = "diverged: step 12: the training loss is nan";
  const std::vector<mnist::PointResult> results = {done(0.95, 0.2), done(0.97, 0.1),
                                                   done(0.99, 0.05), diverged};
  const mnist::SweepTable table = mnist::build_table(points, results);
  CHECK_FALSE(table.by_validation);
  CHECK_THAT(table.title, Catch::Contains("ranked by mean test accuracy") &&
                              Catch::Contains("no validation accuracy"));
  const std::vector<std::string> header = {
      "rank",         "optimizer.lr", "seeds",          "test acc mean", "test acc std",
      "test acc min", "test acc max", "test loss mean", "seed 1 acc",    "seed 1 loss",
      "seed 2 acc",   "seed 2 loss",  "steps/s",        "wall s",        "status"};
  CHECK(table.header == header);
  REQUIRE(table.rows.size() == 2);
  // 0.01 has one finished seed at 0.99: first.
  CHECK(table.rows[0][1] == "0.01");
  CHECK(table.rows[0][3] == "0.9900");
  CHECK(table.rows[0][4] == "");  // one seed: no spread
  CHECK(table.rows[0][10] == "exit 4");
  CHECK(table.rows[0][14] == "1 ok, 1 failed (exit 4)");
  CHECK(table.rows[1][0] == "2");
  CHECK(table.rows[1][3] == "0.9600");
  CHECK(table.exact[1][4] == fmt::format("{:.9g}", std::sqrt(0.0002)));  // the sample std
  CHECK(table.rows[1][5] == "0.9500");
  CHECK(table.rows[1][6] == "0.9700");
  CHECK(table.rows[1][8] == "0.9500");
  CHECK(table.rows[1][11] == "0.1000");
  CHECK(table.rows[1][14] == "ok");
  REQUIRE(table.failures.size() == 1);
  CHECK(table.failures[0] ==
        "point 3 (optimizer.lr=0.01 seed=2): failed (exit 4): diverged: step 12: the training "
        "loss is nan");
  CHECK_THAT(table.best, Catch::Contains("test 0.9900 (optimizer.lr=0.01)"));

  const std::string md = mnist::table_markdown(table);
  CHECK_THAT(md, Catch::StartsWith(table.title + "\n\n| rank | optimizer.lr |"));
  CHECK_THAT(md, Catch::Contains("\n|---|---|"));
  CHECK_THAT(md, Catch::Contains("- point 3 (optimizer.lr=0.01 seed=2): failed (exit 4)"));
  const std::string csv = mnist::table_csv(table);
  CHECK_THAT(csv, Catch::StartsWith("rank,optimizer.lr,seeds,test acc mean"));
  CHECK_THAT(csv, Catch::Contains("\n2,0.001,1 2,0.96,"));

  // With validation accuracies the ranking follows them, whatever the test set says.
  const std::vector<mnist::PointResult> validated = {
      done(0.99, 0.2, 0.90), done(0.99, 0.1, 0.90), done(0.95, 0.05, 0.93), done(0.95, 0.05, 0.93)};
  const mnist::SweepTable by_val = mnist::build_table(points, validated);
  CHECK(by_val.by_validation);
  CHECK_THAT(by_val.title, Catch::StartsWith("ranked by mean validation accuracy"));
  CHECK(by_val.header[3] == "val acc mean");
  CHECK(by_val.rows[0][1] == "0.01");
  CHECK(by_val.rows[0][3] == "0.9300");
}

TEST_CASE("a sweep point's result is read from its summary and its status file", "[sweep]") {
  TempDir tmp("result");
  const fs::path run = tmp.path / "run", status = tmp.path / "status.json";
  fs::create_directories(run);
  // No folder and no status: not run.
  CHECK(mnist::read_point_result((tmp.path / "none").string(), (tmp.path / "none.json").string())
            .state == mnist::PointState::not_run);
  // Stopped by a signal (exit 3), then failed (exit 4) with its message.
  mnist::write_point_status(status.string(), 3, "stop requested", 1.5);
  CHECK(mnist::read_point_result(run.string(), status.string()).state ==
        mnist::PointState::stopped);
  mnist::write_point_status(status.string(), 4, "diverged: step 3: \"nan\"", 2.25);
  const mnist::PointResult failed = mnist::read_point_result(run.string(), status.string());
  CHECK(failed.state == mnist::PointState::failed);
  CHECK(failed.exit_code == 4);
  CHECK(failed.message == "diverged: step 3: \"nan\"");
  CHECK(failed.process_seconds == 2.25);
  // A summary makes it done, its figures as written, the validation keys read when present.
  write(run / "summary.json",
        R"({"name":"q","steps":40,"first_step":0,"global_batch":32,"wall_seconds":2,)"
        R"("samples_per_second":640,"final_train_loss":0.5,"final_train_accuracy":0.8,)"
        R"("test_loss":0.312345678,"test_accuracy":0.912345678,"test_samples":1505,)"
        R"("validation_accuracy":0.93,"validation_loss":0.25,"best_validation_accuracy":0.94,)"
        R"("best_step":30,"devices":"cpu","data":""})");
  const mnist::PointResult r = mnist::read_point_result(run.string(), status.string());
  CHECK(r.state == mnist::PointState::done);
  CHECK(r.test_accuracy == 0.912345678);
  CHECK(r.test_loss == 0.312345678);
  CHECK(r.steps_per_second == 20);
  CHECK(r.validation_accuracy == 0.93);
  CHECK(r.best_validation_accuracy == 0.94);
  CHECK(r.best_step == 30);
  write(run / "summary.json", "{\"test_accuracy\": \"high\"}");
  CHECK_THROWS_AS(mnist::read_point_result(run.string(), status.string()), mnist::DataError);
}

TEST_CASE("a failed point's message is the last error its last process printed", "[sweep]") {
  const std::string log =
      "== sweep: point 1 first try\n"
      "mnist-train: config error: an old one\n"
      "== sweep: point 1 again\n"
      "[10:00:00] info step 1/5\n"
      "mnist-train: diverged: step 2: the training loss is nan\n"
      "\n";
  CHECK(mnist::last_error_line(log, "== sweep: ") == "diverged: step 2: the training loss is nan");
  CHECK(mnist::last_error_line("== sweep: x\nSegmentation fault\n", "== sweep: ") ==
        "Segmentation fault");
  CHECK(mnist::last_error_line("", "== sweep: ") == "");
}
