#include "train/parallel_trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <span>
#include <sstream>

#include "models/gpt_weights.h"
#include "parallel/causal_split.h"
#include "parallel/layout_check.h"
#include "parallel/stage_partition.h"
#include "runtime/kernels.h"
#include "runtime/op_profile.h"
#include "optim/grad_norm.h"

namespace mt {
namespace {
constexpr int kMaxTags = 1 << 15;  // MPI_TAG_UB is at least 32767 (comm/communicator.cpp checks it)
}  // namespace

namespace {
// The executor's view of the model: one chunk, one micro-batch at a time, with all it needs given.
class StageRunner final : public PipelineStageRunner {
 public:
  // batch: the step's token ids (null where no chunk holds the embedding or the head). loss_weight:
  // a training forward's (the head's gradient made in the forward itself), or Gpt::kEvaluation for
  // validation's loss alone. loss_sum: where the head adds each micro-batch's mean loss, on the
  // device. on_complete: told each parameter of a chunk when the backward the schedule marks as the
  // chunk's last completes its gradient (the bucket reducer; empty under ZeRO-2/3, which reduce from
  // the parameter-use hooks).
  StageRunner(Gpt& model, int micro_batch, int seq_len, const StepBatch* batch, std::optional<float> loss_weight,
              Tensor loss_sum, Gpt::GradReady on_complete)
      : model_(model),
        micro_batch_(micro_batch),
        seq_len_(seq_len),
        batch_(batch),
        loss_weight_(loss_weight),
        loss_sum_(std::move(loss_sum)),
        on_complete_(std::move(on_complete)) {}
  Tensor forward_input(int chunk, int micro) override {
    return model_.input_buffer(chunk, micro, micro_batch_, seq_len_);
  }
  void forward(int chunk, int micro) override {
    const bool data = model_.chunk_has_embedding(chunk) || model_.chunk_has_head(chunk);
    MT_CHECK(!data || batch_ != nullptr, "chunk ", chunk, " reads token ids, and the runner has none");
    model_.forward_chunk(chunk, micro, micro_batch_, seq_len_, data ? batch_->micro(micro) : Gpt::DeviceTokens{},
                         loss_weight_, loss_sum_);
  }
  Tensor forward_output(int chunk, int micro) override { return model_.output(chunk, micro); }
  Tensor output_grad_buffer(int chunk, int micro) override { return model_.output_grad_buffer(chunk, micro); }
  void backward(int chunk, int micro, BackwardPart part, bool completes_chunk) override {
    static const Gpt::GradReady kNobody;
    const Gpt::GradReady& on_ready = completes_chunk ? on_complete_ : kNobody;
    switch (part) {
      case BackwardPart::Full: model_.backward_chunk(chunk, micro, on_ready); break;
      case BackwardPart::Input: model_.backward_chunk_input(chunk, micro); break;
      case BackwardPart::Weight: model_.backward_chunk_weights(chunk, micro, on_ready); break;
    }
  }
  Tensor input_grad(int chunk, int micro) override { return model_.input_grad(chunk, micro); }
  void release(int chunk, int micro) override { model_.release(chunk, micro); }

 private:
  Gpt& model_;
  int micro_batch_, seq_len_;
  const StepBatch* batch_;
  std::optional<float> loss_weight_;
  Tensor loss_sum_;
  Gpt::GradReady on_complete_;
};
}  // namespace

ParallelTrainer::ParallelTrainer(DeviceContext& ctx, Communicator& world, ParallelGroups& groups,
                                 const GptConfig& config, DType compute, data::DataLoader& train,
                                 data::DataLoader* val, TrainSettings settings, const LayoutPlan& plan)
    : ctx_(ctx),
      world_(world),
      groups_(groups),
      settings_(std::move(settings)),
      plan_(plan),
      train_(train),
      val_(val) {
  settings_.validate();
  const MeshShape& mesh = groups_.mesh.shape();
  MT_CHECK(mesh.dp == plan_.mesh().dp && mesh.tp == plan_.mesh().tp && mesh.pp == plan_.mesh().pp &&
               mesh.cp == plan_.mesh().cp,
           "the groups' mesh ", mesh.describe(), " is not the plan's ", plan_.mesh().describe());
  // The one check that the backend runs this layout's pipeline, before anything is built.
  check_pipeline_backend(mesh.pp, groups_.pp->capabilities(), groups_.pp->backend_name());
  const GptPartition partition = plan_.partition(groups_.coord);
  const int zero = plan_.layout().zero;
  GptOptions options{plan_.layout().recompute, plan_.layout().sequence_parallel};
  options.vocab_pieces = gpt_vocab_pieces(config, mesh.tp, zero);
  options.context_parallel = groups_.cp.get();
  // The ranks that hold the same weights: the gradients are reduced, and ZeRO shards, over them.
  const int replicas = groups_.gradient_group().size();
  // ZeRO 2/3: the store is built in the units' shard blocks from the start (no buffer of the whole
  // stage), cut here once for the model and the engine; ZeRO-1 in bf16 in two flat regions.
  std::vector<ParamSpec> specs;
  for (const ParamShard& shard : gpt_param_shards(config, partition, options.vocab_pieces)) specs.push_back(shard.local);
  std::optional<UnitCut> cut = zero_unit_cut(zero, specs, replicas, compute);
  if (cut) {
    options.store_blocks = cut->store_blocks();
    options.param_units = cut->units;
  }
  options.flat_regions = zero_flat_regions(zero, specs, replicas, compute);  // ZeRO-1 in bf16
  model_ = std::make_unique<Gpt>(ctx_, config, compute, partition,
                                 TensorParallel(groups_.tp.get(), &ctx_.stream(), &tp_stats_), replicas,
                                 std::move(options));
  reads_data_ = partition.embedding || partition.head;
  // With context parallelism a rank reads its chunks of each sequence, in the causal split's order.
  std::vector<std::int64_t> positions;
  if (mesh.cp > 1) positions = CausalSplit(settings_.seq_len, mesh.cp).positions(groups_.coord.cp);
  rows_ = settings_.seq_len / mesh.cp;
  if (reads_data_)
    batch_.emplace(ctx_, plan_.micro_batches(), plan_.micro_batch(), settings_.seq_len, config.vocab_size,
                   StepBatch::Reads{partition.embedding, partition.head}, std::move(positions));
  step_sums_ = Tensor::empty({3}, DType::F32, ctx_);
  eval_sum_ = Tensor::empty({1}, DType::F32, ctx_);
  Communicator* tied_stages = plan_.tied_across_stages() ? groups_.embedding.get() : nullptr;
  zero_ = make_zero_engine(ctx_, groups_.gradient_group(), tied_stages, *model_, std::move(cut),
                           ZeroOptions{zero, plan_.layout().overlap, plan_.layout().bucket_mb, settings_.adamw});
  model_->set_compute_copy_kept(zero_->keeps_compute_copy());
  executor_ = std::make_unique<PipelineExecutor>(*groups_.pp, ctx_.stream(), ExecutorOptions{plan_.layout().overlap});
  train_schedule_ = plan_.train_schedule();
  // Evaluation runs one global batch at a time, so a schedule's message tags stay within a step's.
  eval_schedule_ = plan_.eval_schedule();
  MT_REQUIRE(train_schedule_.tag_count() <= kMaxTags, "the pipeline would need ", train_schedule_.tag_count(),
             " message tags per step (2 x micro-batches x stages x virtual stages), more than the ", kMaxTags,
             " MPI guarantees: use fewer, larger micro-batches");
}

ParallelTrainer::~ParallelTrainer() = default;

void ParallelTrainer::init(std::uint64_t seed) {
  // Unit by unit (the values depend on nothing else): ZeRO-3 holds one unit's full parameters.
  zero_->for_each_resident_unit(/*gather=*/false, [&](int unit) { model_->init_unit(seed, unit); });
  model_->parameters().refresh_compute_params(ctx_);
}

void ParallelTrainer::load_weights(const std::filesystem::path& path) {
  // The files are read tensor by tensor in their own order, not unit by unit.
  zero_->with_every_unit_resident(/*gather=*/false, [&] { load_init_weights(*model_, ctx_, path); });
}

std::vector<float> ParallelTrainer::local_parameters() {
  const ParameterStore& store = model_->parameters();
  std::vector<float> out(static_cast<std::size_t>(store.numel()), 0.0f);
  zero_->for_each_resident_unit(/*gather=*/true, [&](int u) {
    const ParamUnit& unit = model_->param_units()[static_cast<std::size_t>(u)];
    for (std::size_t i = unit.first; i < unit.first + unit.count; ++i) {
      const std::vector<float> p = store.param(i).to_host<float>();
      std::copy(p.begin(), p.end(), out.begin() + store.offset(i));
    }
  });
  return out;
}

void ParallelTrainer::set_local_parameters(const std::vector<float>& values) {
  ParameterStore& store = model_->parameters();
  MT_CHECK(static_cast<std::int64_t>(values.size()) == store.numel(), values.size(), " values for a store of ",
           store.numel());
  zero_->for_each_resident_unit(/*gather=*/false, [&](int u) {
    const ParamUnit& unit = model_->param_units()[static_cast<std::size_t>(u)];
    for (std::size_t i = unit.first; i < unit.first + unit.count; ++i)
      store.param(i).copy_from_host(values.data() + store.offset(i),
                                    static_cast<std::size_t>(store.param(i).numel()) * sizeof(float), ctx_.stream());
  });
  store.refresh_compute_params(ctx_);
}

void ParallelTrainer::restore_progress(int steps_done, std::int64_t sequences_done) {
  MT_REQUIRE(steps_done >= 0 && sequences_done >= 0, "restore_progress: negative step ", steps_done, " or sequence ",
             sequences_done);
  steps_done_ = steps_done;
  sequences_done_ = sequences_done;
}

void ParallelTrainer::set_lr_schedule(const LrSchedule& schedule) {
  schedule.validate();
  settings_.schedule = schedule;
}

bool ParallelTrainer::reports_loss() const { return model_->partition().head && groups_.coord.tp == 0; }

bool ParallelTrainer::is_primary_copy(std::size_t param) const {
  return mt::is_primary_copy(model_->shards().at(param), model_->partition());
}

StepRecord ParallelTrainer::step() {
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  const auto since = [](clock::time_point t) { return std::chrono::duration<double>(clock::now() - t).count(); };
  const MeshShape& mesh = groups_.mesh.shape();
  // This dp rank's share of the step's global batch: sequences in the order a single rank reads them.
  const std::int64_t local = plan_.global_batch() / mesh.dp;
  const std::int64_t first = sequences_done_ + groups_.coord.dp * local;
  if (reads_data_) batch_->load(train_, first);
  const double tp_wait_before = tp_stats_.wait_seconds;
  const double ring_wait_before = model_->context_parallel_stats().wait_seconds;

  // [owned sum of squares, reported loss, unreported loss]: the first two are summed over the world.
  kernels::fill(ctx_, step_sums_, 0.0);
  Tensor sums = step_sums_.flat_slice(0, 2), norm_sq = step_sums_.flat_slice(0, 1);
  // The gradient of the mean loss over the step's micro-batches on every dp rank, and over the cp
  // ranks' rows of each sequence (each head's loss is the mean over its rows): the gradient sum over
  // dp x cp is then the mean's. The schedule says which backward completes a chunk's gradients: that
  // one tells the engine.
  const float loss_weight = 1.0f / static_cast<float>(plan_.micro_batches() * mesh.dp * mesh.cp);
  StageRunner runner(*model_, plan_.micro_batch(), rows_, batch_ ? &*batch_ : nullptr, loss_weight,
                     step_sums_.flat_slice(reports_loss() ? 1 : 2, 1), zero_->begin_step());
  pipeline_stats_ = executor_->run(train_schedule_, runner);
  const auto reduce_start = clock::now();
  zero_->finish_gradients(norm_sq);

  // One allreduce over the world for the norm (each element counted once) and the loss, then the
  // step's one host wait: the clip scale needs the norm before the update.
  world_.allreduce(sums);
  float total[2];
  sums.copy_to_host(total, sizeof total, ctx_.stream());
  double comm_s = since(reduce_start);  // the buckets still running, the tied embedding, the norm
  StepRecord r;
  r.step = steps_done_ + 1;
  r.loss = static_cast<double>(total[1]) / static_cast<double>(mesh.dp * mesh.cp * plan_.micro_batches());
  r.grad_norm = std::sqrt(static_cast<double>(total[0]));
  require_finite(r);
  r.lr = settings_.schedule.at(steps_done_);
  const auto clip = static_cast<float>(clip_scale(r.grad_norm, settings_.grad_clip));
  comm_s += zero_->update(static_cast<float>(r.lr), clip);
  // No wait for the update here: on a GPU the step's time ends when its work is queued, and the next
  // step's read waits for it, so the times still add up over steps.
  ++steps_done_;
  sequences_done_ += plan_.global_batch();
  const double seconds = since(start);
  r.time.bubble_s = pipeline_stats_.receive_wait_s;
  r.time.comm_s = comm_s + (tp_stats_.wait_seconds - tp_wait_before) +
                  (model_->context_parallel_stats().wait_seconds - ring_wait_before);
  r.time.compute_s = std::max(0.0, seconds - r.time.bubble_s - r.time.comm_s);
  // MFU against the peak of every rank of the job together.
  settings_.record_throughput(r, seconds, model_->config(), std::int64_t{plan_.global_batch()} * settings_.seq_len,
                              mesh.world_size());
  if (val_ != nullptr && settings_.evaluation_due(steps_done_)) {
    const OpProfilingPause not_the_step;  // validation is not the step --profile-ops times
    r.val_loss = evaluate();
  }
  return r;
}

double ParallelTrainer::evaluate() {
  MT_CHECK(val_ != nullptr, "no validation data to evaluate on");
  const MeshShape& mesh = groups_.mesh.shape();
  // The first eval_batches x global_batch sequences, as the tests' single-rank Trainer reads them: batch k's
  // share for dp rank r is the r-th slice of it.
  const std::int64_t local = plan_.global_batch() / mesh.dp;
  kernels::fill(ctx_, eval_sum_, 0.0);
  kernels::fill(ctx_, step_sums_, 0.0);  // its last slot takes the loss of a head that reports none
  StageRunner runner(*model_, plan_.micro_batch(), rows_, batch_ ? &*batch_ : nullptr, Gpt::kEvaluation,
                     reports_loss() ? eval_sum_ : step_sums_.flat_slice(2, 1), {});
  zero_->begin_evaluation();
  for (int k = 0; k < settings_.eval_batches; ++k) {
    if (reads_data_) batch_->load(*val_, static_cast<std::int64_t>(k) * plan_.global_batch() + groups_.coord.dp * local);
    executor_->run(eval_schedule_, runner);
  }
  zero_->end_evaluation();
  world_.allreduce(eval_sum_);
  float sum = 0.0f;
  eval_sum_.copy_to_host(&sum, sizeof sum, ctx_.stream());
  return static_cast<double>(sum) /
         static_cast<double>(mesh.dp * mesh.cp * plan_.micro_batches() * settings_.eval_batches);
}

std::vector<float> ParallelTrainer::gather_parameters() {
  // Every element of the full model is written by exactly one rank (dp and cp rank 0, tp rank 0 for a
  // replicated tensor, the first stage for the tied embedding) into a zeroed full-size host buffer;
  // an allreduce sum per tensor then assembles it everywhere (on the device: one full tensor at a
  // time, and with ZeRO-3 one unit's parameters while local_parameters gathers them).
  const GptConfig& config = model_->config();
  const std::vector<ParamSpec> full = gpt_parameter_specs(config);
  const std::vector<std::int64_t> offsets = spec_offsets(full);
  const std::int64_t total = offsets.back();
  std::vector<float> host(static_cast<std::size_t>(total), 0.0f);
  const ParameterStore& store = model_->parameters();
  const std::vector<float> mine = local_parameters();
  if (groups_.coord.dp == 0 && groups_.coord.cp == 0) {
    for (std::size_t i = 0; i < store.size(); ++i) {
      const ParamShard& shard = model_->shards()[i];
      if (!is_primary_copy(i)) continue;
      const std::size_t full_index = spec_index(full, shard.full.name);
      const float* src = mine.data() + store.offset(i);
      for (const auto& [begin, count] : shard.full_runs()) {
        std::copy(src, src + count, host.data() + offsets[full_index] + begin);
        src += count;
      }
    }
  }
  for (std::size_t t = 0; t < full.size(); ++t) {
    const auto first = static_cast<std::size_t>(offsets[t]);
    const std::span<const float> values(host.data() + first, static_cast<std::size_t>(full[t].numel()));
    Tensor tensor = Tensor::from_host(values, {full[t].numel()}, ctx_);
    world_.allreduce(tensor);
    const std::vector<float> summed = tensor.to_host<float>();  // waits for the device, as a read-back does
    std::copy(summed.begin(), summed.end(), host.begin() + static_cast<std::ptrdiff_t>(first));
  }
  return host;
}

std::string ParallelTrainer::describe_rank() const {
  std::ostringstream out;
  const ParameterStore& store = model_->parameters();
  out << "rank " << groups_.world_rank << ": dp " << groups_.coord.dp << " tp " << groups_.coord.tp;
  if (groups_.mesh.shape().cp > 1) out << " cp " << groups_.coord.cp;
  out << " stage "
      << groups_.coord.pp << ", " << model_->partition().describe() << ", " << store.param_numel()
      << " parameters, optimizer state " << zero_->state_bytes() / 1024 << " KiB";
  return out.str();
}

}  // namespace mt
