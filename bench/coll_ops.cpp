#include "bench/coll_ops.h"

#include <algorithm>

namespace mt {
namespace {

double factor_allreduce(int n) { return 2.0 * (n - 1) / n; }
double factor_n_minus_1(int n) { return static_cast<double>(n - 1) / n; }
double factor_one(int) { return 1.0; }

}  // namespace

const char* placement_name(Placement p) { return p == Placement::InPlace ? "in-place" : "out-of-place"; }

const std::vector<CollOpInfo>& coll_ops() {
  // Broadcast takes one tensor (in place only); alltoall and sendrecv have no in-place form here.
  static const std::vector<CollOpInfo> ops = {
      {CollOp::Allreduce, "allreduce", "2(n-1)/n", factor_allreduce, true, true, 1},
      {CollOp::ReduceScatter, "reduce_scatter", "(n-1)/n", factor_n_minus_1, true, true, 1},
      {CollOp::Allgather, "allgather", "(n-1)/n", factor_n_minus_1, true, true, 1},
      {CollOp::Broadcast, "broadcast", "1", factor_one, false, true, 1},
      {CollOp::Alltoall, "alltoall", "(n-1)/n", factor_n_minus_1, true, false, 1},
      {CollOp::Sendrecv, "sendrecv", "1", factor_one, true, false, 2},
  };
  return ops;
}

const CollOpInfo* find_coll_op(std::string_view name) {
  for (const CollOpInfo& info : coll_ops()) {
    if (name == info.name) return &info;
  }
  return nullptr;
}

std::optional<CollShape> coll_shape(CollOp op, std::size_t bytes, std::size_t element_size, int ranks) {
  const auto n = static_cast<std::int64_t>(ranks);
  const auto elems = static_cast<std::int64_t>(bytes / element_size);
  CollShape s;
  switch (op) {
    case CollOp::Allreduce:
    case CollOp::Broadcast:
    case CollOp::Sendrecv:
      s.count = elems;
      s.in_elems = s.out_elems = elems;
      break;
    case CollOp::ReduceScatter:
      s.count = elems / n;
      s.in_elems = s.count * n;
      s.out_elems = s.count;
      break;
    case CollOp::Allgather:
      s.count = elems / n;
      s.in_elems = s.count;
      s.out_elems = s.count * n;
      break;
    case CollOp::Alltoall:
      s.count = elems / n;
      s.in_elems = s.out_elems = s.count * n;
      break;
  }
  if (s.count == 0) return std::nullopt;
  s.bytes = static_cast<std::size_t>(std::max(s.in_elems, s.out_elems)) * element_size;
  return s;
}

double fill_value(int rank, std::int64_t i) {
  // A cheap hash of (rank, i): neighbouring elements and ranks differ, so a block landing in the
  // wrong place shows.
  const std::uint64_t h = static_cast<std::uint64_t>(i + 1) * 2654435761ull + static_cast<std::uint64_t>(rank + 1) * 97531ull;
  return static_cast<double>(static_cast<int>((h >> 3) % 13) - 6);
}

double sentinel_value() { return -1024.0; }

double expected_output(CollOp op, const CollShape& shape, int rank, int ranks, std::int64_t i) {
  switch (op) {
    case CollOp::Allreduce: {
      double sum = 0;
      for (int r = 0; r < ranks; ++r) sum += fill_value(r, i);
      return sum;
    }
    case CollOp::ReduceScatter: {
      double sum = 0;
      for (int r = 0; r < ranks; ++r) sum += fill_value(r, rank * shape.count + i);
      return sum;
    }
    case CollOp::Allgather: return fill_value(static_cast<int>(i / shape.count), i % shape.count);
    case CollOp::Broadcast: return fill_value(0, i);
    case CollOp::Alltoall: {
      // Block s of my output is block `rank` of rank s's input.
      const auto source = static_cast<int>(i / shape.count);
      return fill_value(source, rank * shape.count + i % shape.count);
    }
    case CollOp::Sendrecv: return fill_value((rank + ranks - 1) % ranks, i);
  }
  return 0;
}

std::int64_t in_place_elements(const CollShape& shape) { return std::max(shape.in_elems, shape.out_elems); }

std::int64_t input_offset_in_place(CollOp op, const CollShape& shape, int rank) {
  return op == CollOp::Allgather ? rank * shape.count : 0;
}

std::int64_t output_offset_in_place(CollOp op, const CollShape& shape, int rank) {
  return op == CollOp::ReduceScatter ? rank * shape.count : 0;
}

}  // namespace mt
