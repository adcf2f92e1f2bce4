// AdamW over what this data-parallel rank updates, on the flat buffers of a GradReducer.
//
// Without shard (plain data parallelism): one AdamW over every param, whole tensors (views of the
// flat parameter and gradient buffers); every rank holds the same summed gradients after the
// reduction and takes the same step. With shard (ZeRO-1): per bucket, one AdamW whose slots are
// the pieces of params inside this rank's owned block of that bucket (views at the same flat
// offsets of both buffers, the decay of the param they belong to; padding gets no slot); after the
// update each bucket's parameters are all-gathered in place.
//
// With a bf16 working copy, sharded over several ranks: a bucket whose params are all
// compute_only (the GEMM weights, read only through the copy) gathers the copy itself, 2 bytes an
// element, which the AdamW pass writes for the owned block; its fp32 master is then current only
// in this rank's owned blocks until gather_master() (checkpoints read the owned pieces alone;
// anything that reads the whole master gathers it first). The other buckets gather fp32 and are
// cast after it. A store in regions (models/parameter_store.h) keeps the buckets of GEMM weights
// apart; without them most buckets mix and gather fp32.
//
// Memory bound (sharded): rank r holds m and v for exactly the param elements of its owned blocks,
// which total flat_numel/dp elements minus the padding among them, so
//   state_bytes(r) = 8 * (flat_numel/dp - padding elements owned by r) <= 8 * flat_numel/dp,
// and the ranks' state_bytes sum to exactly the unsharded 8 * (sum of param numel). With the
// buffer padded minimally (fewer than dp padding elements) that is at most 8 * ceil(N/dp) for N
// param elements. The allocator rounds every m and v tensor up to 256 bytes: at most 2 * 255
// bytes more per slot, one slot per (param, bucket) pair meeting this rank's owned blocks, so at
// most params + buckets - 1 slots (negligible at 25 MiB buckets; it dominates with tiny ones).
// defines: DistributedAdamW
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "comm/communicator.h"      // defines: Communicator
#include "parallel/grad_reducer.h"  // defines: GradReducer
#include "runtime/context.h"        // defines: DeviceContext
#include "runtime/tensor.h"         // defines: Tensor
#include "optim/adamw.h"      // defines: AdamW, AdamWConfig

namespace mt {

class DistributedAdamW {
 public:
  // A piece of a param inside one rank's owned block of one bucket: elements [offset, offset+numel)
  // of the flat buffers, which are elements [offset - param.offset, ...) of the param.
  struct Piece {
    int param = 0;
    int bucket = 0;
    std::int64_t offset = 0, numel = 0;
  };

  // dp must be the reducer's group; flat_params: fp32, shaped like the reducer's flat gradients,
  // on ctx's device. The context, the communicator and the reducer must outlive the optimizer.
  // Slot names: the param's name for a whole param, "name[a:b]" for a piece (elements a..b of it).
  // flat_compute: undefined, or the parameters' bf16 working copy shaped like flat_params
  // (ParameterStore::flat_compute_params()), current after every step().
  DistributedAdamW(DeviceContext& ctx, Communicator& dp, const GradReducer& reducer, Tensor flat_params,
                   AdamWConfig config = {}, Tensor flat_compute = {});
  DistributedAdamW(const DistributedAdamW&) = delete;
  DistributedAdamW& operator=(const DistributedAdamW&) = delete;

  // Sum of squares of the reduced gradients this rank owns (its block of each bucket, whether
  // sharded or not, so that over the dp group every element is counted once), each param's piece
  // weighted by its norm_weight; padding is not counted. The caller allreduces it over the whole
  // world and takes the sqrt for the global norm. Deterministic: the same gradients give the same
  // bits. Into out (fp32 [1] on the device) with no host wait, or
  // read back (a wait).
  void owned_grad_sum_of_squares(Tensor& out) const;
  double owned_grad_sum_of_squares() const;

  // One AdamW step on what this rank updates (grad_scale as AdamW::step); with shard, then
  // all-gathers each bucket's parameters in place, bucket by bucket as each bucket's update is
  // queued (so the gathers overlap the remaining updates), and waits for all (Work::wait_on the
  // compute stream). Call after GradReducer::finish(). The bf16 copy, if any, is written in the
  // AdamW pass where this rank updates every element (unsharded, or dp 1) and for the buckets that
  // gather it; with shard over dp > 1 the buckets gathered in fp32 are cast after their gathers.
  void step(float lr, float grad_scale = 1.0f);
  // Host time the last step() spent waiting for its all-gathers (0 without shard).
  double last_gather_wait_seconds() const { return gather_wait_s_; }
  // Bytes of the buckets the last step() all-gathered (whole buckets; 0 without shard or on one rank).
  std::int64_t last_gather_bytes() const { return gather_bytes_; }
  // Whether bucket b (reduction order) gathers the bf16 copy instead of fp32.
  bool gathers_compute(int bucket) const { return gathers_compute_.at(static_cast<std::size_t>(bucket)) != 0; }
  // Makes the whole fp32 master current where a step gathered only the copy (collective over dp:
  // every rank calls it at the same point; nothing to do otherwise). master_current(): no need.
  void gather_master();
  bool master_current() const { return !master_stale_; }
  // The whole master was set outside a step, the same on every rank (initialization, a load).
  void master_written() { master_stale_ = false; }

  bool sharded() const { return shard_; }
  // Bytes of m and v held by this rank (8 per element updated here; without the allocator's rounding).
  std::int64_t state_bytes() const;
  // Elements this rank updates (state_bytes() / 8).
  std::int64_t updated_numel() const;
  std::int64_t step_count() const;
  void set_step_count(std::int64_t steps);  // on every underlying AdamW (checkpoint restore)

  // The underlying optimizers: one without shard; one per bucket (in reduction order) with shard,
  // possibly with no slots. All step together, so their step counts agree.
  std::span<AdamW> optimizers() { return optimizers_; }
  std::span<const AdamW> optimizers() const { return optimizers_; }
  // This rank's owned pieces of params, by bucket in reduction order, ascending within a bucket.
  const std::vector<Piece>& owned_pieces() const { return pieces_; }
  // AdamW's first (m) or second (v) moment of param elements [first, first + numel), as a view of
  // this rank's state: saving a checkpoint reads it, restoring one copies into it. Without shard
  // every element is held here; with shard the range must lie inside one owned piece (Error
  // otherwise).
  using Moment = AdamMoment;
  Tensor moment(Moment which, int param, std::int64_t first, std::int64_t numel) const;
  const Tensor& flat_params() const { return flat_params_; }

 private:
  struct NormRange {
    std::int64_t offset = 0, numel = 0;
    double weight = 1.0;
  };

  DeviceContext* ctx_;
  Communicator* dp_;
  const GradReducer* reducer_;
  Tensor flat_params_;
  Tensor flat_compute_;  // undefined without a bf16 copy
  bool shard_ = false;
  std::vector<Piece> pieces_;
  std::vector<NormRange> norm_ranges_;  // owned pieces merged where contiguous with equal weight
  std::vector<AdamW> optimizers_;
  std::vector<std::size_t> slot_of_piece_;  // with shard: piece i is slot slot_of_piece_[i] of its bucket's AdamW
  std::vector<char> gathers_compute_;        // per bucket
  bool master_stale_ = false;                // a step gathered some buckets as the copy alone
  double gather_wait_s_ = 0.0;
  std::int64_t gather_bytes_ = 0;

  WorkPtr gather_bucket(int bucket, const Tensor& flat);  // this rank's block of it into the whole, in place
};

}  // namespace mt
