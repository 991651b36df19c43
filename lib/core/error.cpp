#include "core/error.hpp"

namespace mnist::detail {

void throw_check_failure(const char* expr, const char* file, int line, const std::string& message) {
  throw RuntimeError(fmt::format("{} (check `{}` failed at {}:{})", message, expr, file, line));
}

}  // namespace mnist::detail
