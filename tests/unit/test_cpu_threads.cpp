// usable_cpu_threads (core/cpu_threads.hpp): the affinity mask bounds it, OMP_NUM_THREADS may lower
// it, never raise it.
#include <catch2/catch.hpp>

#include <sched.h>
#include <map>
#include <string>

#include "core/cpu_threads.hpp"

namespace {

std::function<const char*(const char*)> fake_env(std::map<std::string, std::string> vars) {
  return [vars = std::move(vars)](const char* name) -> const char* {
    const auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
}

int mask_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  REQUIRE(sched_getaffinity(0, sizeof(set), &set) == 0);
  return CPU_COUNT(&set);
}

}  // namespace

TEST_CASE("CPU threads: the affinity mask, lowered by OMP_NUM_THREADS", "[cpu_threads]") {
  const int mask = mask_cpus();
  CHECK(mnist::usable_cpu_threads(fake_env({})).count == mask);
  CHECK(mnist::usable_cpu_threads(fake_env({{"OMP_NUM_THREADS", "1"}})).count == 1);
  const mnist::CpuThreads one = mnist::usable_cpu_threads(fake_env({{"OMP_NUM_THREADS", "1,4"}}));
  CHECK(one.count == 1);
  CHECK(one.limit == "OMP_NUM_THREADS=1,4");
  // More than the mask, zero, or not a number: the mask.
  for (const char* ignored : {"100000", "0", "many", ""}) {
    INFO(ignored);
    CHECK(mnist::usable_cpu_threads(fake_env({{"OMP_NUM_THREADS", ignored}})).count == mask);
  }
}

TEST_CASE("CPU threads follow a narrowed affinity mask", "[cpu_threads]") {
  cpu_set_t saved;
  CPU_ZERO(&saved);
  REQUIRE(sched_getaffinity(0, sizeof(saved), &saved) == 0);
  int first = 0;
  while (!CPU_ISSET(first, &saved)) ++first;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  REQUIRE(sched_setaffinity(0, sizeof(one), &one) == 0);
  const int count = mnist::usable_cpu_threads(fake_env({})).count;
  REQUIRE(sched_setaffinity(0, sizeof(saved), &saved) == 0);  // before any CHECK can end the case
  CHECK(count == 1);
}
