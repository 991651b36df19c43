#pragma once
// A run folder belongs to one run at a time: a lock keeps a second process out while a run holds
// it, and a fresh run never writes into a folder an earlier run left (its metrics would be
// appended to, and --resume auto could pick its checkpoints).

#include <string>

namespace mnist {

// How a run meets its folder: `fresh` needs it empty (or absent); `resume` continues what is
// there (--resume); `overwrite` removes an earlier run's files first (--overwrite).
enum class RunStart { fresh, resume, overwrite };

// The lock file inside a run folder (never counted as the folder's content).
inline constexpr const char* kRunLockName = ".mnist-train.lock";

// Holds an exclusive flock(2) on <dir>/.mnist-train.lock for its lifetime, creating `dir` if
// needed. Another process holding it: UsageError naming the folder and the holder's pid and host
// (written into the lock file). The kernel drops the lock when the process ends, however it ends,
// so a crashed run leaves no stale lock. On NFS, Linux maps flock to a lock the server sees, so
// two nodes of a cluster are kept apart too.
class RunFolderLock {
 public:
  explicit RunFolderLock(const std::string& dir);
  ~RunFolderLock();
  RunFolderLock(const RunFolderLock&) = delete;
  RunFolderLock& operator=(const RunFolderLock&) = delete;

 private:
  int fd_ = -1;
};

// Makes `dir` ready for a run started as `start` (call it holding the lock):
//   fresh:     anything in `dir` besides the lock is refused (UsageError naming the folder, a few
//              of its entries, --resume and --overwrite), except what a run refused before its
//              first step leaves (config.yaml, an empty metrics.jsonl, an empty checkpoints/);
//   overwrite: removes the files a run writes (config.yaml, metrics.jsonl, summary.json,
//              checkpoints/step-N.safetensors and best.safetensors, temporary files, tb/), and
//              refuses a folder holding anything else rather than delete what another program put
//              there;
//   resume:    leaves it as it is.
void prepare_run_dir(const std::string& dir, RunStart start);

}  // namespace mnist
