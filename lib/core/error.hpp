#pragma once
// Typed exceptions and always-on check macros.
//
// Library code throws; only main() maps an exception type to an exit code (see README "Exit
// codes"). Every message is written for the person running the tool: what was expected, what was
// found, where.

#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace mnist {

// Base of every error the tool raises on purpose.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// The user asked for something malformed on the command line.               exit 2
class UsageError : public Error {
  using Error::Error;
};
// A config file or --set override breaks a rule (names the YAML path).      exit 2
class ConfigError : public Error {
  using Error::Error;
};
// A data or checkpoint file is missing or malformed (names file + offset).  exit 2
class DataError : public Error {
  using Error::Error;
};
// Something failed while running: a device, a collective, a worker.         exit 1
class RuntimeError : public Error {
  using Error::Error;
};
// Loss or gradient stopped being finite.                                     exit 4
class DivergenceError : public RuntimeError {
  using RuntimeError::RuntimeError;
};

namespace detail {
[[noreturn]] void throw_check_failure(const char* expr, const char* file, int line,
                                      const std::string& message);
}  // namespace detail

}  // namespace mnist

// MNIST_CHECK(cond, "fmt", args...): throws mnist::RuntimeError naming the expression, file and
// line when cond is false. Always on (never compiled out): these guard contracts between
// components.
#define MNIST_CHECK(cond, ...)                                                                   \
  do {                                                                                           \
    if (!(cond)) {                                                                               \
      ::mnist::detail::throw_check_failure(#cond, __FILE__, __LINE__, fmt::format(__VA_ARGS__)); \
    }                                                                                            \
  } while (0)

// MNIST_THROW(Type, "fmt", args...): throws a typed error for the user (no file/line: the message
// itself names the config key or data offset).
#define MNIST_THROW(Type, ...) throw Type(fmt::format(__VA_ARGS__))
