// Running the configurations: each step of each config after a world barrier, then the ranks'
// numbers gathered into one PipelineResult, next to the schedule's own models.
#include "bench/pipeline_run.h"

#include <algorithm>
#include <memory>
#include <numeric>

#include "bench/bench_env.h"
#include "bench/step_timer.h"
#include "comm/mpi_runtime.h"
#include "parallel/pipeline_executor.h"
#include "parallel/schedule.h"

namespace mt {
namespace {

std::vector<double> all_gather(double mine) {
  int size = 0;
  MT_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
  std::vector<double> all(static_cast<std::size_t>(size));
  MT_MPI_CHECK(MPI_Allgather(&mine, 1, MPI_DOUBLE, all.data(), 1, MPI_DOUBLE, MPI_COMM_WORLD));
  return all;
}

double mean(const std::vector<double>& v) {
  return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

// What this rank saw over the timed steps of one config: its own means and its runner's calls.
struct RankSteps {
  StepTimes slowest;  // the slowest rank's step
  double own = 0, compute = 0, wait = 0;
  double forward_calls_s = 0, backward_calls_s = 0, weight_calls_s = 0;  // summed over the timed steps
  int peak_slots = 0;
};

// Every rank of the world runs the config on its pipeline (pp), each step after a world barrier.
RankSteps run_steps(const PipelineConfig& c, Communicator& world, Communicator& pp, PipelineExecutor& executor,
                    TimedWork& work, DeviceContext& ctx, const PipelineRunSettings& rs) {
  SyntheticStage runner(ctx, c.schedule, pp.rank(), work, rs.forward_s / c.v(), rs.activation_bytes, rs.weight_share);
  RankSteps t;
  double forward_before = 0, backward_before = 0, weight_before = 0;
  for (int step = 0; step < rs.warmup + rs.steps; ++step) {
    if (step == rs.warmup) {
      forward_before = runner.forward_s_total();
      backward_before = runner.backward_s_total();
      weight_before = runner.weight_s_total();
    }
    runner.begin_step(step);
    ExecutorStats stats;
    const double mine = time_after_barrier(world, [&] { stats = executor.run(c.schedule, runner); });
    const double slowest = slowest_rank_seconds(MPI_COMM_WORLD, mine);
    if (step < rs.warmup) continue;
    t.slowest.add(slowest, rs.steps);
    t.own += mine / rs.steps;
    t.compute += stats.compute_s / rs.steps;
    t.wait += stats.receive_wait_s / rs.steps;
  }
  t.forward_calls_s = runner.forward_s_total() - forward_before;
  t.backward_calls_s = runner.backward_s_total() - backward_before;
  t.weight_calls_s = runner.weight_s_total() - weight_before;
  t.peak_slots = runner.peak_slots();
  return t;
}

// Collective: the ranks' steps gathered into the row's numbers, next to the schedule's models.
PipelineResult summarise(const PipelineConfig& c, const RankSteps& t, const PipelineRunSettings& rs) {
  const int steps = rs.steps;
  PipelineResult r;
  r.step_s = t.slowest.mean_s;
  r.step_min_s = t.slowest.min_s;
  const double calls = static_cast<double>(steps) * c.m() * c.v();
  r.rank_step_s = all_gather(t.own);
  r.rank_compute_s = all_gather(t.compute);
  r.rank_wait_s = all_gather(t.wait);
  r.ideal_s = mean(r.rank_compute_s);
  r.wait_s = mean(r.rank_wait_s);
  r.other_s = mean(r.rank_step_s) - r.ideal_s - r.wait_s;
  r.forward_call_s = mean(all_gather(t.forward_calls_s / calls));
  r.backward_call_s = mean(all_gather(t.backward_calls_s / calls));
  // W's measured part where the schedule splits the backward, the configured share where it does not.
  r.weight_call_s = splits_backward(c.schedule.kind) ? mean(all_gather(t.weight_calls_s / calls))
                                                     : r.backward_call_s * rs.weight_share;
  const std::vector<double> held = all_gather(t.peak_slots);
  r.held_peak = static_cast<int>(*std::max_element(held.begin(), held.end()));

  r.bubble = 1.0 - r.ideal_s / r.step_s;
  r.simulated = simulate(c.schedule, unit_costs(rs.weight_share, c.v())).bubble_fraction();
  switch (c.schedule.kind) {
    case ScheduleKind::ZeroBubbleH1: r.theory = zb_h1_theory_bubble(c.stages, c.m(), unit_costs(rs.weight_share, 1)); break;
    case ScheduleKind::ZeroBubbleV: r.theory = r.simulated; break;  // no closed form: the schedule's own
    default: r.theory = theory_bubble(c.stages, c.m(), c.v());
  }
  // The schedule's step with the measured compute times and free messages: what the executor would
  // take if transfers and wake-ups cost nothing.
  r.model_step_s = simulate(c.schedule, ComputeCosts{r.forward_call_s, r.backward_call_s - r.weight_call_s,
                                                     r.weight_call_s})
                       .makespan;
  const std::vector<int> peaks = peak_in_flight(c.schedule);
  r.peak_in_flight = *std::max_element(peaks.begin(), peaks.end());
  return r;
}

// One message's time from world rank 0 to 1 through the communicator (half a round trip, mean of
// `trips`), the others idle: what each message on a schedule's critical path adds at least.
double one_way_seconds(Communicator& world, DeviceContext& ctx, std::int64_t bytes, int trips) {
  if (world.size() < 2) return 0;
  Tensor out = Tensor::zeros({std::max<std::int64_t>(1, (bytes + 3) / 4)}, DType::F32, ctx);
  Tensor in = Tensor::zeros(out.shape(), DType::F32, ctx);
  double total = 0;
  for (int t = -1; t < trips; ++t) {  // the first trip sets the path up, untimed
    const double trip = time_after_barrier(world, [&] {
      if (world.rank() == 0) {
        world.send(out, 1);
        world.recv(in, 1);
      } else if (world.rank() == 1) {
        world.recv(in, 0);
        world.send(out, 0);
      }
    });
    if (t >= 0) total += trip;
  }
  double mine = world.rank() == 0 ? total / (2.0 * trips) : 0;
  MT_MPI_CHECK(MPI_Bcast(&mine, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD));
  return mine;
}

// This rank's pipeline when the world is cut into pipelines of p consecutive ranks.
std::vector<int> pipeline_members(int world_rank, int p) {
  std::vector<int> members(static_cast<std::size_t>(p));
  std::iota(members.begin(), members.end(), world_rank / p * p);
  return members;
}

}  // namespace

PipelineProbes measure_probes(BenchSession& s, const TimedWork& work, std::int64_t activation_bytes) {
  PipelineProbes probes;
  probes.gemm_call_s = mean(all_gather(work.gemm_call_s()));
  probes.one_way_s = one_way_seconds(s.world(), s.ctx(), activation_bytes, 20);
  return probes;
}

std::vector<PipelineResult> run_configs(const std::vector<PipelineConfig>& configs, BenchSession& s,
                                        TimedWork& work, const PipelineOptions& o) {
  std::vector<PipelineResult> results;
  for (std::size_t i = 0; i < configs.size();) {
    const int p = configs[i].stages;
    std::unique_ptr<Communicator> pp = s.world().split(pipeline_members(s.session.placement.world_rank, p));
    PipelineExecutor executor(*pp, s.ctx().stream(), ExecutorOptions{o.overlap});
    for (; i < configs.size() && configs[i].stages == p; ++i) {
      const RankSteps steps = run_steps(configs[i], s.world(), *pp, executor, work, s.ctx(), o.run);
      results.push_back(summarise(configs[i], steps, o.run));
    }
  }
  return results;
}

}  // namespace mt
