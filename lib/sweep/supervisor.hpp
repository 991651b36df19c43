#pragma once
// The sweep's points as child processes: each point is the tool itself, started with fork and
// exec, so one point's crash cannot take another down; a queue feeds the slots; stop signals are
// passed on to every running child, which finishes its step, writes a checkpoint and exits.
//
// A child runs in a process group of its own, so a Ctrl-C at the terminal reaches the sweep alone
// (which passes it on once: a second SIGINT to a run means "exit now, no checkpoint"); and it gets
// SIGTERM should the sweep die without passing anything on (PR_SET_PDEATHSIG), so no point trains
// on, orphaned, into a folder a rerun would want.

#include <sys/types.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "sweep/placement.hpp"

namespace mnist {

struct ChildLaunch {
  std::vector<std::string> argv;  // argv[0]: the executable's path
  std::vector<std::string> env;   // "NAME=value", set or replaced in the inherited environment
  std::string log_path;           // stdout and stderr, appended to
  std::string log_header;         // a line written to the log before the process starts
};

// One started child. The exit code follows the shell's convention: its own code, or 128 + the
// signal's number when a signal ended it.
class ChildProcess {
 public:
  // Throws RuntimeError when the log cannot be opened or fork fails; a failed exec is exit 127.
  explicit ChildProcess(const ChildLaunch& launch);
  // A child still running is killed (SIGKILL) and reaped: never left behind by an exception.
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  // The exit code once the child has ended (reaping it), else nothing. Never blocks.
  std::optional<int> poll();
  void signal(int sig) const;

 private:
  pid_t pid_ = -1;
  std::optional<int> code_;
};

struct JobEnd {
  int exit_code = -1;
  double wall_seconds = 0;
};

struct SupervisorHooks {
  // The process for job `job` on `slot`.
  std::function<ChildLaunch(int job, const SweepSlot& slot)> launch;
  std::function<void(int job, const SweepSlot& slot)> started;
  std::function<void(int job, const SweepSlot& slot, const JobEnd& end)> ended;
  // 0, or the stop signal received (SIGINT, SIGTERM, SIGUSR1): passed on to every running child
  // (again whenever it changes), and no further job starts.
  std::function<int()> stop_signal;
  // Called about every poll_ms while jobs run (the status line).
  std::function<void()> tick;
  int poll_ms = 50;
};

// Runs `jobs` in order on `slots`, one job per slot at a time, until every job has ended or a stop
// signal has come and every running job has ended. Returns that signal (0: every job ran).
int supervise(const std::vector<int>& jobs, const std::vector<SweepSlot>& slots,
              const SupervisorHooks& hooks);

}  // namespace mnist
