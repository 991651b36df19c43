#pragma once
// The processes of one run: a single process, or one process per node started by mpirun / srun.
//
// This header never includes mpi.h: CPU-only code and builds without MPI use it unchanged. The MPI
// implementation (mpi_process_group.cpp) is compiled only when MPI is built; otherwise
// process_group_unavailable.cpp refuses a multi-process launch instead of letting N copies train
// alone.
//
// Threading contract: MPI is initialised with MPI_THREAD_SERIALIZED. The main thread calls the
// group during setup and teardown; during training only local worker 0 calls all_reduce_sum, from
// inside the ThreadCommunicator's barrier, while the main thread waits. No two threads ever call
// the group at the same time.
//
// Failure contract: a collective that one rank never reaches would hang the others, so a rank that
// fails prints its error and calls abort(), which (under MPI) ends every rank of the job.

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace mnist {

// What the environment says about how this process was started.
struct LaunchInfo {
  std::string launcher;  // empty: not under a launcher; else e.g. "mpirun (OMPI_COMM_WORLD_SIZE=2)"
  int size = 1;          // processes in the job; -1 when the launcher does not say
  int rank = 0;          // this process's rank; -1 when the launcher does not say
  bool launched() const { return !launcher.empty(); }
};

// Reads an environment variable; nullptr when unset. Injected so tests need not touch the real one.
using EnvLookup = std::function<const char*(const char* name)>;

// Recognises Open MPI's mpirun (OMPI_COMM_WORLD_SIZE/RANK), PMI launchers such as MPICH's Hydra,
// Intel MPI or srun --mpi=pmi2 (PMI_SIZE/RANK), srun (SLURM_STEP_NUM_TASKS/SLURM_PROCID: set for a
// job step, unlike SLURM_NTASKS which an sbatch script sees without any launcher) and bare PMIx
// (PMIX_RANK, size unknown). Throws RuntimeError naming the variable when a value is not a number
// or is out of range.
LaunchInfo detect_launch(const EnvLookup& env);
LaunchInfo detect_launch();  // from the real environment

// The refusal of a build without MPI launched as several processes, for people to read.
std::string without_mpi_message(const LaunchInfo& launch);
// Throws RuntimeError when MPI's view of the job contradicts the launcher's: a binary built against
// one MPI started by another MPI's mpirun initialises as N independent singletons.
void check_mpi_matches_launch(const LaunchInfo& launch, int mpi_size,
                              const std::string& mpi_library);

// The MPI this binary was built against, from its headers ("Open MPI 4.1.4", OMPI_MAJOR_VERSION
// and the rest), and the library it runs with (MPI_Get_library_version's first clause, which MPI
// allows before MPI_Init); both "" in a build without MPI.
std::string mpi_build_version();
std::string mpi_library_version();

class ProcessGroup {
 public:
  // Not launched: a single-process group that makes no MPI call. Launched: MPI_Init_thread (with
  // MPI) or, without MPI, RuntimeError when the launch has more than one process.
  static std::unique_ptr<ProcessGroup> create(int* argc, char*** argv);
  static std::unique_ptr<ProcessGroup> create(int* argc, char*** argv, const LaunchInfo& launch);

  virtual ~ProcessGroup() = default;  // MPI_Finalize for an MPI group; never throws

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual int local_rank() const = 0;  // rank among the processes on this node
  virtual int local_size() const = 0;  // processes on this node
  const std::string& host() const { return host_; }
  // "rank 1 (node7)" in a multi-process run, empty for a single process: prefixes messages.
  std::string label() const;

  // Collective: data[0, count) becomes the element-wise sum over all ranks, in place. The order
  // of the float additions is MPI's, so results can differ from a single process in the last bits.
  virtual void all_reduce_sum(float* data, std::size_t count) = 0;
  // Collective: `bytes` bytes at data are replaced by root's on every rank.
  virtual void broadcast(void* data, std::size_t bytes, int root) = 0;
  virtual void barrier() = 0;
  // Collective: every rank's string, in rank order, on every rank.
  virtual std::vector<std::string> all_gather_strings(const std::string& mine) = 0;
  // Ends every process of the job with exit status `code` (MPI_Abort). A single-process group
  // returns, and the caller exits normally with the code.
  virtual void abort(int code) = 0;

  // The ThreadCommunicator's upper level: empty for a single process (no extra barrier per step).
  std::function<void(float* data, std::size_t count)> upper_reduce();

 protected:
  ProcessGroup();
  std::string host_;
};

// Collective, called by every rank once its devices are planned: checks that all ranks run the
// same number of local workers (global replica index = rank * local_workers + k, so a mismatch
// would break the batch split) and returns one line per rank, in rank order, saying which host
// and devices each rank uses. Throws ConfigError on every rank alike when the counts differ.
std::vector<std::string> agree_on_layout(ProcessGroup& group, int local_workers,
                                         const std::string& devices);

namespace detail {
// Size 1, rank 0, no MPI call; what create() returns when not launched.
std::unique_ptr<ProcessGroup> make_single_process_group();
// A launched process's group: defined by mpi_process_group.cpp when MPI is built, else by
// process_group_unavailable.cpp (which refuses more than one process).
std::unique_ptr<ProcessGroup> make_launched_group(int* argc, char*** argv,
                                                  const LaunchInfo& launch);
}  // namespace detail

}  // namespace mnist
