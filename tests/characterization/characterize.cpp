// The characterization of training: five steps of configs/seed_single_gpu.yaml on every engine this
// build has (CPU native and blas; CUDA native, cublas and fused, eager and captured), each reduced
// to one 64-bit hash of the bits it produced: every step's metric slots (loss sum, correct,
// samples), then the parameters, the batch norms' running statistics and both Adam moments after
// the last step. The hashes are pinned in tests/characterization/fixture.txt, so a change that
// moves any bit of any of them (a kernel that sums in another order, a fusion that rounds
// differently, a step that reads another step's value) fails here and says which engine and
// schedule moved.
//
// Bits depend on the platform as well as on the code: the CPU native engine on its instruction set
// (backend/cpu/native/isa.hpp), blas on the OpenBLAS kernels picked for the CPU, the CUDA engines
// on the emulation of CUDA or the GPU they ran on. A fixture line names its platform; a platform
// without one is reported and skipped, never passed.
//
//   characterization_tests [--print] [SOURCE_DIR]
//     --print      print the fixture lines this platform produces (to add a platform, or to update
//                  the fixture knowingly after a change that is meant to move bits)
//     SOURCE_DIR   where configs/ and data/mnist are (default: the current directory)
// Exit: 0 every computed line equals its fixture, 1 a mismatch or an error, 77 no fixture line for
// any of this platform's engines (CTest reports that as skipped).
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "backend/cpu/native/isa.hpp"
#include "build_info.hpp"
#include "config/experiment.hpp"
#include "core/error.hpp"
#include "data/dataset.hpp"
#include "model/model.hpp"
#include "train/worker.hpp"

#if MNIST_HAVE_BLAS
#include <cblas.h>
#endif

namespace {

using namespace mnist;

constexpr int kSteps = 5;
// Fixed, so that the CPU engines' bits do not depend on the machine's core count or
// OMP_NUM_THREADS (a kernel's threads split its sums).
constexpr int kCpuThreads = 2;

// FNV-1a over bytes: small, order-sensitive, and with no dependency; only equality is asked of it.
struct Fnv1a {
  uint64_t h = 1469598103934665603ull;
  void add(const void* data, std::size_t bytes) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (std::size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  }
  void add(const std::vector<float>& v) {
    const uint64_t n = v.size();
    add(&n, sizeof n);
    add(v.data(), v.size() * sizeof(float));
  }
};

struct Case {
  std::string platform;  // e.g. "cpu-avx2-2threads", "cuda-emulated"
  Engine engine;
  bool captured;
  std::string key() const {
    return platform + " " + to_string(engine) + " " + (captured ? "captured" : "eager");
  }
};

std::string cpu_platform(Engine engine) {
  std::string p = std::string("cpu-") + cpu::native::isa_name(cpu::native::chosen_isa()) + "-" +
                  std::to_string(kCpuThreads) + "threads";
#if MNIST_HAVE_BLAS
  if (engine == Engine::blas) p += std::string("-openblas-") + openblas_get_corename();
#else
  (void)engine;
#endif
  return p;
}

std::string cuda_platform(const Backend& be) {
#if MNIST_CUDA_EMULATED
  (void)be;
  return "cuda-emulated";
#else
  // The device's name without spaces: "gpu0-(NVIDIA-H200,-0000:19:00.0)" would tie the fixture to
  // a bus id, so the name alone.
  std::string name = be.name();
  const auto open = name.find('('), comma = name.find(',');
  if (open != std::string::npos && comma != std::string::npos && comma > open)
    name = name.substr(open + 1, comma - open - 1);
  for (char& ch : name)
    if (ch == ' ') ch = '-';
  return "cuda-" + name;
#endif
}

// Five steps of the seed's config on one replica, as the trainer runs them (its sampler, its
// learning rate, metrics read every step), hashed.
uint64_t characterize(const Experiment& base, const Model& model,
                      const std::shared_ptr<const Dataset>& data, std::unique_ptr<Backend> backend,
                      bool captured) {
  Experiment e = base;
  e.train.cuda_graph = captured;
  auto inputs = RunInputs::make(e, model, data, nullptr, 1);
  Worker worker(inputs, std::move(backend), 0, 0);
  Fnv1a hash;
  for (int64_t step = 0; step < kSteps; ++step) {
    worker.train_step({step, inputs->learning_rate(step, inputs->plan.steps)}, true);
    float metrics[kMetricSlots];
    worker.metrics(metrics);
    hash.add(metrics, sizeof metrics);
  }
  const CheckpointState s = worker.snapshot();
  hash.add(s.params);
  hash.add(s.state);
  hash.add(s.moment1);
  hash.add(s.moment2);
  return hash.h;
}

std::map<std::string, std::string> read_fixture(const std::string& path) {
  std::ifstream in(path);
  MNIST_CHECK(in.good(), "cannot read the characterization fixture '{}'", path);
  std::map<std::string, std::string> lines;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const auto last = line.rfind(' ');
    MNIST_CHECK(last != std::string::npos, "{}: a line without a hash: '{}'", path, line);
    lines[line.substr(0, last)] = line.substr(last + 1);
  }
  return lines;
}

std::string hex(uint64_t h) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(h));
  return text;
}

int run(bool print, const std::string& source_dir) {
  const Experiment e = load_experiment(
      source_dir + "/configs/seed_single_gpu.yaml",
      {"train.steps=" + std::to_string(kSteps), "data.dir=" + source_dir + "/data/mnist"});
  const Model model = Model::build(e.model);
  auto data = std::make_shared<const Dataset>(load_dataset(e.data, model.classes()));
  const auto fixture = read_fixture(source_dir + "/tests/characterization/fixture.txt");

  int compared = 0, mismatched = 0, missing = 0;
  auto report = [&](const Case& c, uint64_t h) {
    const std::string got = hex(h);
    if (print) {
      std::printf("%s %s\n", c.key().c_str(), got.c_str());
      return;
    }
    const auto want = fixture.find(c.key());
    if (want == fixture.end()) {
      ++missing;
      std::printf("no fixture: %s %s\n", c.key().c_str(), got.c_str());
    } else if (want->second == got) {
      ++compared;
      std::printf("ok:         %s %s\n", c.key().c_str(), got.c_str());
    } else {
      ++compared;
      ++mismatched;
      std::printf("MISMATCH:   %s %s, the fixture has %s\n", c.key().c_str(), got.c_str(),
                  want->second.c_str());
    }
    std::fflush(stdout);
  };

  for (const Engine engine : cpu_engines()) {
    BackendOptions options;
    options.threads = kCpuThreads;
    options.engine = engine;
    const Case c{cpu_platform(engine), engine, false};
    report(c, characterize(e, model, data, make_cpu_backend(options), false));
  }
  std::vector<Engine> cuda = cuda_engines();
#if !MNIST_CUDA_EMULATED
  // A CUDA build on a machine without a GPU: the CUDA engines are not characterized (the emulation
  // always has a device, so there an error is a failure).
  try {
    if (!cuda.empty()) make_cuda_backend(0, BackendOptions{});
  } catch (const RuntimeError& error) {
    std::printf("no GPU: the CUDA engines are not characterized (%s)\n", error.what());
    cuda.clear();
  }
#endif
  for (const Engine engine : cuda) {
    if (engine == Engine::cudnn) continue;  // cuDNN picks its own algorithms and orders
    for (const bool captured : {false, true}) {
      BackendOptions options;
      options.engine = engine;
      std::unique_ptr<Backend> be = make_cuda_backend(0, options);
      const Case c{cuda_platform(*be), engine, captured};
      report(c, characterize(e, model, data, std::move(be), captured));
    }
  }
  if (print) return 0;
  std::printf("%d compared, %d mismatched, %d without a fixture line\n", compared, mismatched,
              missing);
  if (mismatched) {
    std::printf(
        "FAIL: bits moved. If the change is meant to move them, say so and update "
        "tests/characterization/fixture.txt from --print.\n");
    return 1;
  }
  return compared == 0 ? 77 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  bool print = false;
  std::string source_dir = ".";
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--print") == 0)
      print = true;
    else
      source_dir = argv[i];
  }
  try {
    return run(print, source_dir);
  } catch (const std::exception& error) {
    std::fprintf(stderr, "characterization_tests: %s\n", error.what());
    return 1;
  }
}
