// The NCCL backend (comm/nccl_communicator.h).
//
// Bootstrap: rank 0's ncclUniqueId is broadcast over the group's MPI communicator, then every rank
// calls ncclCommInitRank on its own GPU. The MPI communicator is kept for splits: the member lists
// are validated by MpiComm::split_by_color, then ncclCommSplit builds the NCCL side.
//
// Ordering, the rule callers must follow:
//  - Every op is queued on this communicator's own CUDA stream and returns at once.
//  - Output side: Work::wait_on(stream) makes a compute stream wait for the op's completion event
//    without blocking the host; Work::wait() blocks the host.
//  - Input side: the communicator knows the compute stream of its rank (the DeviceContext's).
//    Before each op the comm stream waits on an event recorded there, so the op reads inputs
//    only after the kernels queued before the call have written them; the host never blocks.
//    Work produced on another stream must be ordered onto the compute stream by its producer.
//  - Point-to-point: NCCL has no tags (PointToPointOptions::tag is ignored) and matches sends and
//    receives between two ranks in issue order. A send blocks this communicator's stream until the
//    peer's matching receive runs, so two ranks that both send first deadlock on large messages:
//    pair them (e.g. even ranks send first, odd ranks receive first), or put them in one batch
//    (batch_async: ncclGroupStart/End around the calls, which NCCL then progresses together).
//  - Tensors stay alive until the op has finished on the GPU: the Work holds its descriptor until a
//    test() or wait() finds it done, and the communicator holds every Work still in flight even if
//    the caller drops it (each launch tests them, so a finished op's tensors go by the next one).
//  - ReduceOp::Avg is ncclAvg: floating types are pre-scaled by 1/size before the sum. In fp32 that
//    differs from the MPI backend (which divides the sum) in the last bits; in bf16 the factor 1/size
//    is itself rounded to bf16 (1/3 -> 0.33398, +0.2%). int32 sums, then divides (truncating), like MPI.
#include "comm/nccl_communicator.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <cstdio>
#include <mutex>
#include <source_location>
#include <thread>
#include <utility>
#include <vector>

#include "runtime/cuda/cuda_check.h"
#include "runtime/cuda_api.h"

namespace mt {
namespace {

// "invalid argument (run with NCCL_DEBUG=WARN for details) [last NCCL error: ...]"
std::string nccl_error_text(ncclResult_t rc) {
  std::string text = ncclGetErrorString(rc);
  const char* last = ncclGetLastError(nullptr);
  if (last != nullptr && *last != '\0') text += std::string(" [last NCCL error: ") + last + "]";
  return text;
}

void check_nccl(ncclResult_t rc, const char* call, const std::source_location& where) {
  if (rc != ncclSuccess) fail_at(where, "NCCL error in ", call, ": ", nccl_error_text(rc));
}

}  // namespace
}  // namespace mt

#define MT_NCCL_CHECK(call) ::mt::check_nccl((call), #call, std::source_location::current())

namespace mt {
namespace {

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::F32: return ncclFloat32;
    case DType::BF16: return ncclBfloat16;
    case DType::I32: return ncclInt32;
  }
  MT_FAIL("no NCCL type for dtype ", static_cast<int>(t));
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Avg: return ncclAvg;
    case ReduceOp::Max: return ncclMax;
    case ReduceOp::Min: return ncclMin;
  }
  MT_FAIL("no NCCL reduction for op ", static_cast<int>(op));
}

std::size_t count_of(const Tensor& t) { return static_cast<std::size_t>(t.numel()); }

// Every rank of `comm` learns whether all of them succeeded at a step that can fail on some ranks
// only, so that none goes on into a collective the failed ones will never join. Rethrows this
// rank's error, or throws naming the step if another rank failed.
void agree_or_throw(const MpiComm& comm, std::exception_ptr local_error, const char* step) {
  int ok = local_error ? 0 : 1;
  int all_ok = 0;
  MT_MPI_CHECK(MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, comm.get()));
  if (local_error) std::rethrow_exception(local_error);
  if (all_ok == 0) MT_FAIL(step, " failed on another rank of this group (see that rank's error)");
}

// Owns the ncclComm_t. Shared with the Works so that one outliving its communicator never queries
// a destroyed comm: the communicator's destructor ends the comm and leaves the handle empty.
class NcclHandle {
 public:
  explicit NcclHandle(ncclComm_t comm) : comm_(comm) {}
  // Reached with a live comm only on failure paths (construction failed after the comm was made):
  // abort, which does not wait for the other ranks.
  ~NcclHandle() { end(true); }
  NcclHandle(const NcclHandle&) = delete;
  NcclHandle& operator=(const NcclHandle&) = delete;

  // For the owning communicator's thread, while the communicator lives.
  ncclComm_t get() const { return comm_; }

  // Set when a wait on this comm timed out: a peer may never come, so the comm must be aborted.
  void poison() { poisoned_ = true; }
  bool poisoned() const { return poisoned_; }

  // Empty while the comm is healthy (or already ended), else what went wrong. Any thread.
  std::string async_error() {
    std::lock_guard lock(mutex_);
    if (comm_ == nullptr) return "";
    ncclResult_t state = ncclSuccess;
    const ncclResult_t rc = ncclCommGetAsyncError(comm_, &state);
    if (rc != ncclSuccess) return "ncclCommGetAsyncError failed: " + nccl_error_text(rc);
    if (state == ncclSuccess || state == ncclInProgress) return "";
    return nccl_error_text(state);
  }

  // Destroys the comm (waiting for its queued work), or aborts it. Never throws.
  void end(bool abort) noexcept {
    std::lock_guard lock(mutex_);
    if (comm_ == nullptr) return;
    const ncclResult_t rc = abort ? ncclCommAbort(comm_) : ncclCommDestroy(comm_);
    if (rc != ncclSuccess) {
      std::fprintf(stderr, "%s: warning: NCCL error in %s: %s\n",
                   describe_location(std::source_location::current()).c_str(),
                   abort ? "ncclCommAbort" : "ncclCommDestroy", ncclGetErrorString(rc));
    }
    comm_ = nullptr;
  }

 private:
  std::mutex mutex_;
  ncclComm_t comm_;
  std::atomic<bool> poisoned_ = false;
};

// A queued NCCL op, done when the event recorded after it on the comm stream has completed, or
// failed when that event reports an error or the comm reports an asynchronous error.
class NcclWork final : public Work {
 public:
  NcclWork(CollectiveDesc desc, std::chrono::milliseconds default_timeout, std::shared_ptr<NcclHandle> nccl,
           Event done)
      : Work(std::move(desc), default_timeout), nccl_(std::move(nccl)), done_event_(std::move(done)) {}

  bool test() override {
    {
      std::lock_guard lock(mutex_);
      if (done_) return true;
    }
    std::string failure;
    try {
      if (done_event_.query()) {
        complete();  // the first outcome sticks, whichever thread finds it
        return true;
      }
      failure = nccl_->async_error();
      if (failure.empty()) return false;
      failure = "NCCL asynchronous error: " + failure;
    } catch (const std::exception& e) {
      failure = e.what();
    }
    // The kernels may run on until the comm is aborted: the tensors stay with the Work.
    end(std::make_exception_ptr(Error(describe() + " failed (NCCL backend): " + failure, std::source_location::current())),
        true);
    return true;
  }

  using Work::wait;
  // Polls test(): a few yields first (short ops end within microseconds), then sleeps that
  // double up to a cap, so a long wait neither spins a core nor adds much latency.
  void wait(std::chrono::milliseconds timeout) override {
    const auto start = std::chrono::steady_clock::now();
    auto pause = std::chrono::microseconds(10);
    for (int polls = 0; !test(); ++polls) {
      // Compared in milliseconds: a huge timeout (milliseconds::max()) must not overflow.
      if (std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start) >= timeout) {
        nccl_->poison();
        MT_FAIL_AS(TimeoutError, "timed out after ", timeout.count(), " ms waiting for ", describe(),
                   " (NCCL backend; the communicator is probably unusable now)");
      }
      if (polls < 64) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(pause);
        pause = std::min(pause * 2, std::chrono::microseconds(500));
      }
    }
    if (std::exception_ptr e = error()) std::rethrow_exception(e);
  }

  // Later work on `stream` waits for this op on the GPU; the host is not blocked.
  void wait_on(const Stream& stream) override {
    if (stream.device().is_cpu()) {  // nothing to order on the CPU: the host must wait
      wait();
      return;
    }
    test();  // surfaces an error that is already known
    if (std::exception_ptr e = error()) std::rethrow_exception(e);
    done_event_.block(stream);
  }

 private:
  std::shared_ptr<NcclHandle> nccl_;
  Event done_event_;
};

// A few bytes of device memory for the barrier's one-float allreduce, zeroed on the comm stream.
class BarrierScratch {
 public:
  BarrierScratch(Device device, const Stream& stream) {
    cuda::set_device(device.index);
    ptr_ = cuda::malloc_device(sizeof(float));
    if (ptr_ == nullptr) MT_FAIL_AS(OutOfMemoryError, device.str(), ": out of memory for the NCCL barrier buffer");
    MT_CUDA_CHECK(cudaMemsetAsync(ptr_, 0, sizeof(float), static_cast<cudaStream_t>(stream.handle())));
  }
  ~BarrierScratch() { cuda::free_device(ptr_); }
  BarrierScratch(const BarrierScratch&) = delete;
  BarrierScratch& operator=(const BarrierScratch&) = delete;
  float* data() const { return static_cast<float*>(ptr_); }

 private:
  void* ptr_ = nullptr;
};

class NcclCommunicator final : public Communicator {
 public:
  // `stream` is shared by a communicator and every group split from it: NCCL kernels of several
  // communicators running concurrently on one GPU may deadlock, one stream serialises them.
  NcclCommunicator(MpiComm comm, Device device, cuda::StreamHandle compute_stream, std::shared_ptr<NcclHandle> nccl,
                   std::shared_ptr<Stream> stream, CommOptions options)
      : Communicator(comm.rank(), comm.size(), options),
        mpi_(std::move(comm)),
        device_(device),
        compute_stream_(compute_stream),
        nccl_(std::move(nccl)),
        world_ranks_(mpi_.world_ranks()),
        stream_(stream ? std::move(stream) : std::make_shared<Stream>(device_)),
        scratch_(device_, *stream_) {
    int nccl_rank = -1;
    int nccl_size = -1;
    MT_NCCL_CHECK(ncclCommUserRank(nccl_->get(), &nccl_rank));
    MT_NCCL_CHECK(ncclCommCount(nccl_->get(), &nccl_size));
    MT_CHECK(nccl_rank == rank() && nccl_size == size(), "NCCL numbers this rank ", nccl_rank, " of ", nccl_size,
             ", MPI ", rank(), " of ", size());
    inputs_ready_ = cuda::create_event();
  }

  ~NcclCommunicator() override {
    // ncclCommDestroy waits for queued work and (NCCL 2.28) for the node's other ranks: safe only
    // when nothing went wrong. While an error unwinds, after a timeout or an asynchronous error, or
    // when queued work does not drain within the timeout, abort instead: the job is ending, and
    // waiting for peers that may never come would hang it before the error is even printed.
    MT_CUDA_CHECK_NOTHROW(cudaSetDevice(device_.index));
    const bool abort = std::uncaught_exceptions() > 0 || nccl_->poisoned() || !nccl_->async_error().empty() ||
                       !drained(options().timeout);
    nccl_->end(abort);
    in_flight_.clear();  // their tensors may go back to the allocator now
    if (inputs_ready_ != nullptr) cuda::destroy_event(inputs_ready_);
  }

  std::string backend_name() const override { return "nccl"; }
  // One stream, issue order (see the ordering rules above): no early receives, and a single send
  // blocks until its receive runs, so neighbours must pair their single sends and receives; a
  // batch groups them (ncclGroupStart/End), so within one, neighbours may both send first.
  // Tensors must be on device_ (launch checks).
  CommCapabilities capabilities() const override {
    return {.early_receives = false,
            .unordered_point_to_point = false,
            .grouped_point_to_point = true,
            .host_memory = MemoryAccess::None,
            .device_memory = MemoryAccess::Direct};
  }
  std::vector<int> world_ranks() const override { return world_ranks_; }

 protected:
  WorkPtr launch(CollectiveDesc desc) override {
    prune_finished();
    std::vector<const Tensor*> tensors{&desc.input, &desc.output};
    for (const PointToPoint& m : desc.messages) tensors.push_back(&m.tensor);
    for (const Tensor* t : tensors) {
      if (t->defined()) {
        MT_CHECK(t->device() == device_, desc.describe(), ": ", t->describe(), " is not on this communicator's ",
                 device_.str());
      }
    }
    if (desc.kind == CollectiveKind::Send || desc.kind == CollectiveKind::Recv) {
      // A send holds the stream until its receive runs, and both would be on this one stream.
      MT_CHECK(desc.peer != rank(), desc.describe(), ": the NCCL backend cannot send to or receive from its own rank ",
               "(it would deadlock); copy the tensor instead");
    }
    cuda::set_device(device_.index);
    if (compute_stream_ != nullptr) {
      // The op must see what the compute stream wrote before the call (and not reuse a buffer it still reads).
      cuda::record_event(inputs_ready_, compute_stream_);
      cuda::stream_wait_event(stream_->handle(), inputs_ready_);
    }
    Event done(device_);
    enqueue(desc);
    done.record(*stream_);
    auto work = std::make_shared<NcclWork>(std::move(desc), options().wait_limit(), nccl_, std::move(done));
    in_flight_.push_back(work);
    return work;
  }

  void allgather_host_bytes(const void* mine, void* all, std::size_t bytes) override {
    MT_MPI_CHECK(MPI_Allgather(mine, static_cast<int>(bytes), MPI_BYTE, all, static_cast<int>(bytes), MPI_BYTE, mpi_.get()));
  }

  std::unique_ptr<Communicator> split_by_color(int color, int key, const std::vector<int>& members) override {
    // Validate the member lists on the MPI side first, and agree on the outcome over the whole
    // parent group: a rank that failed must not leave the others inside ncclCommSplit.
    MpiComm group;
    std::exception_ptr local_error;
    try {
      group = mpi_.split_by_color(color, key, members);
    } catch (...) {
      local_error = std::current_exception();
    }
    agree_or_throw(mpi_, local_error, "split");
    cuda::set_device(device_.index);
    ncclComm_t child = nullptr;
    // Same color and key as the MPI split, so NCCL numbers the new ranks as MPI does.
    MT_NCCL_CHECK(ncclCommSplit(nccl_->get(), color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &child, nullptr));
    if (color < 0) return nullptr;
    auto handle = std::make_shared<NcclHandle>(child);
    return std::make_unique<NcclCommunicator>(std::move(group), device_, compute_stream_, std::move(handle), stream_,
                                              options());
  }

 private:
  void enqueue(const CollectiveDesc& d) {
    const Tensor& any = d.input.defined() ? d.input : d.output;
    const ncclDataType_t type = any.defined() ? nccl_type(any.dtype()) : ncclFloat32;
    const std::size_t esize = any.defined() ? dtype_size(any.dtype()) : sizeof(float);
    const ncclComm_t comm = nccl_->get();
    const auto stream = static_cast<cudaStream_t>(stream_->handle());
    // In place needs nothing special: CollectiveDesc::in_place follows NCCL's own convention
    // (same pointer; reduce_scatter output at input + rank * count; allgather input at
    // output + rank * count), so the tensors' pointers are what NCCL expects either way.
    switch (d.kind) {
      case CollectiveKind::Allreduce:
        MT_NCCL_CHECK(ncclAllReduce(d.input.data(), d.output.data(), count_of(d.output), type, nccl_op(d.op), comm,
                                    stream));
        break;
      case CollectiveKind::ReduceScatter:
        MT_NCCL_CHECK(ncclReduceScatter(d.input.data(), d.output.data(), count_of(d.output), type, nccl_op(d.op),
                                        comm, stream));
        break;
      case CollectiveKind::Allgather:
        MT_NCCL_CHECK(ncclAllGather(d.input.data(), d.output.data(), count_of(d.input), type, comm, stream));
        break;
      case CollectiveKind::Broadcast:
        MT_NCCL_CHECK(ncclBroadcast(d.input.data(), d.output.data(), count_of(d.output), type, d.root, comm, stream));
        break;
      case CollectiveKind::Alltoall: {
        // Block p of the input goes to rank p; block p of the output comes from rank p.
        const std::size_t block = count_of(d.input) / static_cast<std::size_t>(size());
        const auto* in = static_cast<const char*>(d.input.data());
        auto* out = static_cast<char*>(d.output.data());
        MT_NCCL_CHECK(ncclGroupStart());
        ncclResult_t rc = ncclSuccess;
        for (int peer = 0; peer < size() && rc == ncclSuccess; ++peer) {
          const std::size_t offset = static_cast<std::size_t>(peer) * block * esize;
          rc = ncclSend(in + offset, block, type, peer, comm, stream);
          if (rc == ncclSuccess) rc = ncclRecv(out + offset, block, type, peer, comm, stream);
        }
        const ncclResult_t end = ncclGroupEnd();  // always close the group, even after a failure
        check_nccl(rc, "ncclSend/ncclRecv (alltoall)", std::source_location::current());
        check_nccl(end, "ncclGroupEnd (alltoall)", std::source_location::current());
        break;
      }
      case CollectiveKind::Send:
        MT_NCCL_CHECK(ncclSend(d.input.data(), count_of(d.input), type, d.peer, comm, stream));
        break;
      case CollectiveKind::Recv:
        MT_NCCL_CHECK(ncclRecv(d.output.data(), count_of(d.output), type, d.peer, comm, stream));
        break;
      case CollectiveKind::Batch: {
        // One group: NCCL starts every message together, so sends to a peer that also sends first
        // do not hold the stream; per peer, sends and receives match in this order.
        std::vector<ncclDataType_t> types;  // before the group: nothing may throw inside it
        for (const PointToPoint& m : d.messages) types.push_back(nccl_type(m.tensor.dtype()));
        MT_NCCL_CHECK(ncclGroupStart());
        ncclResult_t rc = ncclSuccess;
        for (std::size_t i = 0; i < d.messages.size() && rc == ncclSuccess; ++i) {
          const PointToPoint& m = d.messages[i];
          rc = m.kind == PointToPoint::Kind::Send
                   ? ncclSend(m.tensor.data(), count_of(m.tensor), types[i], m.peer, comm, stream)
                   : ncclRecv(m.tensor.data(), count_of(m.tensor), types[i], m.peer, comm, stream);
        }
        const ncclResult_t end = ncclGroupEnd();  // always close the group, even after a failure
        check_nccl(rc, "ncclSend/ncclRecv (p2p batch)", std::source_location::current());
        check_nccl(end, "ncclGroupEnd (p2p batch)", std::source_location::current());
        break;
      }
      case CollectiveKind::Barrier:
        // Done on the GPU once every rank has joined; Work::wait() turns that into a host barrier.
        MT_NCCL_CHECK(ncclAllReduce(scratch_.data(), scratch_.data(), 1, ncclFloat32, ncclSum, comm, stream));
        break;
    }
  }

  // Polls the comm stream until it is idle or the deadline passes (no unbounded host sync).
  bool drained(std::chrono::milliseconds timeout) noexcept {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    const auto stream = static_cast<cudaStream_t>(stream_->handle());
    for (;;) {
      const cudaError_t rc = cudaStreamQuery(stream);
      if (rc == cudaSuccess) return true;
      if (rc != cudaErrorNotReady) {
        (void)cudaGetLastError();
        return false;
      }
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  // Drops the Works the GPU is done with (the caller may still hold them).
  void prune_finished() {
    std::erase_if(in_flight_, [](const std::shared_ptr<NcclWork>& w) { return w->test(); });
  }

  MpiComm mpi_;
  Device device_;
  cuda::StreamHandle compute_stream_;
  // Recorded on the compute stream (a raw handle: that stream belongs to the DeviceContext).
  cuda::EventHandle inputs_ready_ = nullptr;
  std::shared_ptr<NcclHandle> nccl_;
  std::vector<int> world_ranks_;
  std::shared_ptr<Stream> stream_;
  BarrierScratch scratch_;
  std::vector<std::shared_ptr<NcclWork>> in_flight_;
};

}  // namespace

bool nccl_compiled() { return true; }

std::string nccl_version() {
  int code = 0;
  MT_NCCL_CHECK(ncclGetVersion(&code));
  // NCCL_VERSION(X, Y, Z) is X*10000 + Y*100 + Z since 2.9, X*1000 + Y*100 + Z before.
  const int major = code >= 10000 ? code / 10000 : code / 1000;
  const int minor = code >= 10000 ? code % 10000 / 100 : code % 1000 / 100;
  const int patch = code % 100;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

std::unique_ptr<Communicator> make_nccl_communicator(MpiComm comm, Device device, cuda::StreamHandle compute_stream,
                                                     CommOptions options) {
  MT_CHECK(device.is_cuda(), "the NCCL backend runs on a CUDA device, not ", device.str());
  MT_CHECK(comm.valid(), "the NCCL backend needs a valid MPI communicator to bootstrap from");
  const int rank = comm.rank();
  const int size = comm.size();
  // Whatever can fail on one rank alone happens before ncclCommInitRank, and all ranks agree on it:
  // a rank that failed would otherwise leave the others waiting in ncclCommInitRank forever.
  ncclUniqueId id{};
  std::exception_ptr local_error;
  try {
    cuda::set_device(device.index);
    if (rank == 0) MT_NCCL_CHECK(ncclGetUniqueId(&id));
  } catch (...) {
    local_error = std::current_exception();
  }
  agree_or_throw(comm, local_error, "creating the NCCL communicator");
  MT_MPI_CHECK(MPI_Bcast(&id, static_cast<int>(sizeof(id)), MPI_BYTE, 0, comm.get()));
  ncclComm_t raw = nullptr;
  MT_NCCL_CHECK(ncclCommInitRank(&raw, size, id, rank));
  auto handle = std::make_shared<NcclHandle>(raw);
  return std::make_unique<NcclCommunicator>(std::move(comm), device, compute_stream, std::move(handle), nullptr,
                                            options);
}

}  // namespace mt
