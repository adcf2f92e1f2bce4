#include "comm/mpi_device_comm.h"

#include <mpi.h>

#include <cstdlib>

#include "runtime/error.h"

// Open MPI's extensions: MPIX_CUDA_AWARE_SUPPORT says what the library was built with, and
// MPIX_Query_cuda_support() what the one loaded at run time can do. Other MPIs have neither.
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>
#endif

namespace mt {

MpiDeviceComm parse_mpi_device_comm(std::string_view value) {
  if (value.empty() || value == "sync") return MpiDeviceComm::Sync;
  if (value == "async") return MpiDeviceComm::Async;
  if (value == "cuda-aware") return MpiDeviceComm::CudaAware;
  MT_FAIL_AS(EnvironmentError, kMpiDeviceCommEnv, "=", value, ": expected sync (the default), async or cuda-aware");
}

const char* mpi_device_comm_name(MpiDeviceComm mode) {
  switch (mode) {
    case MpiDeviceComm::Sync: return "sync";
    case MpiDeviceComm::Async: return "async";
    case MpiDeviceComm::CudaAware: return "cuda-aware";
  }
  return "?";
}

MpiDeviceComm mpi_device_comm_from_env() {
  const char* value = std::getenv(kMpiDeviceCommEnv);
  return parse_mpi_device_comm(value != nullptr ? value : "");
}

bool mpi_cuda_aware(std::string* why) {
  std::string reason;
#if defined(MPIX_CUDA_AWARE_SUPPORT)
  // Asked even when the headers say 0: the library loaded may not be the one compiled against.
  if (MPIX_Query_cuda_support() == 1) return true;
  reason = MPIX_CUDA_AWARE_SUPPORT ? "MPIX_Query_cuda_support() reports no CUDA support in the MPI library loaded"
                                   : "the MPI library was built without CUDA support (MPIX_CUDA_AWARE_SUPPORT is 0) "
                                     "and MPIX_Query_cuda_support() reports none";
#else
  reason = "this MPI has no MPIX_Query_cuda_support (not Open MPI's mpi-ext.h): CUDA support cannot be checked";
#endif
  if (why != nullptr) *why = reason;
  return false;
}

}  // namespace mt
