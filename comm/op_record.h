// What an operation was, without its tensors: small enough to keep for every op the watchdog
// tracks and for a rank's recent history, and the one place that turns an op into words.
// defines: OpRecord, short_source_path
#pragma once

#include <cstddef>
#include <cstdint>
#include <source_location>
#include <string>

#include "runtime/dtype.h"

namespace mt {

enum class ReduceOp : std::uint8_t { Sum, Avg, Max, Min };
enum class CollectiveKind : std::uint8_t { Allreduce, ReduceScatter, Allgather, Broadcast, Alltoall, Send, Recv, Barrier };
const char* reduce_op_name(ReduceOp op);
const char* collective_name(CollectiveKind kind);
inline bool is_point_to_point(CollectiveKind kind) { return kind == CollectiveKind::Send || kind == CollectiveKind::Recv; }

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
  std::source_location where;  // the caller of the Communicator method

  std::string describe() const;  // "allreduce #12 fp32 x 1024 (4.0 KiB) sum in a group of 4"
  std::string called_from() const;  // "parallel/grad_reducer.cpp:88"
};

// The last two components of a source path ("comm/communicator.cpp"): enough to find it, short to read.
std::string short_source_path(const char* path);

}  // namespace mt
