// The table behind `meshbench coll`: for each collective, what a size means (nccl-tests
// conventions), its bus-bandwidth factor, which placements it has, and the data each rank puts in
// and must get back. Pure arithmetic, no MPI: the harness (coll_bench.cpp) does the rest.
//
// Sizes follow nccl-tests: the size of a row is the larger buffer of the call, so the whole input
// for reduce_scatter (count x ranks), the whole output for allgather, the whole buffer for alltoall,
// and one rank's message for sendrecv. A size is rounded down to what the op can split evenly.
// Bus bandwidth = algbw x factor (nccl-tests doc/PERFORMANCE.md): allreduce 2(n-1)/n,
// reduce_scatter, allgather and alltoall (n-1)/n, broadcast and sendrecv 1.
// defines: CollOp, Placement, CollOpInfo, CollShape, coll_ops, find_coll_op, placement_name,
//          coll_shape, fill_value, sentinel_value, expected_output, output_offset_in_place,
//          input_offset_in_place, in_place_elements
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace mt {

enum class CollOp { Allreduce, ReduceScatter, Allgather, Broadcast, Alltoall, Sendrecv };
enum class Placement { OutOfPlace, InPlace };
const char* placement_name(Placement p);  // "out-of-place", "in-place"

struct CollOpInfo {
  CollOp op;
  const char* name;          // as given to --op
  const char* factor_text;   // "2(n-1)/n"
  double (*bus_factor)(int ranks);
  bool has_out_of_place;     // our Communicator can run it with separate input and output
  bool has_in_place;         // ... and with output in the input (broadcast: in place only)
  int min_ranks;             // sendrecv needs a peer other than itself
};

// In the order `--op all` runs them.
const std::vector<CollOpInfo>& coll_ops();
const CollOpInfo* find_coll_op(std::string_view name);  // nullptr when unknown

// One row's buffers, per rank, in elements.
struct CollShape {
  std::size_t bytes = 0;       // the row's size after rounding (see above)
  std::int64_t count = 0;      // the call's count argument (per-rank block for rs/ag/alltoall)
  std::int64_t in_elems = 0;   // input buffer of one rank (out of place)
  std::int64_t out_elems = 0;  // output buffer of one rank (out of place)
};
// Rounds `bytes` down to a whole shape for `ranks`; nullopt when nothing is left.
std::optional<CollShape> coll_shape(CollOp op, std::size_t bytes, std::size_t element_size, int ranks);

// What rank `rank` puts at element i of its input: small integers in [-6, 6], so sums over up
// to 42 ranks are exact in bf16 as in fp32 and the check can compare exactly.
double fill_value(int rank, std::int64_t i);
// What output elements hold before the op, to catch ones it never wrote (not a fill value).
double sentinel_value();
// What element i of rank `rank`'s output must hold after the op (broadcast root: rank 0;
// sendrecv: from rank-1).
double expected_output(CollOp op, const CollShape& shape, int rank, int ranks, std::int64_t i);

// In place, input and output are views of one buffer of in_place_elements(): the offsets (in
// elements) where each starts. The nccl-tests convention, which the Communicator shares: the
// reduce_scatter result is the rank's block of its input, the allgather input is the rank's block
// of its output.
std::int64_t in_place_elements(const CollShape& shape);
std::int64_t input_offset_in_place(CollOp op, const CollShape& shape, int rank);
std::int64_t output_offset_in_place(CollOp op, const CollShape& shape, int rank);

}  // namespace mt
