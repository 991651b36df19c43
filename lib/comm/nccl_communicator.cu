// NcclCommunicator (see nccl_communicator.hpp). Compiled only when NCCL was found.
#include <cuda_runtime.h>
#include <nccl.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/stream_counts.cuh"
#include "comm/nccl_communicator.hpp"

namespace mnist {
namespace {

static_assert(sizeof(ncclUniqueId) == sizeof(NcclIdBytes), "NcclIdBytes must hold an ncclUniqueId");

// How long setting up the ranks may take before the run gives up: across nodes the other
// processes may start late, but not by minutes.
constexpr std::chrono::seconds kInitTimeout{300};
// Pause between polls of a non-blocking communicator: short against a step (milliseconds), long
// enough that pollers do not keep abort() from the exclusive lock.
constexpr std::chrono::microseconds kPollInterval{20};

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) return "unknown host";
  return name;
}

[[noreturn]] void throw_nccl_error(ncclResult_t code, ncclComm_t comm, const char* expr, int gpu,
                                   int rank, int world, const char* file, int line) {
  const char* detail = ncclGetLastError(comm);
  throw RuntimeError(
      fmt::format("NCCL error {} ({}) on GPU {}, rank {} of {}, host {}, in `{}` at {}:{}{}{}",
                  static_cast<int>(code), ncclGetErrorString(code), gpu, rank, world, host_name(),
                  expr, file, line, detail && *detail ? ": " : "", detail ? detail : ""));
}

}  // namespace

// MNIST_NCCL_CHECK(expr, comm, gpu, rank, world): throws a RuntimeError naming the NCCL error, the
// GPU, the rank, the host, the expression and the place. ncclInProgress is not an error: the
// communicators are non-blocking, and callers then wait with wait_ready().
#define MNIST_NCCL_CHECK(expr, comm, gpu, rank, world)                                      \
  do {                                                                                      \
    const ncclResult_t mnist_nccl_status_ = (expr);                                         \
    if (mnist_nccl_status_ != ncclSuccess && mnist_nccl_status_ != ncclInProgress) {        \
      throw_nccl_error(mnist_nccl_status_, (comm), #expr, (gpu), (rank), (world), __FILE__, \
                       __LINE__);                                                           \
    }                                                                                       \
  } while (0)

struct NcclCommunicator::Ranks {
  std::vector<ncclComm_t> comms;    // local rank k -> its communicator (nullptr once aborted)
  std::atomic<bool> failed{false};  // a collective reported an error: destroy by abort
};

NcclCommunicator::NcclCommunicator(const std::vector<int>& gpus)
    : gpus_(gpus), first_rank_(0), world_size_(static_cast<int>(gpus.size())) {
  init(make_nccl_id());
}

NcclCommunicator::NcclCommunicator(const std::vector<int>& gpus, const NcclIdBytes& id,
                                   int first_rank, int world_size)
    : gpus_(gpus), first_rank_(first_rank), world_size_(world_size) {
  init(id);
}

void NcclCommunicator::init(const NcclIdBytes& id_bytes) {
  const int local = static_cast<int>(gpus_.size());
  MNIST_CHECK(local >= 1, "NCCL needs at least one GPU");
  MNIST_CHECK(first_rank_ >= 0 && first_rank_ + local <= world_size_,
              "NCCL ranks {}..{} do not fit a world of {}", first_rank_, first_rank_ + local - 1,
              world_size_);
  for (int i = 0; i < local; ++i)
    for (int j = 0; j < i; ++j)
      if (gpus_[i] == gpus_[j])
        MNIST_THROW(RuntimeError,
                    "NCCL needs one rank per GPU, but GPU {} is given twice (workers {} and {}); "
                    "workers sharing one GPU use the device all-reduce instead",
                    gpus_[i], j, i);
  ranks_ = std::make_unique<Ranks>();
  ranks_->comms.assign(local, nullptr);
  ncclUniqueId id;
  std::memcpy(&id, id_bytes.data(), sizeof id);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // see the header: no NCCL call may block a thread abort() has to wait for

  int previous_device = 0;
  MNIST_CUDA_CHECK(cudaGetDevice(&previous_device));
  bool in_group = false;
  try {
    // One group: NCCL sets up all local ranks together (one thread, several GPUs).
    MNIST_NCCL_CHECK(ncclGroupStart(), nullptr, gpus_[0], first_rank_, world_size_);
    in_group = true;
    for (int k = 0; k < local; ++k) {
      MNIST_CUDA_CHECK(cudaSetDevice(gpus_[k]));
      MNIST_NCCL_CHECK(
          ncclCommInitRankConfig(&ranks_->comms[k], world_size_, id, first_rank_ + k, &config),
          nullptr, gpus_[k], first_rank_ + k, world_size_);
    }
    in_group = false;
    MNIST_NCCL_CHECK(ncclGroupEnd(), nullptr, gpus_[0], first_rank_, world_size_);
    for (int k = 0; k < local; ++k) wait_ready(k, "ncclCommInitRankConfig", true);
  } catch (...) {
    if (in_group) ncclGroupEnd();  // a group left open would swallow this thread's next calls
    cudaSetDevice(previous_device);
    abort();  // frees whatever ranks were made
    throw;
  }
  MNIST_CUDA_CHECK(cudaSetDevice(previous_device));
}

NcclCommunicator::~NcclCommunicator() {
  if (aborted_ || !ranks_) return;  // abort() already freed everything
  if (ranks_->failed) {
    abort();
    return;
  }
  // Orderly: finalize every rank (flushes outstanding work; in one group, as the ranks of one
  // thread must), wait, then destroy. Anything going wrong falls back to abort.
  bool ok = ncclGroupStart() == ncclSuccess;
  for (ncclComm_t c : ranks_->comms) {
    const ncclResult_t r = ncclCommFinalize(c);
    ok = ok && (r == ncclSuccess || r == ncclInProgress);
  }
  const ncclResult_t end = ncclGroupEnd();
  ok = ok && (end == ncclSuccess || end == ncclInProgress);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (ncclComm_t c : ranks_->comms) {
    ncclResult_t state = ncclInProgress;
    while (ok && state == ncclInProgress) {
      if (ncclCommGetAsyncError(c, &state) != ncclSuccess ||
          std::chrono::steady_clock::now() > deadline)
        ok = false;
      else if (state == ncclInProgress)
        std::this_thread::sleep_for(kPollInterval);
    }
    ok = ok && state == ncclSuccess;
  }
  if (!ok) {
    abort();
    return;
  }
  ncclGroupStart();
  for (ncclComm_t c : ranks_->comms) ncclCommDestroy(c);
  ncclGroupEnd();
  for (ncclComm_t& c : ranks_->comms) c = nullptr;
}

std::string NcclCommunicator::name() const {
  std::string list;
  for (int g : gpus_) list += (list.empty() ? "" : ", ") + std::to_string(g);
  const int local = static_cast<int>(gpus_.size());
  if (local == world_size_) return fmt::format("NCCL x{} (GPUs {})", local, list);
  return fmt::format("NCCL ranks {}-{} of {} (GPUs {})", first_rank_, first_rank_ + local - 1,
                     world_size_, list);
}

void NcclCommunicator::wait_ready(int k, const char* what, bool bounded) {
  const int gpu = gpus_[k], rank = first_rank_ + k;
  const auto deadline = std::chrono::steady_clock::now() + kInitTimeout;
  for (;;) {
    if (aborted_) throw AbortedError("run aborted by another worker's failure");
    {
      std::shared_lock<std::shared_mutex> lock(lifetime_);
      if (aborted_) throw AbortedError("run aborted by another worker's failure");
      ncclComm_t comm = ranks_->comms[k];
      ncclResult_t state = ncclInProgress;
      MNIST_NCCL_CHECK(ncclCommGetAsyncError(comm, &state), comm, gpu, rank, world_size_);
      if (state == ncclSuccess) return;
      if (state != ncclInProgress) {
        ranks_->failed = true;
        throw_nccl_error(state, comm, what, gpu, rank, world_size_, __FILE__, __LINE__);
      }
    }
    // Collectives are bounded by the trainer's watchdog (which aborts); only set-up has its own.
    if (bounded && std::chrono::steady_clock::now() > deadline)
      MNIST_THROW(RuntimeError,
                  "NCCL: rank {} of {} on GPU {} (host {}) was not ready after {} s; are all {} "
                  "ranks of the run started?",
                  rank, world_size_, gpu, host_name(), kInitTimeout.count(), world_size_);
    std::this_thread::sleep_for(kPollInterval);
  }
}

void NcclCommunicator::all_reduce_sum(int local_rank, Backend& backend, float* data,
                                      std::size_t count) {
  const int local = static_cast<int>(gpus_.size());
  MNIST_CHECK(local_rank >= 0 && local_rank < local, "worker {} is not one of the {} NCCL ranks",
              local_rank, local);
  const int gpu = gpus_[local_rank], rank = first_rank_ + local_rank;
  MNIST_CHECK(backend.kind() == DeviceKind::cuda && backend.stream_handle() != nullptr,
              "NCCL rank {} (GPU {}): {} is not a CUDA backend", rank, gpu, backend.name());
  if (count == 0) return;  // every rank passes the same count
  {
    std::shared_lock<std::shared_mutex> lock(lifetime_);
    if (aborted_) throw AbortedError("run aborted by another worker's failure");
    ncclComm_t comm = ranks_->comms[local_rank];
    MNIST_CUDA_CHECK(cudaSetDevice(gpu));
    // In place, on the backend's stream: the kernels that wrote `data` precede it, and the
    // optimizer the caller queues next follows it.
    const auto stream = static_cast<cudaStream_t>(backend.stream_handle());
    cuda::count_library_call(stream);
    const ncclResult_t r = ncclAllReduce(data, data, count, ncclFloat, ncclSum, comm, stream);
    if (r != ncclSuccess && r != ncclInProgress) ranks_->failed = true;
    MNIST_NCCL_CHECK(r, comm, gpu, rank, world_size_);
  }
  // Non-blocking communicator: the collective is on the stream only once NCCL says so, and
  // nothing else may be queued there before (the state also carries errors of earlier
  // collectives).
  wait_ready(local_rank, "ncclAllReduce", false);
}

void NcclCommunicator::abort() {
  if (aborted_.exchange(true)) return;  // the failing worker and the coordinator may both call
  std::unique_lock<std::shared_mutex> lock(lifetime_);
  if (!ranks_) return;
  // In one group: recent NCCL synchronises the ranks of a node while freeing them, so aborting
  // the ranks of this thread one after another could wait on a rank not yet aborted.
  ncclGroupStart();
  for (ncclComm_t c : ranks_->comms)
    if (c) ncclCommAbort(c);  // stops this rank's kernels, so a stream waiting on them drains
  ncclGroupEnd();
  for (ncclComm_t& c : ranks_->comms) c = nullptr;
}

bool nccl_available() {
  return true;
}

NcclIdBytes make_nccl_id() {
  ncclUniqueId id;
  MNIST_NCCL_CHECK(ncclGetUniqueId(&id), nullptr, -1, 0, 0);
  NcclIdBytes bytes;
  std::memcpy(bytes.data(), &id, sizeof id);
  return bytes;
}

std::unique_ptr<Communicator> make_nccl_communicator(const std::vector<int>& gpus) {
  return std::make_unique<NcclCommunicator>(gpus);
}

std::unique_ptr<Communicator> make_nccl_communicator(const std::vector<int>& gpus,
                                                     const NcclIdBytes& id, int first_rank,
                                                     int world_size) {
  return std::make_unique<NcclCommunicator>(gpus, id, first_rank, world_size);
}

}  // namespace mnist
