// Stands in for the NCCL backend when meshtrain is built without CUDA.
#include "comm/nccl_communicator.h"

namespace mt {

bool nccl_compiled() { return false; }
std::string nccl_version() { return ""; }

std::unique_ptr<Communicator> make_nccl_communicator(MpiComm, Device, cuda::StreamHandle, CommOptions) {
  MT_FAIL("this meshtrain was built without NCCL (configure with -DMESHTRAIN_CUDA=ON)");
}

}  // namespace mt
