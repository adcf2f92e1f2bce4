#include "launch/early_agreement.h"

#include <chrono>
#include <numeric>
#include <thread>
#include <vector>

#include "comm/mpi_runtime.h"  // defines: MT_MPI_CHECK
#include "runtime/error.h"     // defines: JobError

namespace mt {

std::optional<std::string> outcome_of_rank0(MPI_Comm comm, const std::optional<std::string>& mine) {
  int size = 1;
  MT_MPI_CHECK(MPI_Comm_size(comm, &size));
  if (size == 1) return mine;
  long long length = mine ? static_cast<long long>(mine->size()) : -1;
  MPI_Request request;
  MT_MPI_CHECK(MPI_Ibcast(&length, 1, MPI_LONG_LONG, 0, comm, &request));
  for (int done = 0; !done;) {
    MT_MPI_CHECK(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
    if (!done) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (length < 0) return std::nullopt;
  int rank = 0;
  MT_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  std::string message = rank == 0 ? *mine : std::string(static_cast<std::size_t>(length), ' ');
  MT_MPI_CHECK(MPI_Bcast(message.data(), static_cast<int>(length), MPI_CHAR, 0, comm));
  return message;
}

namespace {

// Rank 0's verdict on every rank's message (gathered there; nullopt on the other ranks and where none
// failed).
std::optional<std::string> verdict_at_rank0(MPI_Comm comm, const std::optional<std::string>& mine) {
  int size = 1, rank = 0;
  MT_MPI_CHECK(MPI_Comm_size(comm, &size));
  MT_MPI_CHECK(MPI_Comm_rank(comm, &rank));
  // An empty message still has to count as a failure.
  const std::string text = !mine ? std::string() : mine->empty() ? std::string("unknown error") : *mine;
  const int length = static_cast<int>(text.size());
  std::vector<int> lengths(rank == 0 ? static_cast<std::size_t>(size) : 0);
  MT_MPI_CHECK(MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, 0, comm));
  std::vector<int> offsets(lengths.size(), 0);
  std::exclusive_scan(lengths.begin(), lengths.end(), offsets.begin(), 0);
  std::vector<char> all(rank == 0 ? static_cast<std::size_t>(offsets.back() + lengths.back()) : 0);
  MT_MPI_CHECK(MPI_Gatherv(text.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(), MPI_CHAR, 0, comm));
  if (rank != 0) return std::nullopt;
  int failed = 0, first = -1;
  bool alike = true;
  const auto message_of = [&](int r) {
    const auto i = static_cast<std::size_t>(r);
    return std::string(all.data() + offsets[i], static_cast<std::size_t>(lengths[i]));
  };
  for (int r = 0; r < size; ++r) {
    if (lengths[static_cast<std::size_t>(r)] == 0) continue;
    ++failed;
    if (first < 0) first = r;
    alike = alike && message_of(r) == message_of(first);
  }
  if (failed == 0) return std::nullopt;
  std::string message = message_of(first);
  // The same wording as agree_on_error: a rank alone is named, a unanimous verdict is not.
  if (failed < size || !alike) {
    message = "rank " + std::to_string(first) + ": " + message;
    if (failed > 1) message += " (and " + std::to_string(failed - 1) + " more rank(s) failed)";
  }
  return message;
}

}  // namespace

void agree_before_communicators(MPI_Comm comm, const std::optional<std::string>& mine) {
  if (const std::optional<std::string> agreed = outcome_of_rank0(comm, verdict_at_rank0(comm, mine)))
    MT_FAIL_AS(JobError, *agreed);
}

}  // namespace mt
