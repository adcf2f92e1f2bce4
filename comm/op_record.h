// What an operation was, without its tensors: small enough to keep for every op the watchdog
// tracks and for a rank's recent history, and the one place that turns an op into words.
// defines: OpRecord, MessageRecord, short_source_path
#pragma once

#include <cstddef>
#include <cstdint>
#include <source_location>
#include <string>
#include <vector>

#include "runtime/dtype.h"

namespace mt {

enum class ReduceOp : std::uint8_t { Sum, Avg, Max, Min };
// Batch: sends and receives started together and completed as one op (Communicator::batch_async).
// New kinds go last: the numbers travel between ranks (desync fingerprints, peer status lines).
enum class CollectiveKind : std::uint8_t { Allreduce, ReduceScatter, Allgather, Broadcast, Alltoall, Send, Recv, Barrier, Batch };
const char* reduce_op_name(ReduceOp op);
const char* collective_name(CollectiveKind kind);
// Ops between two ranks (a batch: between this rank and each of its peers), numbered apart from the
// collectives and left out of the group-wide checks that need every member.
inline bool is_point_to_point(CollectiveKind kind) {
  return kind == CollectiveKind::Send || kind == CollectiveKind::Recv || kind == CollectiveKind::Batch;
}

// One message of a batch, as reports name it.
struct MessageRecord {
  bool send = true;  // else a receive
  DType dtype = DType::F32;
  std::int64_t count = 0;
  int peer = -1;  // rank in the op's group
  int tag = 0;
};

struct OpRecord {
  CollectiveKind kind = CollectiveKind::Barrier;
  std::uint64_t sequence = 0;
  bool has_data = false;
  DType dtype = DType::F32;
  std::int64_t count = 0;  // elements of the input (the output where there is no input)
  std::size_t bytes = 0;   // of the larger of input and output
  ReduceOp op = ReduceOp::Sum;
  int root = 0;
  int peer = -1;
  int tag = 0;
  int group_size = 1;
  bool in_place = false;  // CollectiveDesc::in_place
  std::vector<MessageRecord> messages;  // a batch's, in issue order
  std::source_location where;  // the caller of the Communicator method

  // "allreduce #12 fp32 x 1024 (4.0 KiB) sum in a group of 4", or for a batch (the first few
  // messages): "p2p batch #7 (32.0 KiB): send fp32 x 4096 to 1 tag 3, recv fp32 x 4096 from 1 tag 8 in a group of 2"
  std::string describe() const;
  std::string called_from() const;  // "parallel/grad_reducer.cpp:88"
};

// The last two components of a source path ("comm/communicator.cpp"): enough to find it, short to read.
std::string short_source_path(const char* path);

}  // namespace mt
