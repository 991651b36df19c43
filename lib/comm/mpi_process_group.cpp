// The process group over MPI: one rank per process, MPI_COMM_WORLD for the collectives and a
// node-local communicator (MPI_COMM_TYPE_SHARED) for the rank among processes on one host.

#include <algorithm>
#include <climits>
#include <cstdint>

#include "comm/mpi_check.hpp"
#include "comm/process_group.hpp"
#include "core/error.hpp"

namespace mnist {

namespace detail {
void throw_mpi_error(int code, const char* expr, const char* file, int line) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS)
    fmt::format_to_n(text, sizeof(text) - 1, "code {}", code);
  int initialized = 0, finalized = 0, rank = -1;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  char host[MPI_MAX_PROCESSOR_NAME] = {};
  int host_length = 0;
  if (!initialized || finalized || MPI_Get_processor_name(host, &host_length) != MPI_SUCCESS)
    fmt::format_to_n(host, sizeof(host) - 1, "unknown host");
  throw RuntimeError(fmt::format("MPI error on rank {} ({}): {} failed at {}:{}: {}", rank, host,
                                 expr, file, line, text));
}
}  // namespace detail

namespace {

// MPI counts are int: larger buffers go in pieces.
constexpr std::size_t kMaxCount = INT_MAX;

}  // namespace

std::string mpi_build_version() {
#if defined(OMPI_MAJOR_VERSION)
  return fmt::format("Open MPI {}.{}.{}", OMPI_MAJOR_VERSION, OMPI_MINOR_VERSION,
                     OMPI_RELEASE_VERSION);
#elif defined(MPICH_VERSION)
  return std::string("MPICH ") + MPICH_VERSION;
#else
  return fmt::format("MPI {}.{}", MPI_VERSION, MPI_SUBVERSION);
#endif
}

std::string mpi_library_version() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  if (MPI_Get_library_version(text, &length) != MPI_SUCCESS) return "unknown MPI";
  std::string version(text, static_cast<std::size_t>(std::max(0, length)));
  return version.substr(0, version.find_first_of(",\n"));  // first clause: name and version
}

namespace {

class MpiProcessGroup final : public ProcessGroup {
 public:
  MpiProcessGroup(int* argc, char*** argv, const LaunchInfo& launch) {
    int initialized = 0;
    MNIST_MPI_CHECK(MPI_Initialized(&initialized));
    MNIST_CHECK(!initialized, "MPI was initialised before the process group was created");
    // SERIALIZED, not FUNNELED: setup calls come from the main thread, training reductions from
    // local worker 0's thread, never at the same time (see the header's threading contract).
    int provided = MPI_THREAD_SINGLE;
    MNIST_MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided));
    try {
      // Errors come back as codes (and become exceptions) instead of aborting the job silently.
      MNIST_MPI_CHECK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
      MNIST_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
      MNIST_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size_));
      if (provided < MPI_THREAD_SERIALIZED)
        MNIST_THROW(RuntimeError,
                    "rank {} ({}): {} provides thread level {} but mnist-train needs "
                    "MPI_THREAD_SERIALIZED ({}): worker threads call MPI",
                    rank_, host_, mpi_library_version(), provided, MPI_THREAD_SERIALIZED);
      check_mpi_matches_launch(launch, size_, mpi_library_version());
      MNIST_MPI_CHECK(
          MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node_));
      MNIST_MPI_CHECK(MPI_Comm_set_errhandler(node_, MPI_ERRORS_RETURN));
      MNIST_MPI_CHECK(MPI_Comm_rank(node_, &local_rank_));
      MNIST_MPI_CHECK(MPI_Comm_size(node_, &local_size_));
    } catch (...) {
      if (node_ != MPI_COMM_NULL) MPI_Comm_free(&node_);
      MPI_Finalize();
      throw;
    }
  }

  ~MpiProcessGroup() override {
    // Return codes ignored: destructors never throw, and nothing could be done about them here.
    if (node_ != MPI_COMM_NULL) MPI_Comm_free(&node_);
    MPI_Finalize();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_rank() const override { return local_rank_; }
  int local_size() const override { return local_size_; }

  void all_reduce_sum(float* data, std::size_t count) override {
    for (std::size_t done = 0; done < count; done += kMaxCount) {
      const int n = static_cast<int>(std::min(kMaxCount, count - done));
      MNIST_MPI_CHECK(
          MPI_Allreduce(MPI_IN_PLACE, data + done, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
    }
  }

  void broadcast(void* data, std::size_t bytes, int root) override {
    MNIST_CHECK(root >= 0 && root < size_, "broadcast root {} outside ranks 0-{}", root, size_ - 1);
    auto* bytes_ptr = static_cast<unsigned char*>(data);
    for (std::size_t done = 0; done < bytes; done += kMaxCount) {
      const int n = static_cast<int>(std::min(kMaxCount, bytes - done));
      MNIST_MPI_CHECK(MPI_Bcast(bytes_ptr + done, n, MPI_BYTE, root, MPI_COMM_WORLD));
    }
  }

  void barrier() override { MNIST_MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD)); }

  std::vector<std::string> all_gather_strings(const std::string& mine) override {
    MNIST_CHECK(mine.size() <= kMaxCount, "string of {} bytes is too long to gather", mine.size());
    const int length = static_cast<int>(mine.size());
    std::vector<int> lengths(static_cast<std::size_t>(size_));
    MNIST_MPI_CHECK(MPI_Allgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, MPI_COMM_WORLD));
    std::vector<int> offsets(static_cast<std::size_t>(size_));
    int64_t total = 0;
    for (int r = 0; r < size_; ++r) {
      MNIST_CHECK(total <= INT_MAX, "gathered strings exceed {} bytes", INT_MAX);
      offsets[r] = static_cast<int>(total);
      total += lengths[r];
    }
    MNIST_CHECK(total <= INT_MAX, "gathered strings exceed {} bytes", INT_MAX);
    std::string all(static_cast<std::size_t>(total), '\0');
    MNIST_MPI_CHECK(MPI_Allgatherv(mine.data(), length, MPI_CHAR, all.data(), lengths.data(),
                                   offsets.data(), MPI_CHAR, MPI_COMM_WORLD));
    std::vector<std::string> out;
    for (int r = 0; r < size_; ++r) out.push_back(all.substr(offsets[r], lengths[r]));
    return out;
  }

  void abort(int code) override { MPI_Abort(MPI_COMM_WORLD, code); }

 private:
  int rank_ = 0, size_ = 1, local_rank_ = 0, local_size_ = 1;
  MPI_Comm node_ = MPI_COMM_NULL;
};

}  // namespace

namespace detail {
std::unique_ptr<ProcessGroup> make_launched_group(int* argc, char*** argv,
                                                  const LaunchInfo& launch) {
  return std::make_unique<MpiProcessGroup>(argc, argv, launch);
}
}  // namespace detail

}  // namespace mnist
