#include "comm/op_record.h"

#include <cstring>
#include <sstream>

#include "runtime/device.h"

namespace mt {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Avg: return "avg";
    case ReduceOp::Max: return "max";
    case ReduceOp::Min: return "min";
  }
  return "?";
}

const char* collective_name(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::Allreduce: return "allreduce";
    case CollectiveKind::ReduceScatter: return "reduce_scatter";
    case CollectiveKind::Allgather: return "allgather";
    case CollectiveKind::Broadcast: return "broadcast";
    case CollectiveKind::Alltoall: return "alltoall";
    case CollectiveKind::Send: return "send";
    case CollectiveKind::Recv: return "recv";
    case CollectiveKind::Barrier: return "barrier";
    case CollectiveKind::Batch: return "p2p batch";
  }
  return "?";
}

std::string OpRecord::describe() const {
  std::ostringstream text;
  text << collective_name(kind) << " #" << sequence;
  if (kind == CollectiveKind::Batch) {
    // A report line stays readable however long the batch: the first few messages, then a count.
    constexpr std::size_t kShown = 4;
    text << " (" << format_bytes(bytes) << "):";
    for (std::size_t i = 0; i < messages.size() && i < kShown; ++i) {
      const MessageRecord& m = messages[i];
      text << (i ? ", " : " ") << (m.send ? "send " : "recv ") << dtype_name(m.dtype) << " x " << m.count
           << (m.send ? " to " : " from ") << m.peer << " tag " << m.tag;
    }
    if (messages.size() > kShown) text << ", and " << messages.size() - kShown << " more";
    if (messages.empty()) text << " empty";
    text << " in a group of " << group_size;
    return text.str();
  }
  if (has_data) text << ' ' << dtype_name(dtype) << " x " << count << " (" << format_bytes(bytes) << ')';
  if (kind == CollectiveKind::Allreduce || kind == CollectiveKind::ReduceScatter) text << ' ' << reduce_op_name(op);
  if (kind == CollectiveKind::Broadcast) text << " root " << root;
  if (kind == CollectiveKind::Send) text << " to " << peer << " tag " << tag;
  if (kind == CollectiveKind::Recv) text << " from " << peer << " tag " << tag;
  text << " in a group of " << group_size;
  return text.str();
}

std::string OpRecord::called_from() const {
  if (where.line() == 0) return "?";
  return short_source_path(where.file_name()) + ":" + std::to_string(where.line());
}

std::string short_source_path(const char* path) {
  if (path == nullptr) return "?";
  const char* end = path + std::strlen(path);
  const char* cut = end;
  int slashes = 0;
  while (cut > path) {
    if (cut[-1] == '/' && ++slashes == 2) break;
    --cut;
  }
  return std::string(cut, end);
}

}  // namespace mt
