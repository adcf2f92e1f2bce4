// Raw NCCL for `meshbench coll` (bench/raw_nccl.h): built with the CUDA backend only.
#include "bench/raw_nccl.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdio>
#include <source_location>

#include "comm/mpi_runtime.h"
#include "runtime/error.h"

namespace mt {
namespace {

void check_nccl(ncclResult_t rc, const char* call, const std::source_location& where = std::source_location::current()) {
  if (rc != ncclSuccess) fail_at(where, "raw NCCL: ", call, ": ", ncclGetErrorString(rc));
}
void check_cuda(cudaError_t rc, const char* call, const std::source_location& where = std::source_location::current()) {
  if (rc != cudaSuccess) fail_at(where, "raw NCCL: ", call, ": ", cudaGetErrorString(rc));
}

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::F32: return ncclFloat32;
    case DType::BF16: return ncclBfloat16;
    case DType::I32: return ncclInt32;
  }
  return ncclFloat32;
}

class RawNccl final : public RawColl {
 public:
  RawNccl(MPI_Comm comm, Device device) {
    MT_MPI_CHECK(MPI_Comm_rank(comm, &rank_));
    MT_MPI_CHECK(MPI_Comm_size(comm, &size_));
    ncclUniqueId id{};
    if (rank_ == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    MT_MPI_CHECK(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, comm));
    check_cuda(cudaSetDevice(device.index), "cudaSetDevice");
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    const ncclResult_t rc = ncclCommInitRank(&comm_, size_, id, rank_);
    if (rc != ncclSuccess) {
      cudaStreamDestroy(stream_);
      check_nccl(rc, "ncclCommInitRank");
    }
  }
  ~RawNccl() override {
    // Reverse order of creation; errors here are reported, not thrown.
    if (ncclCommDestroy(comm_) != ncclSuccess) std::fprintf(stderr, "meshbench: warning: ncclCommDestroy failed\n");
    cudaStreamDestroy(stream_);
  }
  RawNccl(const RawNccl&) = delete;
  RawNccl& operator=(const RawNccl&) = delete;

  std::string name() const override { return "nccl"; }
  std::string describe() const override {
    int v = 0;
    ncclGetVersion(&v);
    const int major = v / 10000, minor = (v % 10000) / 100, patch = v % 100;
    return "raw nccl " + std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch) +
           ": the bench's own ncclComm (unique id broadcast over MPI) on its own stream, same device buffers";
  }
  bool host_memory_only() const override { return false; }

  void start(CollOp op, Placement, const CollShape& shape, DType dtype, void* in, void* out) override {
    const auto count = static_cast<std::size_t>(shape.count);
    const ncclDataType_t type = nccl_type(dtype);
    const std::size_t block = count * (dtype == DType::BF16 ? 2 : 4);
    // NCCL tells in place from the pointers (same convention as coll_ops.h), no flag needed.
    switch (op) {
      case CollOp::Allreduce: check_nccl(ncclAllReduce(in, out, count, type, ncclSum, comm_, stream_), "ncclAllReduce"); break;
      case CollOp::ReduceScatter:
        check_nccl(ncclReduceScatter(in, out, count, type, ncclSum, comm_, stream_), "ncclReduceScatter");
        break;
      case CollOp::Allgather: check_nccl(ncclAllGather(in, out, count, type, comm_, stream_), "ncclAllGather"); break;
      case CollOp::Broadcast: check_nccl(ncclBroadcast(in, out, count, type, 0, comm_, stream_), "ncclBroadcast"); break;
      case CollOp::Alltoall:
        check_nccl(ncclGroupStart(), "ncclGroupStart");
        for (int peer = 0; peer < size_; ++peer) {
          check_nccl(ncclSend(static_cast<char*>(in) + peer * block, count, type, peer, comm_, stream_), "ncclSend");
          check_nccl(ncclRecv(static_cast<char*>(out) + peer * block, count, type, peer, comm_, stream_), "ncclRecv");
        }
        check_nccl(ncclGroupEnd(), "ncclGroupEnd");
        break;
      case CollOp::Sendrecv:
        check_nccl(ncclGroupStart(), "ncclGroupStart");
        check_nccl(ncclSend(in, count, type, (rank_ + 1) % size_, comm_, stream_), "ncclSend");
        check_nccl(ncclRecv(out, count, type, (rank_ + size_ - 1) % size_, comm_, stream_), "ncclRecv");
        check_nccl(ncclGroupEnd(), "ncclGroupEnd");
        break;
    }
  }
  void wait_all() override { check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }
  std::int64_t reduce_scatter_in_place_offset(const CollShape& shape, int rank) const override {
    return rank * shape.count;
  }

 private:
  int rank_ = 0;
  int size_ = 1;
  cudaStream_t stream_ = nullptr;
  ncclComm_t comm_ = nullptr;
};

}  // namespace

std::unique_ptr<RawColl> make_raw_nccl(MPI_Comm comm, Device device) { return std::make_unique<RawNccl>(comm, device); }

}  // namespace mt
