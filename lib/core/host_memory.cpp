#include "core/host_memory.hpp"

#include <algorithm>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>

namespace mnist {

namespace {

// A number from a /proc or /sys file ("max" and unreadable files give nothing).
bool read_number_file(const char* path, uint64_t* out) {
  std::ifstream in(path);
  std::string word;
  if (!(in >> word) || word.find_first_not_of("0123456789") != std::string::npos) return false;
  *out = std::stoull(word);
  return true;
}

uint64_t mul_sat(uint64_t a, uint64_t b) {
  uint64_t r = 0;
  return __builtin_mul_overflow(a, b, &r) ? std::numeric_limits<uint64_t>::max() : r;
}

}  // namespace

uint64_t available_host_bytes() {
  uint64_t available = std::numeric_limits<uint64_t>::max();
  std::ifstream meminfo("/proc/meminfo");
  std::string line;
  while (std::getline(meminfo, line)) {
    std::istringstream fields(line);
    std::string name;
    uint64_t kib = 0;
    if (fields >> name >> kib && name == "MemAvailable:") available = mul_sat(kib, 1024);
  }
  uint64_t limit = 0, used = 0;
  if (read_number_file("/sys/fs/cgroup/memory.max", &limit)) {
    read_number_file("/sys/fs/cgroup/memory.current", &used);
    available = std::min(available, limit > used ? limit - used : 0);
  }
  return available;
}

}  // namespace mnist
