// The one communicator interface every layer above uses; MPI and NCCL implement it.
// Every operation has an async form returning a Work; the plain form waits for it.
// defines: ReduceOp, CollectiveKind, CollectiveDesc, Work, WorkPtr, CommOptions, Communicator
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/stream.h"
#include "runtime/tensor.h"

namespace mt {

enum class ReduceOp : std::uint8_t { Sum, Avg, Max, Min };
enum class CollectiveKind : std::uint8_t { Allreduce, ReduceScatter, Allgather, Broadcast, Alltoall, Send, Recv, Barrier };
const char* reduce_op_name(ReduceOp op);
const char* collective_name(CollectiveKind kind);

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

// One operation, checked and numbered before a backend sees it.
struct CollectiveDesc {
  CollectiveKind kind = CollectiveKind::Barrier;
  Tensor input;   // the data sent or reduced (broadcast: the tensor on every rank)
  Tensor output;  // where the result lands (same as input when in place)
  ReduceOp op = ReduceOp::Sum;
  int root = 0;   // broadcast
  int peer = -1;  // send/recv: rank in this communicator
  int tag = 0;
  std::uint64_t sequence = 0;  // collectives and point-to-point ops are numbered separately
  int group_size = 1;
  int group_rank = 0;

  // In place: output is input; for reduce_scatter input holds output at this rank's block, for
  // allgather output holds input at this rank's block (the nccl-tests convention). After an in-place
  // reduce_scatter only this rank's block is defined: the other blocks of the input may be overwritten.
  bool in_place() const;
  std::size_t bytes() const;  // of the larger of input and output
  std::string describe() const;  // "allreduce #12 fp32 x 1024 (4.0 KiB) sum"
};

// A started operation. Backends complete it from their own thread (MPI) or back it by an event (NCCL).
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
  const CollectiveDesc& desc() const { return desc_; }

  // Called by the backend once, when the op ends.
  void complete(std::exception_ptr error = nullptr);

 protected:
  CollectiveDesc desc_;
  std::chrono::milliseconds default_timeout_;
  mutable std::mutex mutex_;
  std::condition_variable done_cv_;
  bool done_ = false;
  std::exception_ptr error_;
};
using WorkPtr = std::shared_ptr<Work>;

struct CommOptions {
  std::chrono::milliseconds timeout{std::chrono::minutes(10)};  // default for Work::wait()
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
  virtual std::string backend_name() const = 0;
  // Members in the numbering of the world communicator.
  virtual std::vector<int> world_ranks() const = 0;

  WorkPtr allreduce_async(const Tensor& input, const Tensor& output, AllreduceOptions opts = {});
  WorkPtr reduce_scatter_async(const Tensor& input, const Tensor& output, ReduceScatterOptions opts = {});
  WorkPtr allgather_async(const Tensor& input, const Tensor& output);
  WorkPtr broadcast_async(const Tensor& tensor, BroadcastOptions opts = {});
  WorkPtr alltoall_async(const Tensor& input, const Tensor& output);
  WorkPtr send_async(const Tensor& tensor, int peer, PointToPointOptions opts = {});
  WorkPtr recv_async(const Tensor& tensor, int peer, PointToPointOptions opts = {});
  WorkPtr barrier_async();

  void allreduce(const Tensor& tensor, AllreduceOptions opts = {}) { allreduce_async(tensor, tensor, opts)->wait(); }
  void reduce_scatter(const Tensor& input, const Tensor& output, ReduceScatterOptions opts = {}) {
    reduce_scatter_async(input, output, opts)->wait();
  }
  void allgather(const Tensor& input, const Tensor& output) { allgather_async(input, output)->wait(); }
  void broadcast(const Tensor& tensor, BroadcastOptions opts = {}) { broadcast_async(tensor, opts)->wait(); }
  void alltoall(const Tensor& input, const Tensor& output) { alltoall_async(input, output)->wait(); }
  void send(const Tensor& tensor, int peer, PointToPointOptions opts = {}) { send_async(tensor, peer, opts)->wait(); }
  void recv(const Tensor& tensor, int peer, PointToPointOptions opts = {}) { recv_async(tensor, peer, opts)->wait(); }
  void barrier() { barrier_async()->wait(); }

  // Collective over this communicator. Each rank names the members (ranks of this communicator,
  // in the order they get in the new one) of the group it belongs to; groups must be disjoint and
  // every member must name the same list. A rank passing an empty list joins no group and gets
  // nullptr. A list that disagrees with another member's is an error on every member.
  std::unique_ptr<Communicator> split(const std::vector<int>& members);

  std::uint64_t collectives_issued() const { return collective_sequence_; }

 protected:
  Communicator(int rank, int size, CommOptions options) : rank_(rank), size_(size), options_(options) {}
  // The backend's half of every op: the descriptor is already validated and numbered.
  virtual WorkPtr launch(CollectiveDesc desc) = 0;
  // Like MPI_Comm_split: color < 0 joins no group; key orders the new ranks.
  virtual std::unique_ptr<Communicator> split_by_color(int color, int key, const std::vector<int>& members) = 0;

 private:
  WorkPtr submit(CollectiveDesc desc);

  int rank_;
  int size_;
  CommOptions options_;
  std::uint64_t collective_sequence_ = 0;
  std::uint64_t p2p_sequence_ = 0;
};

}  // namespace mt
