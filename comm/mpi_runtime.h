// MPI as meshtrain uses it: RAII start-up and shutdown, error checks that throw with the place,
// rank and host, and an owning communicator handle that can split itself by member lists.
// defines: MpiRuntime, MpiComm, MT_MPI_CHECK, abort_job
#pragma once

#include <mpi.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "runtime/error.h"

namespace mt {

std::string mpi_error_string(int code);

#define MT_MPI_CHECK(call)                                                                         \
  do {                                                                                             \
    int mt_mpi_rc_ = (call);                                                                       \
    if (mt_mpi_rc_ != MPI_SUCCESS) MT_FAIL("MPI error in ", #call, ": ", ::mt::mpi_error_string(mt_mpi_rc_)); \
  } while (0)

// Starts MPI with MPI_THREAD_MULTIPLE (the communication thread calls MPI beside the caller),
// makes errors return codes instead of aborting, and labels errors with rank and host.
// Communicators must be destroyed before it (their engine calls MPI while shutting down).
class MpiRuntime {
 public:
  MpiRuntime(int* argc, char*** argv);
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;
  int world_rank() const { return rank_; }
  int world_size() const { return size_; }
  // Every rank calls this once as it ends, saying whether it ends with an error to report. Returns
  // the lowest such rank (world_size when none), or nothing when some rank did not call it within
  // `limit` (it is still busy: the caller must then end the job). An allreduce on a communicator
  // of its own, so it cannot meet an operation the program left unfinished; without a limit it
  // waits as MPI_Finalize would. How the top level tells an error every rank raised (or one raised
  // by a rank working alone) from one that leaves others waiting.
  std::optional<int> lowest_reporting_rank(bool reporting,
                                           std::chrono::milliseconds limit = std::chrono::milliseconds::max()) const;
 private:
  int rank_ = 0;
  int size_ = 1;
  bool owns_mpi_ = false;  // started MPI, so finalizes it
  MPI_Comm ending_comm_ = MPI_COMM_NULL;  // lowest_reporting_rank's own
};

// Ends every rank of the job: the way out of an error on one rank that others would wait for.
[[noreturn]] void abort_job(int code);

// An MPI communicator, freed on destruction unless it is a predefined one (world, self).
class MpiComm {
 public:
  MpiComm() = default;
  MpiComm(MPI_Comm comm, bool owned);
  static MpiComm world() { return MpiComm(MPI_COMM_WORLD, false); }
  ~MpiComm();
  MpiComm(MpiComm&& other) noexcept;
  MpiComm& operator=(MpiComm&& other) noexcept;
  MpiComm(const MpiComm&) = delete;
  MpiComm& operator=(const MpiComm&) = delete;

  MPI_Comm get() const { return comm_; }
  bool valid() const { return comm_ != MPI_COMM_NULL; }
  int rank() const;
  int size() const;
  MpiComm dup() const;
  // Each rank names its group's members (ranks of this communicator); see Communicator::split.
  // Checks that all members named the same list and fails on every member if not.
  MpiComm split_by_color(int color, int key, const std::vector<int>& members) const;
  std::vector<int> world_ranks() const;  // this communicator's members in MPI_COMM_WORLD numbering

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  bool owned_ = false;
};

}  // namespace mt
