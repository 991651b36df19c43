#pragma once
// The kernel engines (devices.engine), their spellings and the backends that run each: one table,
// which the config reads (parsing, messages, config/spellings.hpp) and the backends read (which
// engines a build has, backend.hpp), so that neither layer includes the other.

#include <string>
#include <vector>

namespace mnist {

// Which implementation runs the heavy ops (backend.hpp's BackendOptions).
enum class Engine { native, cublas, cudnn, fused, blas };

// An engine's row: how a config file spells it and which backends run it (the config refuses an
// engine of the other backend, and the device plan checks it once backend auto has chosen).
struct EngineSpelling {
  const char* name;
  Engine value;
  bool cpu;   // the CPU backend runs it (in builds that have it: cpu_engines())
  bool cuda;  // the CUDA backend runs it (cudnn: in builds with cuDNN)
};

// The table, in the order messages list it; chosen by the (ignored) argument's type, as the other
// enums' tables are (config/spellings.hpp).
const std::vector<EngineSpelling>& spellings(Engine);

// The engine's spelling ("native"); the config's to_string for the other enums has the same form.
const char* to_string(Engine engine);
// "native, blas": the spellings of `engines`, for messages that list what is allowed.
std::string engine_names(const std::vector<Engine>& engines);

// The engines the table says the CPU (cuda == false) or the CUDA backend runs, in table order,
// whatever this build has.
std::vector<Engine> engines_run_by(bool cuda);

}  // namespace mnist
