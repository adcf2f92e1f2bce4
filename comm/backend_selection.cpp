#include "comm/backend_selection.h"

#include <cstring>
#include <set>

#include "comm/mpi_communicator.h"
#include "comm/nccl_communicator.h"

namespace mt {

CommBackend parse_comm_backend(std::string_view name) {
  if (name == "auto") return CommBackend::Auto;
  if (name == "mpi") return CommBackend::Mpi;
  if (name == "nccl") return CommBackend::Nccl;
  MT_FAIL_AS(UsageError, "unknown communication backend '", name, "' (expected auto, mpi or nccl)");
}

const char* comm_backend_name(CommBackend backend) {
  switch (backend) {
    case CommBackend::Auto: return "auto";
    case CommBackend::Mpi: return "mpi";
    case CommBackend::Nccl: return "nccl";
  }
  return "?";
}

BackendChoice choose_backend(CommBackend requested, Device device, const std::string& gpu_identity) {
  constexpr int kIdBytes = 160;
  int size = 1;
  MT_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
  char mine[kIdBytes] = {};
  std::strncpy(mine, device.is_cuda() ? gpu_identity.c_str() : "", kIdBytes - 1);
  std::vector<char> all(static_cast<std::size_t>(size) * kIdBytes);
  MT_MPI_CHECK(MPI_Allgather(mine, kIdBytes, MPI_CHAR, all.data(), kIdBytes, MPI_CHAR, MPI_COMM_WORLD));

  std::string obstacle;  // why NCCL cannot run, empty if it can
  std::set<std::string> seen;
  for (int r = 0; r < size && obstacle.empty(); ++r) {
    std::string id(&all[static_cast<std::size_t>(r) * kIdBytes]);
    if (id.empty()) {
      obstacle = "rank " + std::to_string(r) + " has no GPU";
    } else if (!seen.insert(id).second) {
      obstacle = "rank " + std::to_string(r) + " shares its GPU (" + id + ") with another rank";
    }
  }
  if (obstacle.empty() && !nccl_compiled()) obstacle = "NCCL is not built in";

  BackendChoice choice;
  switch (requested) {
    case CommBackend::Mpi:
      choice = {CommBackend::Mpi, "--comm-backend mpi"};
      break;
    case CommBackend::Nccl:
      // Every rank found `obstacle` in the same allgather: the same verdict everywhere, said once.
      if (!obstacle.empty()) MT_FAIL_AS(JobError, "--comm-backend nccl needs a GPU of its own on every rank, but ", obstacle);
      choice = {CommBackend::Nccl, "--comm-backend nccl"};
      break;
    case CommBackend::Auto:
      choice = obstacle.empty() ? BackendChoice{CommBackend::Nccl, "every rank has a GPU of its own"}
                                : BackendChoice{CommBackend::Mpi, obstacle};
      break;
  }
  return choice;
}

std::unique_ptr<Communicator> make_world_communicator(const BackendChoice& choice, DeviceContext& ctx,
                                                      CommOptions options) {
  if (choice.backend == CommBackend::Nccl) {
    return make_nccl_communicator(MpiComm::world().dup(), ctx.device(), ctx.stream().handle(), options);
  }
  return MpiCommunicator::world(options, &ctx.stream());
}

}  // namespace mt
