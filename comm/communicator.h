// The one communicator interface every layer above uses; MPI and NCCL implement it.
// Every operation has an async form returning a Work; the plain form waits for it.
// Every op is numbered, registered with the job's watchdog (a deadline: --comm-timeout) and, with
// --debug-collectives, checked against the other members' before it starts.
// defines: PointToPoint, CollectiveDesc, Work, WorkPtr, CommOptions, Communicator (CommCapabilities: comm/comm_capabilities.h)
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <source_location>
#include <string>
#include <utility>
#include <vector>

#include "comm/comm_capabilities.h"
#include "comm/op_record.h"
#include "runtime/stream.h"
#include "runtime/tensor.h"

namespace mt {

class Watchdog;
struct GroupProgress;
using Here = std::source_location;

struct AllreduceOptions {
  ReduceOp op = ReduceOp::Sum;
};
struct ReduceScatterOptions {
  ReduceOp op = ReduceOp::Sum;
};
struct BroadcastOptions {
  int root = 0;  // rank in this communicator
};
struct PointToPointOptions {
  int tag = 0;
};

// One message of a batch (Communicator::batch_async).
struct PointToPoint {
  enum class Kind : std::uint8_t { Send, Recv };
  Kind kind = Kind::Send;
  Tensor tensor;  // sent from / received into
  int peer = -1;  // rank in this communicator, not this rank
  int tag = 0;

  static PointToPoint send(Tensor tensor, int peer, int tag = 0) { return {Kind::Send, std::move(tensor), peer, tag}; }
  static PointToPoint recv(Tensor tensor, int peer, int tag = 0) { return {Kind::Recv, std::move(tensor), peer, tag}; }
};

// One operation, checked and numbered before a backend sees it.
struct CollectiveDesc {
  CollectiveKind kind = CollectiveKind::Barrier;
  Tensor input;   // the data sent or reduced (broadcast: the tensor on every rank)
  Tensor output;  // where the result lands (same as input when in place)
  ReduceOp op = ReduceOp::Sum;
  int root = 0;   // broadcast
  int peer = -1;  // send/recv: rank in this communicator
  int tag = 0;
  std::vector<PointToPoint> messages;  // a batch's, in issue order (input and output stay empty)
  std::uint64_t sequence = 0;  // collectives and point-to-point ops are numbered separately
  int group_size = 1;
  int group_rank = 0;
  std::source_location where;  // the caller of the Communicator method

  // In place: output is input; for reduce_scatter input holds output at this rank's block, for
  // allgather output holds input at this rank's block (the nccl-tests convention). After an in-place
  // reduce_scatter only this rank's block is defined: the other blocks of the input may be overwritten.
  bool in_place() const;
  std::size_t bytes() const;  // of the larger of input and output; a batch: of all its messages
  std::string describe() const;  // "allreduce #12 fp32 x 1024 (4.0 KiB) sum in a group of 4"
  OpRecord record() const;
};

// A started operation. Backends complete it from their own thread (MPI) or back it by an event (NCCL).
// It holds the op's tensors only while the op runs: when it ends they are dropped before any waiter
// wakes, so once wait() returns the caller's references are the last ones (a Work kept in a list of
// pending ops, or by a backend's thread, keeps no memory from the allocator's cache). What the op
// was stays, as its record, for reports and error messages.
class Work {
 public:
  Work(CollectiveDesc desc, std::chrono::milliseconds default_timeout);
  virtual ~Work() = default;
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;

  // Finished, successfully or not? Never blocks.
  virtual bool test();
  // Blocks the host until finished; rethrows the error it ended with, or throws TimeoutError.
  void wait() { wait(default_timeout_); }
  virtual void wait(std::chrono::milliseconds timeout);
  // Orders later work on `stream` after this op; blocks the host only where the backend must (MPI).
  virtual void wait_on(const Stream& stream) { (void)stream; wait(); }
  std::exception_ptr error() const;
  // Fixed at the start, so any thread may read it, before or after the op ends.
  const OpRecord& record() const { return record_; }
  std::string describe() const { return record_.describe(); }

  // Called by the backend when the op ends (on any thread); the first outcome sticks. Drops the
  // op's tensors, then wakes the waiters.
  void complete(std::exception_ptr error = nullptr) { end(std::move(error), false); }

 protected:
  // `keep_tensors`: for a failed op whose device may still touch the memory (NCCL kernels run
  // until the communicator is aborted); they go with the Work then.
  void end(std::exception_ptr error, bool keep_tensors);

  const OpRecord record_;
  std::chrono::milliseconds default_timeout_;
  mutable std::mutex mutex_;
  std::condition_variable done_cv_;
  bool done_ = false;
  std::exception_ptr error_;

 private:
  CollectiveDesc desc_;  // its tensors keep the memory alive while the op runs (under mutex_)
};
using WorkPtr = std::shared_ptr<Work>;

struct CommOptions {
  std::chrono::milliseconds timeout{std::chrono::minutes(10)};  // every op's deadline (--comm-timeout)
  // Watches every op's deadline and ends the job with a report when one passes; shared by a
  // communicator and everything split from it. Without one, Work::wait() throws TimeoutError.
  std::shared_ptr<Watchdog> watchdog{};
  bool debug_collectives = false;  // cross-check each collective's fingerprint first (--debug-collectives)

  // How long Work::wait() blocks by default: with a watchdog, past the deadline by the time the
  // watchdog needs to ask the peers and end the job, so that its report comes first.
  std::chrono::milliseconds wait_limit() const;
};

// Submit from one thread per communicator: operations are numbered and started in submission
// order, and every rank must submit its collectives in the same order.
class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  const CommOptions& options() const { return options_; }
  // For messages and reports only: behaviour follows capabilities(), never the name.
  virtual std::string backend_name() const = 0;
  // What this backend can do (comm/comm_capabilities.h); the same for every group split from it.
  virtual CommCapabilities capabilities() const = 0;
  // Members in the numbering of the world communicator.
  virtual std::vector<int> world_ranks() const = 0;

  // `where` (the caller's place, filled in by default) names the op in watchdog and desync reports.
  WorkPtr allreduce_async(const Tensor& input, const Tensor& output, AllreduceOptions opts = {}, Here where = Here::current());
  WorkPtr reduce_scatter_async(const Tensor& input, const Tensor& output, ReduceScatterOptions opts = {},
                               Here where = Here::current());
  WorkPtr allgather_async(const Tensor& input, const Tensor& output, Here where = Here::current());
  WorkPtr broadcast_async(const Tensor& tensor, BroadcastOptions opts = {}, Here where = Here::current());
  WorkPtr alltoall_async(const Tensor& input, const Tensor& output, Here where = Here::current());
  WorkPtr send_async(const Tensor& tensor, int peer, PointToPointOptions opts = {}, Here where = Here::current());
  WorkPtr recv_async(const Tensor& tensor, int peer, PointToPointOptions opts = {}, Here where = Here::current());
  WorkPtr barrier_async(Here where = Here::current());
  // Starts every message of the batch together, in the given order, and completes them as one op:
  // neighbours may each send to the other before receiving within one batch without deadlock
  // (CommCapabilities::grouped_point_to_point). Between two ranks, sends are matched to receives
  // in issue order (and by tag on MPI), so both ends must list the messages they exchange in the
  // same order per peer. An empty batch is a Work already complete (not numbered, not watched).
  // Every message is checked first (tensor, peer in the group and not this rank, tag, one device
  // for the whole batch, a receive overlapping no other message's tensor). One numbered op: the
  // watchdog and Work::wait name it with its messages. Like send and recv it is not part of
  // --debug-collectives, which compares ops every member calls.
  // NCCL: ncclGroupStart, the ncclSend/ncclRecv calls, ncclGroupEnd on the comm stream, then an
  // event (wait_on orders compute after the receives without blocking the host). MPI: the
  // MPI_Isend/MPI_Irecv calls in order on the engine thread, device tensors staged.
  WorkPtr batch_async(std::vector<PointToPoint> messages, Here where = Here::current());

  void allreduce(const Tensor& tensor, AllreduceOptions opts = {}, Here where = Here::current()) {
    allreduce_async(tensor, tensor, opts, where)->wait();
  }
  void reduce_scatter(const Tensor& input, const Tensor& output, ReduceScatterOptions opts = {},
                      Here where = Here::current()) {
    reduce_scatter_async(input, output, opts, where)->wait();
  }
  void allgather(const Tensor& input, const Tensor& output, Here where = Here::current()) {
    allgather_async(input, output, where)->wait();
  }
  void broadcast(const Tensor& tensor, BroadcastOptions opts = {}, Here where = Here::current()) {
    broadcast_async(tensor, opts, where)->wait();
  }
  void alltoall(const Tensor& input, const Tensor& output, Here where = Here::current()) {
    alltoall_async(input, output, where)->wait();
  }
  void send(const Tensor& tensor, int peer, PointToPointOptions opts = {}, Here where = Here::current()) {
    send_async(tensor, peer, opts, where)->wait();
  }
  void recv(const Tensor& tensor, int peer, PointToPointOptions opts = {}, Here where = Here::current()) {
    recv_async(tensor, peer, opts, where)->wait();
  }
  void barrier(Here where = Here::current()) { barrier_async(where)->wait(); }
  void batch(std::vector<PointToPoint> messages, Here where = Here::current()) {
    batch_async(std::move(messages), where)->wait();
  }

  // Collective over this communicator. Each rank names the members (ranks of this communicator,
  // in the order they get in the new one) of the group it belongs to; groups must be disjoint and
  // every member must name the same list. A rank passing an empty list joins no group and gets
  // nullptr. A list that disagrees with another member's is an error on every member.
  // `label` names the new group in reports ("dp", "tp"); by default "<this label>/split".
  std::unique_ptr<Communicator> split(const std::vector<int>& members, std::string label = "");

  const std::string& label() const { return label_; }  // "world" for the world communicator

  std::uint64_t collectives_issued() const { return collective_sequence_; }

 protected:
  Communicator(int rank, int size, CommOptions options) : rank_(rank), size_(size), options_(std::move(options)) {}
  // The backend's half of every op: the descriptor is already validated and numbered.
  virtual WorkPtr launch(CollectiveDesc desc) = 0;
  // Like MPI_Comm_split: color < 0 joins no group; key orders the new ranks.
  virtual std::unique_ptr<Communicator> split_by_color(int color, int key, const std::vector<int>& members) = 0;
  // Blocking allgather of `bytes` host bytes per member, outside the numbered ops (the desync
  // check); called from the submitting thread.
  virtual void allgather_host_bytes(const void* mine, void* all, std::size_t bytes) = 0;

 private:
  WorkPtr submit(CollectiveDesc desc);
  void check_batch(const CollectiveDesc& desc) const;
  void check_in_step(const CollectiveDesc& desc);

  int rank_;
  int size_;
  CommOptions options_;
  std::string label_ = "world";
  std::shared_ptr<GroupProgress> progress_;  // this group's entry in the watchdog, made on first use
  std::uint64_t collective_sequence_ = 0;
  std::uint64_t p2p_sequence_ = 0;
};

}  // namespace mt
