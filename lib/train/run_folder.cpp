#include "train/run_folder.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

#include "core/error.hpp"

namespace mnist {

namespace fs = std::filesystem;

namespace {

// Whether `name`, in a folder a run writes, is a run's own: "config.yaml", "metrics.jsonl",
// "summary.json" and "tb" at the top (run_log.cpp, session.cpp), "step-N.safetensors" and
// "best.safetensors" under "checkpoints" (checkpoint.cpp), and the temporary files of atomic writes
// (".step-N.safetensors.tmp.<pid>", core/atomic_file.cpp) in either.
bool written_by_a_run(const std::string& name, bool in_checkpoints) {
  auto starts = [&](const char* p) { return name.rfind(p, 0) == 0; };
  auto has = [&](const char* p) { return name.find(p) != std::string::npos; };
  if (starts(".") && has(".tmp.")) return true;
  if (in_checkpoints) return (starts("step-") && has(".safetensors")) || name == "best.safetensors";
  return name == "config.yaml" || name == "metrics.jsonl" || name == "summary.json" ||
         name == "tb" || name == "checkpoints";
}

// Whether `path` is what a run leaves before it trains a step.
bool left_before_a_step(const fs::path& path) {
  std::error_code ec;
  const std::string name = path.filename().string();
  if (name == "config.yaml") return fs::is_regular_file(path, ec);
  if (name == "metrics.jsonl") return fs::is_regular_file(path, ec) && fs::file_size(path, ec) == 0;
  if (name == "checkpoints") return fs::is_directory(path, ec) && fs::is_empty(path, ec);
  return false;
}

std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name != kRunLockName) names.push_back(name);
  }
  if (ec) MNIST_THROW(RuntimeError, "cannot list the run directory {}: {}", dir, ec.message());
  std::sort(names.begin(), names.end());
  return names;
}

std::string some(const std::vector<std::string>& names) {
  const std::size_t shown = std::min<std::size_t>(names.size(), 4);
  std::string text;
  for (std::size_t i = 0; i < shown; ++i) text += (i ? ", " : "") + names[i];
  if (names.size() > shown) text += fmt::format(" and {} more", names.size() - shown);
  return text;
}

}  // namespace

RunFolderLock::RunFolderLock(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  // The path is the config's (output.dir): a usage error, not a runtime failure.
  if (ec)
    MNIST_THROW(ConfigError,
                "output.dir: cannot create the run directory '{}': {} (output.dir must name a "
                "folder this process can create and write)",
                dir, ec.message());
  const std::string path = (fs::path(dir) / kRunLockName).string();
  // O_NOFOLLOW: a link under the lock's name is not followed out of the folder.
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
  if (fd_ < 0)
    MNIST_THROW(RuntimeError, "cannot open the run directory's lock {}: {}", path,
                std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    char holder[256] = {};
    const ssize_t n = ::pread(fd_, holder, sizeof(holder) - 1, 0);
    ::close(fd_);
    fd_ = -1;
    std::string who = n > 0 ? std::string(holder, static_cast<std::size_t>(n)) : "";
    while (!who.empty() && (who.back() == '\n' || who.back() == ' ')) who.pop_back();
    if (err == EWOULDBLOCK)
      MNIST_THROW(UsageError,
                  "output.dir {} is in use by another mnist-train process ({}): two runs must not "
                  "share a run folder; wait for it to end, or choose another output.dir",
                  dir, who.empty() ? "holder unknown" : who);
    MNIST_THROW(RuntimeError, "cannot lock {}: {}", path, std::strerror(err));
  }
  // Who holds it, for the message another process prints.
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  const std::string me = fmt::format("pid {} on {}\n", ::getpid(), host);
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, me.data(), me.size(), 0) < 0) {
    // The lock is held all the same; only the message naming the holder is lost.
  }
}

RunFolderLock::~RunFolderLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the last descriptor releases the flock
}

void prepare_run_dir(const std::string& dir, RunStart start) {
  if (start == RunStart::resume) return;
  const std::vector<std::string> names = entries(dir);
  if (names.empty()) return;
  if (start == RunStart::fresh) {
    // A run refused before its first step (a config error found by the trainer, say) leaves its
    // config.yaml, an empty metrics.jsonl and an empty checkpoints/: nothing a new run could mix
    // with, so the corrected command is not refused for it.
    std::vector<std::string> used;
    for (const std::string& name : names)
      if (!left_before_a_step(fs::path(dir) / name)) used.push_back(name);
    if (used.empty()) return;
    MNIST_THROW(UsageError,
                "output.dir {} is not empty (it holds {}): a fresh run there would mix with what "
                "is there; pass --resume auto to continue that run, --overwrite to replace it, or "
                "choose another output.dir (it may use {{name}}, {{seed}} and {{job}})",
                dir, some(used));
  }
  std::vector<std::string> foreign;
  for (const std::string& name : names)
    if (!written_by_a_run(name, false)) foreign.push_back(name);
  if (fs::is_directory(fs::path(dir) / "checkpoints"))
    for (const std::string& name : entries((fs::path(dir) / "checkpoints").string()))
      if (!written_by_a_run(name, true)) foreign.push_back("checkpoints/" + name);
  if (!foreign.empty())
    MNIST_THROW(UsageError,
                "--overwrite: output.dir {} holds files a run does not write ({}); they are left "
                "alone: remove them, or choose another output.dir",
                dir, some(foreign));
  for (const std::string& name : names) {
    std::error_code ec;
    fs::remove_all(fs::path(dir) / name, ec);
    if (ec)
      MNIST_THROW(RuntimeError, "--overwrite: cannot remove {}: {}",
                  (fs::path(dir) / name).string(), ec.message());
  }
}

}  // namespace mnist
