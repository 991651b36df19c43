#pragma once
// Emulated NCCL: the calls the project's NCCL communicator makes, for ranks that live in one
// process (one per emulated GPU, as devices.gpus: [0, 1] runs them). What it models:
//   - ncclGetUniqueId names a clique; ncclCommInitRankConfig joins it (non-blocking: the rank
//     reports ncclInProgress until every rank has joined, and once more after, so the caller's
//     polling loop runs); two ranks on one device are refused, as NCCL refuses them;
//   - ncclAllReduce(float, sum): each rank's call contributes its buffer; the last rank to arrive
//     adds the buffers in rank order and writes the sum into every rank's buffer; until then each
//     rank's ncclCommGetAsyncError reports ncclInProgress (the emulated streams run each operation
//     to its end, so "queued" is "done" here). Buffers must be device memory of the rank's GPU;
//     counts must agree; a rank may not start a collective before its previous one completed;
//   - ncclCommFinalize / ncclCommDestroy / ncclCommAbort; an abort fails the collective the other
//     ranks wait in with ncclRemoteError, so nothing waits forever;
//   - ncclGroupStart / ncclGroupEnd nesting.
// It does not emulate NCCL's transports (NVLink, PCIe, InfiniBand), its ring or tree algorithms,
// ranks in other processes, or its performance.

#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "cuda_emulation/runtime.hpp"

#define NCCL_MAJOR 0
#define NCCL_MINOR 0
#define NCCL_PATCH 0

enum ncclResult_t {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
};
enum ncclDataType_t { ncclFloat = 7 };
enum ncclRedOp_t { ncclSum = 0 };
struct ncclUniqueId {
  char internal[128];
};
struct ncclConfig_t {
  int blocking;
};
#define NCCL_CONFIG_INITIALIZER \
  { 1 }

struct ncclComm;
using ncclComm_t = ncclComm*;

namespace mnist::cuda::emulation::detail {

struct NcclClique;

}  // namespace mnist::cuda::emulation::detail

struct ncclComm {
  std::shared_ptr<mnist::cuda::emulation::detail::NcclClique> clique;
  int rank = 0;
  int device = 0;
  ncclResult_t state = ncclInProgress;
  int polls_until_ready = 1;  // init: one more ncclInProgress after the last rank joined
  bool in_collective = false;
  std::string last_error;
};

namespace mnist::cuda::emulation::detail {

struct NcclContribution {
  ncclComm* comm;
  const float* send;
  float* recv;
  std::size_t count;
};

struct NcclClique {
  unsigned long long id = 0;
  int ranks = 0;
  std::vector<ncclComm*> members;  // by rank; nullptr until joined or after destroy/abort
  int joined = 0;
  std::vector<NcclContribution> pending;  // the collective in progress
};

struct NcclState {
  std::mutex mutex;
  unsigned long long next_id = 1;
  std::vector<std::shared_ptr<NcclClique>> cliques;
};
inline NcclState& nccl() {
  static NcclState state;
  return state;
}
inline thread_local int nccl_group_depth = 0;
inline thread_local std::string nccl_last_error;

// Records `what` as the comm's (or this thread's) last error and returns `code`.
inline ncclResult_t nccl_error(ncclComm* comm, ncclResult_t code, const std::string& what) {
  (comm ? comm->last_error : nccl_last_error) = "emulated NCCL: " + what;
  return code;
}

inline unsigned long long id_of(const ncclUniqueId& id) {
  unsigned long long value = 0;
  std::memcpy(&value, id.internal, sizeof value);
  return value;
}

// Caller holds nccl().mutex. Every rank has contributed: sum in rank order, write everywhere.
inline void finish_all_reduce(NcclClique& c) {
  const std::size_t count = c.pending.front().count;
  std::vector<const NcclContribution*> by_rank(c.ranks, nullptr);
  for (const NcclContribution& p : c.pending) by_rank[p.comm->rank] = &p;
  std::vector<float> sum(count, 0.0f);
  for (int r = 0; r < c.ranks; ++r)
    for (std::size_t i = 0; i < count; ++i)
      sum[i] = r == 0 ? by_rank[r]->send[i] : sum[i] + by_rank[r]->send[i];
  for (const NcclContribution& p : c.pending) {
    if (count) std::memcpy(p.recv, sum.data(), count * sizeof(float));
    p.comm->in_collective = false;
    p.comm->state = ncclSuccess;
  }
  c.pending.clear();
}

// Caller holds nccl().mutex. `comm` leaves its clique; a collective waiting for it fails.
inline void leave_clique(ncclComm* comm, const char* how) {
  NcclClique& c = *comm->clique;
  if (comm->rank >= 0 && comm->rank < c.ranks && c.members[comm->rank] == comm)
    c.members[comm->rank] = nullptr;
  bool was_pending = false;
  for (auto it = c.pending.begin(); it != c.pending.end();)
    if (it->comm == comm) {
      it = c.pending.erase(it);
      was_pending = true;
    } else {
      ++it;
    }
  (void)was_pending;
  for (NcclContribution& p : c.pending) {
    p.comm->in_collective = false;
    p.comm->state = nccl_error(p.comm, ncclRemoteError,
                               "rank " + std::to_string(comm->rank) + " was " + how +
                                   " while this rank waited for it in ncclAllReduce");
  }
  c.pending.clear();
}

}  // namespace mnist::cuda::emulation::detail

inline const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error";
    case ncclSystemError:
      return "unhandled system error";
    case ncclInternalError:
      return "internal error";
    case ncclInvalidArgument:
      return "invalid argument";
    case ncclInvalidUsage:
      return "invalid usage";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInProgress:
      return "NCCL operation in progress";
  }
  return "unknown result code";
}

inline const char* ncclGetLastError(ncclComm_t comm) {
  return comm ? comm->last_error.c_str() : mnist::cuda::emulation::detail::nccl_last_error.c_str();
}

inline ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  namespace d = mnist::cuda::emulation::detail;
  std::lock_guard<std::mutex> lock(d::nccl().mutex);
  std::memset(id->internal, 0, sizeof id->internal);
  const unsigned long long value = d::nccl().next_id++;
  std::memcpy(id->internal, &value, sizeof value);
  return ncclSuccess;
}

inline ncclResult_t ncclGroupStart() {
  ++mnist::cuda::emulation::detail::nccl_group_depth;
  return ncclSuccess;
}

inline ncclResult_t ncclGroupEnd() {
  namespace d = mnist::cuda::emulation::detail;
  if (d::nccl_group_depth == 0)
    return d::nccl_error(nullptr, ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  --d::nccl_group_depth;
  return ncclSuccess;
}

inline ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank,
                                           ncclConfig_t* config) {
  namespace d = mnist::cuda::emulation::detail;
  *comm = nullptr;
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return d::nccl_error(nullptr, ncclInvalidArgument,
                         "rank " + std::to_string(rank) + " of " + std::to_string(nranks));
  if (!config || config->blocking)
    return d::nccl_error(nullptr, ncclInvalidUsage,
                         "only non-blocking communicators (config.blocking = 0) are emulated");
  std::lock_guard<std::mutex> lock(d::nccl().mutex);
  const unsigned long long key = d::id_of(id);
  std::shared_ptr<d::NcclClique> clique;
  for (const auto& c : d::nccl().cliques)
    if (c->id == key) clique = c;
  if (!clique) {
    if (key == 0 || key >= d::nccl().next_id)
      return d::nccl_error(nullptr, ncclInvalidArgument,
                           "the unique id did not come from ncclGetUniqueId");
    clique = std::make_shared<d::NcclClique>();
    clique->id = key;
    clique->ranks = nranks;
    clique->members.assign(nranks, nullptr);
    d::nccl().cliques.push_back(clique);
  }
  if (clique->ranks != nranks)
    return d::nccl_error(nullptr, ncclInvalidUsage,
                         "rank " + std::to_string(rank) + " says " + std::to_string(nranks) +
                             " ranks, an earlier one " + std::to_string(clique->ranks));
  if (clique->members[rank])
    return d::nccl_error(nullptr, ncclInvalidUsage,
                         "rank " + std::to_string(rank) + " joined twice");
  const int device = d::current_device;
  for (const ncclComm* other : clique->members)
    if (other && other->device == device)
      return d::nccl_error(nullptr, ncclInvalidUsage,
                           "Duplicate GPU detected: ranks " + std::to_string(other->rank) +
                               " and " + std::to_string(rank) + " both on GPU " +
                               std::to_string(device));
  auto* c = new ncclComm;
  c->clique = clique;
  c->rank = rank;
  c->device = device;
  clique->members[rank] = c;
  ++clique->joined;
  *comm = c;
  return ncclInProgress;
}

inline ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* state) {
  namespace d = mnist::cuda::emulation::detail;
  if (!comm) return d::nccl_error(nullptr, ncclInvalidArgument, "null communicator");
  std::lock_guard<std::mutex> lock(d::nccl().mutex);
  if (comm->state == ncclInProgress && !comm->in_collective &&
      comm->clique->joined == comm->clique->ranks) {
    if (comm->polls_until_ready > 0)
      --comm->polls_until_ready;
    else
      comm->state = ncclSuccess;
  }
  *state = comm->state;
  return ncclSuccess;
}

inline ncclResult_t ncclAllReduce(const void* send, void* recv, std::size_t count,
                                  ncclDataType_t type, ncclRedOp_t op, ncclComm_t comm,
                                  cudaStream_t stream) {
  namespace d = mnist::cuda::emulation::detail;
  if (!comm) return d::nccl_error(nullptr, ncclInvalidArgument, "null communicator");
  if (type != ncclFloat || op != ncclSum)
    return d::nccl_error(comm, ncclInvalidArgument, "only float sums are emulated");
  if (d::sticky_error() != cudaSuccess)
    return d::nccl_error(comm, ncclUnhandledCudaError, "the GPU has a sticky CUDA error");
  const std::size_t bytes = count * sizeof(float);
  if (count && (!d::device_range(send, bytes) || !d::device_range(recv, bytes)))
    return d::nccl_error(comm, ncclInvalidArgument,
                         "ncclAllReduce buffers of " + std::to_string(count) +
                             " floats are not inside device allocations");
  cudaPointerAttributes where{};
  cudaPointerGetAttributes(&where, recv);
  if (count && where.device != comm->device)
    return d::nccl_error(comm, ncclInvalidArgument,
                         "rank " + std::to_string(comm->rank) + " is on GPU " +
                             std::to_string(comm->device) + ", its buffer on GPU " +
                             std::to_string(where.device));
  if (stream && stream->device != comm->device)
    return d::nccl_error(comm, ncclInvalidArgument, "the stream belongs to another GPU");
  // NCCL can be captured into a graph; this stand-in cannot replay a collective (every rank's
  // replay would have to meet), so it says so rather than record something it cannot run.
  if (d::capturing(stream))
    return d::nccl_error(comm, ncclInvalidUsage,
                         "ncclAllReduce in a capturing stream is not emulated");
  std::lock_guard<std::mutex> lock(d::nccl().mutex);
  if (comm->state != ncclSuccess)
    return d::nccl_error(comm, ncclInvalidUsage,
                         comm->state == ncclInProgress
                             ? "ncclAllReduce before the previous operation completed"
                             : "ncclAllReduce on a communicator in error");
  d::NcclClique& c = *comm->clique;
  if (!c.pending.empty() && c.pending.front().count != count)
    return d::nccl_error(comm, ncclInvalidUsage,
                         "rank " + std::to_string(comm->rank) + " reduces " +
                             std::to_string(count) + " floats, rank " +
                             std::to_string(c.pending.front().comm->rank) + " " +
                             std::to_string(c.pending.front().count));
  comm->state = ncclInProgress;
  comm->in_collective = true;
  c.pending.push_back(
      d::NcclContribution{comm, static_cast<const float*>(send), static_cast<float*>(recv), count});
  if (static_cast<int>(c.pending.size()) == c.ranks) d::finish_all_reduce(c);
  return ncclSuccess;
}

inline ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  namespace d = mnist::cuda::emulation::detail;
  if (!comm) return d::nccl_error(nullptr, ncclInvalidArgument, "null communicator");
  std::lock_guard<std::mutex> lock(d::nccl().mutex);
  if (comm->state != ncclSuccess)
    return d::nccl_error(comm, ncclInvalidUsage, "ncclCommFinalize while an operation is pending");
  comm->state = ncclInProgress;  // flushing: the next ncclCommGetAsyncError completes it
  comm->polls_until_ready = 0;
  return ncclInProgress;
}

namespace mnist::cuda::emulation::detail {
// Destroy and abort end a rank the same way here: it leaves its clique (whose waiting peers then
// fail, naming `how`) and is freed. NCCL's difference, abort not waiting for pending work, has
// nothing to act on when every operation completes before its call returns.
inline ncclResult_t release_comm(ncclComm_t comm, const char* how) {
  if (!comm) return ncclSuccess;
  {
    std::lock_guard<std::mutex> lock(nccl().mutex);
    leave_clique(comm, how);
  }
  delete comm;
  return ncclSuccess;
}
}  // namespace mnist::cuda::emulation::detail

inline ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  return mnist::cuda::emulation::detail::release_comm(comm, "destroyed");
}

inline ncclResult_t ncclCommAbort(ncclComm_t comm) {
  return mnist::cuda::emulation::detail::release_comm(comm, "aborted");
}
