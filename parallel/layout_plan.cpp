#include "parallel/layout_plan.h"

#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>

#include "parallel/layout_check.h"
#include "runtime/error.h"

namespace mt {
namespace {

// The largest of 4, 2, 1 that divides each replica's share of the global batch into enough
// micro-batches for the schedule (1 where none does, so that the batch check names only what must
// change): a default of 4 on `--pp 4` left 2 micro-batches, too few for 1F1B, where 2 would run.
int default_micro_batch(int global_batch, const LayoutRequest& r) {
  for (const int m : {4, 2}) {
    const std::int64_t per_step = std::int64_t{r.dp} * m;
    if (global_batch % per_step == 0 && schedule_runs(r.schedule, r.pp, global_batch / per_step)) return m;
  }
  return 1;
}

void check_optimizer_options(const LayoutRequest& r) {
  MT_REQUIRE(r.zero >= 0 && r.zero <= 3, "--zero must be 0, 1, 2 or 3, got ", r.zero);
  MT_REQUIRE(r.bucket_mb > 0 && std::isfinite(r.bucket_mb) && r.bucket_mb * 1024.0 * 1024.0 >= 4.0,
             "--bucket-mb must be positive, got ", r.bucket_mb);
}

// What --sequence-parallel needs (every --recompute mode runs on every layout and schedule).
void check_memory_options(const LayoutRequest& r) {
  MT_REQUIRE(!r.sequence_parallel || r.tp > 1, "--sequence-parallel splits the sequence over the tensor-parallel "
             "ranks: it needs --tp of at least 2, got ", r.tp);
}

}  // namespace

std::string LayoutRequest::describe() const {
  std::ostringstream os;
  os << "dp=" << dp << " tp=" << tp;
  if (cp > 1) os << " cp=" << cp;
  os << " pp=" << pp << " v=" << virtual_stages << " zero=" << zero
     << " micro=" << micro_batch << " schedule=" << schedule_kind_name(schedule);
  if (recompute != Recompute::None) os << " recompute=" << recompute_name(recompute);
  if (sequence_parallel) os << " sp";
  return os.str();
}

std::vector<int> plan_chunk_layers(const LayoutRequest& request, const ModelDims& model) {
  if (request.virtual_stages > 1) {
    // check_layout refuses them, in its words; here it is a caller's bug.
    MT_CHECK(request.pp_layers.empty(), "explicit stage layers with ", request.virtual_stages, " chunks per stage");
    return uniform_stage_layers(model.layers, request.pp * request.virtual_stages);
  }
  if (!request.pp_layers.empty()) return request.pp_layers;
  return balance_stages(model.layers, request.pp, model.costs);
}

LayoutPlan::LayoutPlan(LayoutRequest request, const ModelDims& model, int world_size, int global_batch)
    : layout_(std::move(request)), model_(model), global_batch_(global_batch) {
  resolve_data_parallel(layout_, world_size);
  // zb-v always runs two chunks per stage; --virtual-stages may be left at its default.
  if (layout_.schedule == ScheduleKind::ZeroBubbleV && layout_.virtual_stages == 1) layout_.virtual_stages = 2;
  if (layout_.micro_batch == 0) layout_.micro_batch = default_micro_batch(global_batch, layout_);
  LayoutLimits limits;
  limits.world_size = world_size;
  limits.layers = model.layers;
  limits.heads = model.heads;
  limits.mlp_width = model.mlp_width;
  limits.vocab_rows = model.vocab_rows;
  limits.global_batch = global_batch;
  limits.micro_batch = layout_.micro_batch;
  check_layout(layout_, limits);
  check_optimizer_options(layout_);
  check_memory_options(layout_);
  micro_batches_ = micro_batches_per_step(layout_, limits);
  chunk_layers_ = plan_chunk_layers(layout_, model);
}

LayoutPlan LayoutPlan::with_memory_options(int zero, Recompute recompute, bool sequence_parallel) const {
  LayoutPlan plan = *this;
  plan.layout_.zero = zero;
  plan.layout_.recompute = recompute;
  plan.layout_.sequence_parallel = sequence_parallel;
  check_optimizer_options(plan.layout_);
  check_memory_options(plan.layout_);
  return plan;
}

Schedule LayoutPlan::train_schedule() const {
  return make_schedule(layout_.schedule, layout_.pp, micro_batches_, layout_.virtual_stages);
}

Schedule LayoutPlan::eval_schedule() const {
  return make_forward_only_schedule(layout_.pp, micro_batches_, layout_.virtual_stages, placement());
}

ModelPartition LayoutPlan::partition(const MeshCoord& coord) const {
  const std::vector<int> first = stage_first_layers(chunk_layers_);
  ModelPartition p;
  p.tp_size = layout_.tp;
  p.tp_rank = coord.tp;
  const int last = layout_.pp * layout_.virtual_stages - 1;
  p.embedding = p.head = false;
  for (int c = 0; c < layout_.virtual_stages; ++c) {
    const int g = global_chunk_of(placement(), layout_.pp, coord.pp, c);
    const auto k = static_cast<std::size_t>(g);
    p.chunks.push_back({first[k], first[k] + chunk_layers_[k]});
    p.embedding = p.embedding || g == 0;
    p.head = p.head || g == last;
  }
  return p;
}

bool LayoutPlan::tied_across_stages() const {
  return model_.tied_embedding && local_chunk_of(placement(), layout_.pp, 0).stage !=
         local_chunk_of(placement(), layout_.pp, layout_.pp * layout_.virtual_stages - 1).stage;
}

}  // namespace mt
