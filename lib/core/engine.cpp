#include "core/engine.hpp"

#include "core/error.hpp"

namespace mnist {

const char* to_string(Engine engine) {
  for (const EngineSpelling& row : spellings(Engine{}))
    if (row.value == engine) return row.name;
  MNIST_THROW(RuntimeError, "engine {} has no spelling in its table", static_cast<int>(engine));
}

std::string engine_names(const std::vector<Engine>& engines) {
  std::string names;
  for (Engine e : engines) names += std::string(names.empty() ? "" : ", ") + to_string(e);
  return names;
}

const std::vector<EngineSpelling>& spellings(Engine) {
  static const std::vector<EngineSpelling> rows = {
      {"native", Engine::native, /*cpu=*/true, /*cuda=*/true},
      {"cublas", Engine::cublas, /*cpu=*/false, /*cuda=*/true},
      {"cudnn", Engine::cudnn, /*cpu=*/false, /*cuda=*/true},
      {"fused", Engine::fused, /*cpu=*/false, /*cuda=*/true},
      {"blas", Engine::blas, /*cpu=*/true, /*cuda=*/false},
  };
  return rows;
}

std::vector<Engine> engines_run_by(bool cuda) {
  std::vector<Engine> out;
  for (const EngineSpelling& row : spellings(Engine{}))
    if (cuda ? row.cuda : row.cpu) out.push_back(row.value);
  return out;
}

}  // namespace mnist
