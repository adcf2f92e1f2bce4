// The layout checks, in the order a user would fix them: the mesh against the job, tensor
// parallelism against the model's widths, then stages, batches and the schedule.
#include "parallel/layout_check.h"

#include <cctype>
#include <cstdint>
#include <numeric>
#include <sstream>
#include <string>

#include "runtime/error.h"

namespace mt {
namespace {

std::string join(const std::vector<int>& values) {
  std::ostringstream out;
  for (std::size_t i = 0; i < values.size(); ++i) out << (i ? "," : "") << values[i];
  return out.str();
}

void check_tensor_parallel(int tp, const LayoutLimits& limits) {
  MT_REQUIRE(limits.heads % tp == 0, "--tp ", tp, " does not divide the model's ", limits.heads,
             " attention heads (each tensor-parallel rank takes whole heads; use a --tp that divides ", limits.heads,
             ")");
  MT_REQUIRE(limits.mlp_width % tp == 0, "--tp ", tp, " does not divide the MLP width ", limits.mlp_width,
             " (the MLP's hidden width, split evenly over tensor-parallel ranks; use a --tp that divides ", limits.mlp_width, ")");
  MT_REQUIRE(limits.vocab_rows % tp == 0, "--tp ", tp, " does not divide the padded vocabulary of ",
             limits.vocab_rows, " rows (the embedding is split by vocabulary rows; use a --tp that divides ",
             limits.vocab_rows, ")");
}

void check_virtual_stages(const LayoutRequest& request) {
  const int v = request.virtual_stages;
  MT_REQUIRE(v >= 1, "--virtual-stages must be at least 1, got ", v);
  if (request.schedule == ScheduleKind::ZeroBubbleV) {
    MT_REQUIRE(v == 2, "--schedule zb-v runs 2 model chunks per stage (a V), not --virtual-stages ", v,
               " (leave --virtual-stages out, or use --schedule interleaved)");
  } else if (request.schedule == ScheduleKind::Interleaved) {
    MT_REQUIRE(v >= 2, "--schedule interleaved needs --virtual-stages 2 or more (model chunks per stage), got ", v,
               " (or use --schedule 1f1b)");
  } else {
    MT_REQUIRE(v == 1, "--virtual-stages ", v, " needs --schedule interleaved, not --schedule ",
               schedule_kind_name(request.schedule));
  }
}

void check_stage_split(const LayoutRequest& request, const LayoutLimits& limits) {
  const int pp = request.pp;
  MT_REQUIRE(pp <= limits.layers, "--pp ", pp, " is more than the model's ", limits.layers,
             " layers (each pipeline stage needs at least one layer; use --pp ", limits.layers, " or less)");
  const std::vector<int>& split = request.pp_layers;
  if (!split.empty()) {
    MT_REQUIRE(request.virtual_stages == 1, "--pp-layers ", join(split), " cannot be combined with --schedule ",
               schedule_kind_name(request.schedule), " (its model chunks split the layers evenly)");
    MT_REQUIRE(static_cast<int>(split.size()) == pp, "--pp-layers ", join(split), " lists ", split.size(),
               " stages but --pp is ", pp, " (give one layer count per stage)");
    for (std::size_t i = 0; i < split.size(); ++i) {
      MT_REQUIRE(split[i] >= 1, "--pp-layers ", join(split), " gives stage ", i, " ", split[i],
                 " layers; every stage needs at least one");
    }
    const std::int64_t sum = std::accumulate(split.begin(), split.end(), std::int64_t{0});
    MT_REQUIRE(sum == limits.layers, "--pp-layers ", join(split), " sums to ", sum, " layers but the model has ",
               limits.layers);
  }
  if (request.virtual_stages > 1) {
    const std::int64_t chunks = std::int64_t{pp} * request.virtual_stages;
    const std::string per_stage = request.schedule == ScheduleKind::Interleaved
                                      ? "--virtual-stages " + std::to_string(request.virtual_stages)
                                      : std::to_string(request.virtual_stages) + " chunks per stage";
    MT_REQUIRE(limits.layers % chunks == 0, "--schedule ", schedule_kind_name(request.schedule), " with --pp ", pp,
               " x ", per_stage, " = ", chunks, " model chunks needs the model's ", limits.layers,
               " layers divisible by ", chunks, " (every chunk takes the same number of layers)");
  }
}

void check_batches(const LayoutRequest& request, const LayoutLimits& limits) {
  const int dp = request.dp;
  const int pp = request.pp;
  MT_REQUIRE(limits.global_batch >= 1, "--global-batch must be at least 1, got ", limits.global_batch);
  MT_REQUIRE(limits.micro_batch >= 1, "--micro-batch must be at least 1, got ", limits.micro_batch);
  const std::int64_t per_step = std::int64_t{dp} * limits.micro_batch;
  MT_REQUIRE(limits.global_batch >= per_step && limits.global_batch % per_step == 0, "--global-batch ",
             limits.global_batch, " must be a positive multiple of --dp ", dp, " x --micro-batch ", limits.micro_batch,
             " = ", per_step, " (each data-parallel rank takes global-batch/dp sequences in micro-batches of ",
             "--micro-batch)");
  const auto micro_batches = static_cast<int>(limits.global_batch / per_step);
  const char* schedule = schedule_kind_name(request.schedule);
  if (request.schedule != ScheduleKind::GPipe) {
    MT_REQUIRE(micro_batches >= pp, "--schedule ", schedule, " needs at least --pp ", pp,
               " micro-batches per step, but --global-batch ", limits.global_batch, " / (--dp ", dp,
               " x --micro-batch ", limits.micro_batch, ") = ", micro_batches, " (raise --global-batch, ",
               limits.micro_batch > 1 ? "lower --micro-batch, " : "", "or use --schedule gpipe)");
  }
  if (request.schedule == ScheduleKind::Interleaved) {
    MT_REQUIRE(micro_batches % pp == 0, "--schedule interleaved needs the micro-batches per step, --global-batch ",
               limits.global_batch, " / (--dp ", dp, " x --micro-batch ", limits.micro_batch, ") = ", micro_batches,
               ", to be a multiple of --pp ", pp);
  }
}

// "nccl" -> "NCCL", as the backends are written in prose.
std::string upper(std::string name) {
  for (char& c : name) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return name;
}

}  // namespace

void check_layout(const LayoutRequest& request, const LayoutLimits& limits) {
  const Mesh mesh(request.mesh());  // sizes and order
  const MeshShape& s = request.mesh();
  MT_REQUIRE(s.world_size() == limits.world_size, "--dp ", s.dp, " x --tp ", s.tp,
             s.cp > 1 ? " x --cp " + std::to_string(s.cp) : std::string(), " x --pp ", s.pp, " = ",
             s.world_size(), " ranks, but the job has ", limits.world_size, " (launch with -np ", s.world_size(),
             " or change the layout)");
  check_tensor_parallel(s.tp, limits);
  check_virtual_stages(request);
  check_stage_split(request, limits);
  check_batches(request, limits);
}

bool schedule_runs(ScheduleKind schedule, int pp, std::int64_t micro_batches) {
  if (schedule == ScheduleKind::GPipe) return micro_batches >= 1;
  if (micro_batches < pp) return false;
  return schedule != ScheduleKind::Interleaved || micro_batches % pp == 0;
}

int micro_batches_per_step(const LayoutRequest& request, const LayoutLimits& limits) {
  const std::int64_t per_step = std::int64_t{request.dp} * limits.micro_batch;
  MT_CHECK(per_step > 0 && limits.global_batch % per_step == 0, "global batch ", limits.global_batch,
           " not split by dp x micro-batch ", per_step);
  return static_cast<int>(limits.global_batch / per_step);
}

void check_pipeline_backend(int pp, const CommCapabilities& caps, const std::string& backend) {
  MT_REQUIRE(pp == 1 || caps.grouped_point_to_point, "--pp ", pp, " needs batches of sends and receives that the ",
             upper(backend), " backend does not offer: use --comm-backend mpi");
}

}  // namespace mt
