// Stands in for mpi_process_group.cpp when MPI is not built: a launch of one process runs as a
// single process; a launch of several is refused, because each copy would silently train alone.

#include "comm/process_group.hpp"
#include "core/error.hpp"

namespace mnist {

std::string mpi_build_version() {
  return "";
}
std::string mpi_library_version() {
  return "";
}

}  // namespace mnist

namespace mnist::detail {

std::unique_ptr<ProcessGroup> make_launched_group(int*, char***, const LaunchInfo& launch) {
  // A launcher that does not say the size (bare PMIx) still says the rank: any rank but 0 proves
  // there are several processes, and rank 0's siblings are refused here too.
  if (launch.size > 1 || launch.rank > 0) throw RuntimeError(without_mpi_message(launch));
  return make_single_process_group();
}

}  // namespace mnist::detail
