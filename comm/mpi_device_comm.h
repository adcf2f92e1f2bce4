// How the MPI backend moves device (CUDA) tensors, chosen by MESHTRAIN_MPI_DEVICE_COMM and read
// once, when a world MPI communicator is made (groups split from it keep the choice):
//   sync        (or unset, or empty) the default: drain the device, stage through a pinned host
//               buffer made for the op, copy on a fresh stream, block the host in Work::wait_on
//   async       pinned staging buffers cached by the communicator family and reused, copies on a
//               copy stream ordered by events, wait_on makes the stream wait for the result copy
//   cuda-aware  device pointers straight to MPI (the library must report CUDA support); ops that
//               work on host memory (averages, bf16 reductions, in-place reduce_scatter) as async
// async and cuda-aware have not yet run on a GPU: never the default until they pass there
// (comm/tests/mpi_device_staging_test.cpp, scripts/device_gpu_speed.sh).
// defines: MpiDeviceComm, kMpiDeviceCommEnv, parse_mpi_device_comm, mpi_device_comm_name,
//          mpi_device_comm_from_env, mpi_cuda_aware
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace mt {

enum class MpiDeviceComm : std::uint8_t { Sync, Async, CudaAware };

inline constexpr const char* kMpiDeviceCommEnv = "MESHTRAIN_MPI_DEVICE_COMM";

// A value of MESHTRAIN_MPI_DEVICE_COMM; anything but sync, async, cuda-aware or empty is an
// EnvironmentError naming the variable.
MpiDeviceComm parse_mpi_device_comm(std::string_view value);
const char* mpi_device_comm_name(MpiDeviceComm mode);
// The variable's value; sync when it is unset or empty.
MpiDeviceComm mpi_device_comm_from_env();

// Does this MPI library pass device pointers (Open MPI's MPIX_Query_cuda_support)? When not, *why
// says what reported so (the build's headers or the library at run time).
bool mpi_cuda_aware(std::string* why);

}  // namespace mt
