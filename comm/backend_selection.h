// Which communication backend a job uses. Decided together by every rank: NCCL where every rank
// has a GPU of its own, MPI otherwise (CPU ranks, or several ranks sharing a GPU, which NCCL
// before 2.30 refuses as "Duplicate GPU").
// defines: CommBackend, BackendChoice, parse_comm_backend, choose_backend, make_world_communicator
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "comm/communicator.h"
#include "runtime/context.h"

namespace mt {

enum class CommBackend { Auto, Mpi, Nccl };
CommBackend parse_comm_backend(std::string_view name);
const char* comm_backend_name(CommBackend backend);

struct BackendChoice {
  CommBackend backend = CommBackend::Mpi;
  std::string reason;  // one line: why this backend
};

// Collective over MPI_COMM_WORLD. `gpu_identity` tells this rank's GPU apart from every other
// GPU of the job (host and PCI bus id); empty for a CPU rank. Asking for NCCL where it cannot run
// is an error on every rank.
BackendChoice choose_backend(CommBackend requested, Device device, const std::string& gpu_identity);

// Collective over MPI_COMM_WORLD. NCCL orders its ops after the work queued on ctx's stream, and so does
// MPI on device tensors with MESHTRAIN_MPI_DEVICE_COMM=async or cuda-aware; ctx must outlive it.
std::unique_ptr<Communicator> make_world_communicator(const BackendChoice& choice, DeviceContext& ctx,
                                                      CommOptions options);

}  // namespace mt
