#pragma once
// The Python interpreter tests run independent readers with: the first of $MNIST_PYTHON, python3 on
// PATH, and Debian's /usr/bin/python3 that can import `module` (a pyenv or virtual-environment
// python3 first on PATH does not see Debian's python3-* packages).

#include <cstdlib>
#include <string>
#include <vector>

namespace mnist::test {

inline std::string find_python(const std::string& module) {
  std::vector<std::string> candidates = {"python3", "/usr/bin/python3"};
  if (const char* env = std::getenv("MNIST_PYTHON")) candidates.insert(candidates.begin(), env);
  for (const std::string& candidate : candidates) {
    const std::string probe = "'" + candidate + "' -c 'import " + module + "' >/dev/null 2>&1";
    if (std::system(probe.c_str()) == 0) return candidate;
  }
  return "";
}

}  // namespace mnist::test
