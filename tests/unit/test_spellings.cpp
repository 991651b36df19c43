// The enum spelling tables (config/spellings.hpp): every value has one spelling that reads back to
// it, the engine table knows which backend runs each engine, and a misspelled engine from outside
// a config file (bench --engines, tests) is refused with the known ones.

#include <catch2/catch.hpp>

#include <set>
#include <string>
#include <vector>

#include "config/spellings.hpp"
#include "core/error.hpp"

using namespace mnist;

namespace {

// Each row's spelling is unique, to_string gives it, and from_string reads it back.
template <class E>
void check_round_trip(const std::vector<std::string>& expected) {
  CHECK(spelling_names<E>() == expected);
  std::set<std::string> seen;
  for (const auto& row : spellings(E{})) {
    CAPTURE(row.name);
    CHECK(seen.insert(row.name).second);
    CHECK(std::string(to_string(row.value)) == row.name);
    REQUIRE(from_string<E>(row.name).has_value());
    CHECK(*from_string<E>(row.name) == row.value);
  }
  CHECK_FALSE(from_string<E>("no-such-word").has_value());
}

}  // namespace

TEST_CASE("every enum's table spells each value once and reads it back", "[config]") {
  check_round_trip<LayerKind>(
      {"conv2d", "max_pool", "batch_norm", "relu", "dense", "dropout", "flatten"});
  check_round_trip<InitKind>({"truncated_normal", "he_normal", "glorot_uniform", "zeros"});
  check_round_trip<BackendChoice>({"auto", "cpu", "cuda"});
  check_round_trip<GpuSelection>({"all", "list", "auto"});
  check_round_trip<Engine>({"native", "cublas", "cudnn", "fused", "blas"});
  check_round_trip<BatchNormMode>({"local", "sync"});
  check_round_trip<LogFormat>({"standard", "seed"});
  check_round_trip<OptimizerKind>({"adam", "sgd"});
  check_round_trip<AdamEpsilon>({"pytorch", "tensorflow"});
  check_round_trip<WeightDecayMode>({"l2", "decoupled"});
  check_round_trip<ScheduleKind>({"constant", "step", "cosine"});
  check_round_trip<PaddingMode>({"same", "valid"});
  CHECK(std::string(to_string(PaddingMode::explicit_pixels)) == "explicit");
}

TEST_CASE("the engine table says which backend runs each engine", "[config]") {
  CHECK(engines_of(BackendChoice::cpu) == std::vector<Engine>{Engine::native, Engine::blas});
  CHECK(engines_of(BackendChoice::cuda) ==
        std::vector<Engine>{Engine::native, Engine::cublas, Engine::cudnn, Engine::fused});
  CHECK(engines_of(BackendChoice::auto_select).size() == spellings(Engine{}).size());
}

TEST_CASE("an unknown engine is refused with the known ones", "[config]") {
  CHECK(parse_engine("cublas", "--engines") == Engine::cublas);
  try {
    parse_engine("cudnnn", "--engines");
    FAIL("parse_engine accepted engine 'cudnnn'");
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    CAPTURE(what);
    CHECK(what.find("--engines") != std::string::npos);
    CHECK(what.find("'cudnnn'") != std::string::npos);
    CHECK(what.find("native, cublas, cudnn, fused") != std::string::npos);
  }
}
