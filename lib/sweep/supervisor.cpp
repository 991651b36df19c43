#include "sweep/supervisor.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>

#include "core/error.hpp"

extern char** environ;

namespace mnist {

namespace {

int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

// The inherited environment with `changes` ("NAME=value") set or replaced.
std::vector<std::string> child_environment(const std::vector<std::string>& changes) {
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string entry = *e;
    const std::string name = entry.substr(0, entry.find('='));
    bool replaced = false;
    for (const std::string& c : changes)
      if (c.substr(0, c.find('=')) == name) replaced = true;
    if (!replaced) env.push_back(entry);
  }
  env.insert(env.end(), changes.begin(), changes.end());
  return env;
}

}  // namespace

ChildProcess::ChildProcess(const ChildLaunch& launch) {
  MNIST_CHECK(!launch.argv.empty(), "a child needs an executable");
  const int log = ::open(launch.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log < 0)
    MNIST_THROW(RuntimeError, "cannot open the point's log {}: {}", launch.log_path,
                std::strerror(errno));
  if (!launch.log_header.empty()) {
    const std::string header = launch.log_header + "\n";
    (void)!::write(log, header.data(), header.size());
  }
  // Everything exec needs is made before fork: the child calls only async-signal-safe functions.
  std::vector<std::string> args = launch.argv;
  std::vector<std::string> env = child_environment(launch.env);
  std::vector<char*> argv, envp;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  const pid_t parent = ::getpid();
  pid_ = ::fork();
  if (pid_ < 0) {
    const int err = errno;
    ::close(log);
    MNIST_THROW(RuntimeError, "cannot start a point's process: fork: {}", std::strerror(err));
  }
  if (pid_ == 0) {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(126);  // the sweep died before the line above
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    const int null = ::open("/dev/null", O_RDONLY);
    if (null >= 0) ::dup2(null, 0);
    ::dup2(log, 1);
    ::dup2(log, 2);
    ::execve(argv[0], argv.data(), envp.data());
    static const char kFailed[] = "mnist-train sweep: cannot start the point's process (exec)\n";
    (void)!::write(2, kFailed, sizeof(kFailed) - 1);
    ::_exit(127);
  }
  ::close(log);
  // Also from this side, so a signal sent to the group right away finds it.
  ::setpgid(pid_, pid_);
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0 && !code_) {
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
  }
}

std::optional<int> ChildProcess::poll() {
  if (code_) return code_;
  int status = 0;
  const pid_t r = ::waitpid(pid_, &status, WNOHANG);
  if (r == pid_) code_ = exit_code_of(status);
  if (r < 0 && errno == ECHILD) code_ = -1;  // reaped elsewhere: its code is lost
  return code_;
}

void ChildProcess::signal(int sig) const {
  if (pid_ > 0 && !code_) ::kill(pid_, sig);
}

int supervise(const std::vector<int>& jobs, const std::vector<SweepSlot>& slots,
              const SupervisorHooks& hooks) {
  using Clock = std::chrono::steady_clock;
  struct Running {
    int job = -1;
    std::unique_ptr<ChildProcess> child;
    Clock::time_point start;
  };
  std::vector<Running> running(slots.size());
  std::size_t next = 0;
  int forwarded = 0;
  for (;;) {
    const int stop = hooks.stop_signal ? hooks.stop_signal() : 0;
    if (stop != 0 && stop != forwarded) {
      for (const Running& r : running)
        if (r.child) r.child->signal(stop);
      forwarded = stop;
    }
    bool any_running = false;
    for (std::size_t s = 0; s < slots.size(); ++s) {
      Running& r = running[s];
      if (r.child) {
        const std::optional<int> code = r.child->poll();
        if (!code) {
          any_running = true;
          continue;
        }
        JobEnd end;
        end.exit_code = *code;
        end.wall_seconds = std::chrono::duration<double>(Clock::now() - r.start).count();
        const int job = r.job;
        r.child.reset();
        r.job = -1;
        if (hooks.ended) hooks.ended(job, slots[s], end);
      }
      if (forwarded != 0 || next >= jobs.size()) continue;
      r.job = jobs[next++];
      r.start = Clock::now();
      r.child = std::make_unique<ChildProcess>(hooks.launch(r.job, slots[s]));
      if (hooks.started) hooks.started(r.job, slots[s]);
      any_running = true;
    }
    if (!any_running && (forwarded != 0 || next >= jobs.size())) return forwarded;
    if (hooks.tick) hooks.tick();
    std::this_thread::sleep_for(std::chrono::milliseconds(hooks.poll_ms));
  }
}

}  // namespace mnist
