// The one loop of `meshbench coll` shared by every collective: buffers laid out for a placement,
// filled with known values, an optional check of one op against the values computed on the host,
// then warm-up and timing of our Communicator and of the raw library on the same data.
//
// Timing, as nccl-tests reports it: a barrier, `iters` ops, and the mean time per op of the
// slowest rank (max over ranks of each rank's mean). With rounds > 1 that is repeated, alternating
// ours and raw so that a change in the machine's load hits both alike, and each column keeps its
// fastest round. Our ops go through the async API; with in_flight N, N ops are started and then all
// waited for (N = 1: each op is waited for before the next starts). The raw side is waited for in
// the same batches (raw MPI calls block, so they run one at a time whatever N is).
// defines: CollSettings, CollTiming, CollRow, CollRunner
#pragma once

#include <array>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bench/coll_ops.h"
#include "bench/raw_coll.h"
#include "comm/communicator.h"
#include "comm/mpi_runtime.h"
#include "runtime/context.h"

namespace mt {

struct CollSettings {
  DType dtype = DType::F32;
  int in_flight = 1;
  int rounds = 1;  // each column keeps its fastest round
  bool check = false;
  bool out_of_place = true;
  bool in_place = true;
};

struct CollTiming {
  bool ran = false;
  double seconds = 0;  // mean per op of the slowest rank
};

struct CollRow {
  CollShape shape;
  int warmup = 0;
  int iters = 0;
  std::array<CollTiming, 2> ours;  // by Placement
  CollTiming raw;
  Placement raw_placement = Placement::OutOfPlace;
};

class CollRunner {
 public:
  // Collective over MPI_COMM_WORLD (a private dup for barriers and timings).
  CollRunner(Communicator& comm, DeviceContext& ctx, RawColl& raw, CollSettings settings);

  // The placements of ours that run for `op`, the raw side's (nullopt: none runs).
  bool runs(const CollOpInfo& op, Placement p) const;
  std::optional<Placement> raw_placement(const CollOpInfo& op) const;

  // Collective: every rank calls it with the same arguments. A failed check is a JobError on every
  // rank naming the op, size, rank and first bad element.
  CollRow run(const CollOpInfo& op, const CollShape& shape, int warmup, int iters);

 private:
  struct Buffers;
  Buffers make_buffers(CollOp op, const CollShape& shape, Placement p, DeviceContext& ctx) const;
  void fill(const Buffers& b, CollOp op, const CollShape& shape, Placement p, DeviceContext& ctx) const;
  std::optional<std::string> check(const Tensor& output, const CollOpInfo& op, const CollShape& shape, Placement p,
                                   const std::string& who) const;
  void start_ours(CollOp op, const Buffers& b, std::vector<WorkPtr>& works);
  double timed(int warmup, int iters, const std::function<void()>& start, const std::function<void()>& wait_all);
  void agree(const std::optional<std::string>& error);

  Communicator& comm_;
  DeviceContext& ctx_;
  RawColl& raw_;
  CollSettings settings_;
  MpiComm sync_;
  std::unique_ptr<DeviceContext> host_ctx_;  // host copies for a raw side that needs them
};

}  // namespace mt
