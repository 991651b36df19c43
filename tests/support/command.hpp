#pragma once
// A shell command run to completion, for the tests that drive the real binary and the scripts.

#include <string>

namespace mnist::test {

struct CommandResult {
  int code = -1;       // the exit status; -1 when a signal ended the shell
  std::string output;  // what it wrote to stdout (end the command with 2>&1 for stderr too)
};

// Runs `command` with /bin/sh (popen), reading its output to the end; throws std::runtime_error
// when the shell cannot be started.
CommandResult run_command(const std::string& command);

}  // namespace mnist::test
