#include "support/files.hpp"

#include <unistd.h>

#include <fstream>
#include <sstream>

namespace mnist::test {

namespace fs = std::filesystem;

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

TempDir::TempDir(const std::string& prefix, const std::string& name)
    : path(fs::temp_directory_path() /
           ("mnist-train-" + prefix + "-" + name + "-" + std::to_string(::getpid()))) {
  fs::remove_all(path);
  fs::create_directories(path);
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path, ec);
}

std::string shell_quote(const std::string& arg) {
  std::string out = "'";
  for (char c : arg) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace mnist::test
