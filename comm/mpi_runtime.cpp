#include "comm/mpi_runtime.h"

#include <thread>

#include <cstdlib>

#include <cstdio>
#include <utility>

namespace mt {

std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<std::size_t>(length));
}

MpiRuntime::MpiRuntime(int* argc, char*** argv) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  int provided = MPI_THREAD_SINGLE;
  if (!initialized) {
    // Open MPI's libnbc runs MPI_Iallreduce (every allreduce of the MPI backend) as a reduce to one
    // rank plus a broadcast whenever there are fewer than 4 ranks or the op is in place: each link
    // then carries data one way at a time, half the bus bandwidth. Reduce-scatter + allgather
    // (Rabenseifner; ring where count < ranks) uses both directions. A value the user set wins.
    setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "3", /*overwrite=*/0);
    MT_MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided));
    owns_mpi_ = true;
  } else {
    MPI_Query_thread(&provided);  // started by someone else: they finalize it
  }
  if (provided < MPI_THREAD_MULTIPLE) {
    if (owns_mpi_) MPI_Finalize();
    owns_mpi_ = false;
    MT_FAIL("this MPI does not provide MPI_THREAD_MULTIPLE, which the communication thread needs");
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  set_process_label(rank_, this_host_name());
  MT_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &ending_comm_));
}

MpiRuntime::~MpiRuntime() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized && ending_comm_ != MPI_COMM_NULL) MPI_Comm_free(&ending_comm_);
  if (owns_mpi_ && !finalized) MPI_Finalize();
}

std::optional<int> MpiRuntime::lowest_reporting_rank(bool reporting, std::chrono::milliseconds limit) const {
  if (size_ == 1) return reporting ? 0 : 1;
  int mine = reporting ? rank_ : size_, lowest = size_;
  MPI_Request request = MPI_REQUEST_NULL;
  if (MPI_Iallreduce(&mine, &lowest, 1, MPI_INT, MPI_MIN, ending_comm_, &request) != MPI_SUCCESS) return std::nullopt;
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    int done = 0;
    if (MPI_Test(&request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return std::nullopt;
    if (done) return lowest;
    if (limit != std::chrono::milliseconds::max() && std::chrono::steady_clock::now() - start >= limit)
      return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

void abort_job(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
  int initialized = 0;
  int finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

MpiComm::MpiComm(MPI_Comm comm, bool owned) : comm_(comm), owned_(owned) {}

namespace {
// Freeing after MPI_Finalize is an MPI error; a handle outliving MPI has nothing left to free.
bool mpi_alive() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return !finalized;
}
}  // namespace

MpiComm::~MpiComm() {
  if (owned_ && comm_ != MPI_COMM_NULL && mpi_alive()) MPI_Comm_free(&comm_);
}

MpiComm::MpiComm(MpiComm&& other) noexcept
    : comm_(std::exchange(other.comm_, MPI_COMM_NULL)), owned_(std::exchange(other.owned_, false)) {}

MpiComm& MpiComm::operator=(MpiComm&& other) noexcept {
  if (this != &other) {
    if (owned_ && comm_ != MPI_COMM_NULL && mpi_alive()) MPI_Comm_free(&comm_);
    comm_ = std::exchange(other.comm_, MPI_COMM_NULL);
    owned_ = std::exchange(other.owned_, false);
  }
  return *this;
}

int MpiComm::rank() const {
  int r = 0;
  MT_MPI_CHECK(MPI_Comm_rank(comm_, &r));
  return r;
}

int MpiComm::size() const {
  int s = 0;
  MT_MPI_CHECK(MPI_Comm_size(comm_, &s));
  return s;
}

MpiComm MpiComm::dup() const {
  MPI_Comm out = MPI_COMM_NULL;
  MT_MPI_CHECK(MPI_Comm_dup(comm_, &out));
  MPI_Comm_set_errhandler(out, MPI_ERRORS_RETURN);
  return MpiComm(out, true);
}

MpiComm MpiComm::split_by_color(int color, int key, const std::vector<int>& members) const {
  MPI_Comm out = MPI_COMM_NULL;
  MT_MPI_CHECK(MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &out));
  if (out == MPI_COMM_NULL) return MpiComm();
  MpiComm group(out, true);
  MPI_Comm_set_errhandler(out, MPI_ERRORS_RETURN);
  // Every member must have named the same list: compare the lists through min and max.
  std::vector<int> mine = members;
  mine.insert(mine.begin(), static_cast<int>(members.size()));
  std::vector<int> low(mine.size()), high(mine.size());
  const int n = static_cast<int>(mine.size());
  int sizes_agree[2] = {n, -n};
  MT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, sizes_agree, 2, MPI_INT, MPI_MAX, out));
  const bool same_length = sizes_agree[0] == -sizes_agree[1];
  bool same = same_length;
  if (same_length) {
    MT_MPI_CHECK(MPI_Allreduce(mine.data(), low.data(), n, MPI_INT, MPI_MIN, out));
    MT_MPI_CHECK(MPI_Allreduce(mine.data(), high.data(), n, MPI_INT, MPI_MAX, out));
    same = low == high;
  }
  if (!same || group.size() != static_cast<int>(members.size())) {
    std::string list;
    for (int m : members) list += (list.empty() ? "" : ",") + std::to_string(m);
    MT_FAIL("split: the members of group ", color, " named different member lists (this rank named {", list,
            "}) or the groups overlap");
  }
  return group;
}

std::vector<int> MpiComm::world_ranks() const {
  MPI_Group mine = MPI_GROUP_NULL;
  MPI_Group world = MPI_GROUP_NULL;
  MT_MPI_CHECK(MPI_Comm_group(comm_, &mine));
  MT_MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &world));
  const int n = size();
  std::vector<int> local(static_cast<std::size_t>(n)), global(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) local[static_cast<std::size_t>(i)] = i;
  MPI_Group_translate_ranks(mine, n, local.data(), world, global.data());
  MPI_Group_free(&mine);
  MPI_Group_free(&world);
  return global;
}

}  // namespace mt
