#include "train/checkpointing.h"

#include <chrono>
#include <ctime>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <optional>
#include <span>
#include <system_error>

#include "checkpoint/checkpoint_dir.h"
#include "checkpoint/tensor_io.h"
#include "comm/agreement.h"
#include "runtime/error.h"

namespace mt {
namespace {


std::string hex64(std::uint64_t value) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(value));
  return buf;
}

// The manifest's sections other than the tensors, from the trainer.
ckpt::Manifest manifest_base(ParallelTrainer& trainer, const RunIdentity& run) {
  const TrainSettings& settings = trainer.settings();
  const data::DataLoader& data = trainer.train_data();
  ckpt::Manifest m;
  m.step = trainer.steps_done();
  m.model = gpt_config_json(trainer.model().config());
  m.layout = layout_json(trainer.plan());
  m.training = {{"optimizer_steps", trainer.zero().step_count()},
                {"total_steps", settings.steps},
                {"global_batch", trainer.plan().global_batch()},
                {"micro_batch", trainer.plan().micro_batch()},
                {"seq_len", settings.seq_len},
                {"lr_schedule", settings.schedule.describe()},
                {"lr", lr_schedule_json(settings.schedule)},
                {"adamw",
                 {{"beta1", settings.adamw.beta1},
                  {"beta2", settings.adamw.beta2},
                  {"eps", settings.adamw.eps},
                  {"weight_decay", settings.adamw.weight_decay}}},
                {"grad_clip", settings.grad_clip},
                {"compute_dtype", dtype_name(trainer.model().compute_dtype())}};
  m.data = {{"sequences_consumed", trainer.sequences_done()},
            {"dir", run.data_dir},
            {"tokenizer", run.tokenizer},
            {"seq_len", data.seq_len()},
            {"shards", data.num_shards()},
            {"sequences_per_epoch", data.sequences_per_epoch()},
            {"fingerprint", hex64(data.fingerprint())}};
  m.rng = {{"seed", run.seed},
           {"state",
            "none kept: initialization is a pure function of (seed, element), the data order of (seed, "
            "sequence index), and training draws no random numbers (no dropout)"}};
  return m;
}

// This rank's pieces: what it owns over the gradient group (dp, or dp x cp: cp ranks hold the same
// weights; its block of each bucket or unit), for the params it holds the primary copy of. Pieces are
// slices of the full tensors, so a checkpoint reads back on any cp as on any dp.
void write_pieces(ParallelTrainer& trainer, ckpt::RankWriter& writer) {
  const ZeroEngine& zero = trainer.zero();
  for (const OwnedPiece& piece : zero.owned_pieces()) {
    const auto p = static_cast<std::size_t>(piece.param);
    if (!trainer.is_primary_copy(p)) continue;
    const ParamShard& shard = trainer.model().shards()[p];
    const ckpt::Slice slice = shard_slice(shard, piece.first, piece.first + piece.numel);
    const ckpt::Shape& shape = shard.full.shape;
    writer.add(param_tensor(shard.full.name), shape, slice, zero.owned_params(piece).to_host<float>());
    writer.add(adam_m_tensor(shard.full.name), shape, slice, zero.moment(AdamMoment::First, piece).to_host<float>());
    writer.add(adam_v_tensor(shard.full.name), shape, slice, zero.moment(AdamMoment::Second, piece).to_host<float>());
  }
}

}  // namespace

std::string describe_saved_layout(const nlohmann::json& layout) {
  // Manifests written before context parallelism have no "cp": theirs was 1.
  const int cp = layout.value("cp", 1);
  std::string s = "dp " + std::to_string(layout.value("dp", 0)) + " x tp " + std::to_string(layout.value("tp", 0)) +
                  (cp > 1 ? " x cp " + std::to_string(cp) : std::string()) + " x pp " +
                  std::to_string(layout.value("pp", 0)) + ", " + layout.value("schedule", std::string("?"));
  if (layout.value("virtual_stages", 1) > 1) s += " v" + std::to_string(layout.value("virtual_stages", 1));
  s += ", zero " + std::to_string(layout.value("zero", 0)) + " on " + std::to_string(layout.value("world_size", 0)) +
       " rank(s)";
  return s;
}

nlohmann::json layout_json(const LayoutPlan& plan) {
  const LayoutRequest& layout = plan.layout();
  const MeshShape& mesh = plan.mesh();
  return {{"dp", mesh.dp},
          {"tp", mesh.tp},
          {"cp", mesh.cp},
          {"pp", mesh.pp},
          {"order", mesh.order},
          {"world_size", mesh.world_size()},
          {"schedule", schedule_kind_name(layout.schedule)},
          {"virtual_stages", layout.virtual_stages},
          {"stage_layers", plan.chunk_layers()},
          {"zero", layout.zero},
          {"bucket_mb", layout.bucket_mb}};
}

nlohmann::json gpt_config_json(const GptConfig& config) {
  nlohmann::json j = {{"layers", config.layers},           {"heads", config.heads},
                      {"channels", config.channels},       {"max_seq_len", config.max_seq_len},
                      {"vocab_size", config.vocab_size},   {"padded_vocab", config.vocab_rows()}};
  if (config.is_llama()) {  // absent: gpt2 (the manifests before llama)
    j["family"] = model_family_name(config.family);
    j["kv_heads"] = config.kv_head_count();
    j["ffn_hidden"] = config.mlp_hidden();
    j["rope_theta"] = config.rope_theta;
    j["norm_eps"] = config.norm_eps;
  }
  return j;
}

// An int field of a manifest: get<int>() would cast whatever number it finds (1e300: undefined
// behaviour; 4294967298 wrapped to 2 and read another model; true read as 1). Reproduced with
// checkpoint/tests/fuzz_full_state.cpp.
int required_json_int(const nlohmann::json& json, const char* key, const std::string& where) {
  MT_REQUIRE(json.contains(key), where, ": no '", key, "'");
  const nlohmann::json& v = json.at(key);
  MT_REQUIRE(v.is_number_integer(), where, ": '", key, "' is not an integer: ", v.dump());
  const bool fits = v.is_number_unsigned() ? v.get<std::uint64_t>() <= std::numeric_limits<int>::max()
                                           : v.get<std::int64_t>() >= std::numeric_limits<int>::min() &&
                                                 v.get<std::int64_t>() <= std::numeric_limits<int>::max();
  MT_REQUIRE(fits, where, ": '", key, "' is out of range: ", v.dump());
  return v.get<int>();
}

GptConfig gpt_config_from_json(const nlohmann::json& json, const std::string& where) {
  MT_REQUIRE(json.is_object(), where, ": the model is not a JSON object");
  GptConfig c;
  c.layers = required_json_int(json, "layers", where);
  c.heads = required_json_int(json, "heads", where);
  c.channels = required_json_int(json, "channels", where);
  c.max_seq_len = required_json_int(json, "max_seq_len", where);
  c.vocab_size = required_json_int(json, "vocab_size", where);
  c.padded_vocab = required_json_int(json, "padded_vocab", where);
  if (json.contains("family")) {
    const nlohmann::json& family = json.at("family");
    MT_REQUIRE(family == "gpt2" || family == "llama", where, ": unknown model family ", family.dump(),
               " (known: gpt2, llama)");
    if (family == "llama") {
      c.family = ModelFamily::Llama;
      c.kv_heads = required_json_int(json, "kv_heads", where);
      c.ffn_hidden = required_json_int(json, "ffn_hidden", where);
      for (const char* key : {"rope_theta", "norm_eps"})
        MT_REQUIRE(json.contains(key) && json.at(key).is_number(), where, ": no number '", key, "'");
      c.rope_theta = json.at("rope_theta").get<float>();
      c.norm_eps = json.at("norm_eps").get<float>();
    }
  }
  try {
    c.validate();
  } catch (const Error& e) {
    MT_FAIL(where, ": ", e.message());
  }
  return c;
}

nlohmann::json lr_schedule_json(const LrSchedule& schedule) {
  return {{"kind", lr_schedule_kind_name(schedule.kind)},
          {"max_lr", schedule.max_lr},
          {"warmup_steps", schedule.warmup_steps},
          {"decay_steps", schedule.total_steps},
          {"min_lr_fraction", schedule.min_lr_fraction}};
}

namespace {

float required_json_float(const nlohmann::json& json, const char* key, const std::string& where) {
  MT_REQUIRE(json.contains(key) && json.at(key).is_number(), where, ": '", key, "' is missing or not a number");
  return json.at(key).get<float>();
}

// The schedule a checkpoint recorded, or nothing before training.lr; its decay_steps is checked
// by the caller's validate().
std::optional<LrSchedule> saved_lr_schedule(const nlohmann::json& training, const std::string& where) {
  if (!training.contains("lr")) return std::nullopt;
  const nlohmann::json& lr = training.at("lr");
  const std::string at = where + ": training.lr";
  MT_REQUIRE(lr.is_object() && lr.contains("kind") && lr.at("kind").is_string(), at, ": not a schedule: ", lr.dump());
  LrSchedule s;
  try {
    s.kind = parse_lr_schedule_kind(lr.at("kind").get<std::string>());
  } catch (const Error& e) {
    MT_FAIL(at, ": ", e.message());
  }
  s.max_lr = required_json_float(lr, "max_lr", at);
  s.warmup_steps = required_json_int(lr, "warmup_steps", at);
  s.total_steps = required_json_int(lr, "decay_steps", at);
  s.min_lr_fraction = required_json_float(lr, "min_lr_fraction", at);
  try {
    s.validate();
  } catch (const Error& e) {
    MT_FAIL(at, ": ", e.message());
  }
  return s;
}

std::string lr_text(float lr) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2e", static_cast<double>(lr));
  return buf;
}

}  // namespace

LrSchedule resumed_lr_schedule(const nlohmann::json& training, int step, const LrSchedule& requested,
                               bool horizon_given, std::vector<std::string>& notes, const std::string& where) {
  const std::optional<LrSchedule> saved = saved_lr_schedule(training, where);
  std::optional<int> saved_horizon;
  if (saved) {
    saved_horizon = saved->total_steps;
  } else if (training.contains("total_steps")) {
    // Before training.lr, the horizon was always the run's --steps.
    saved_horizon = required_json_int(training, "total_steps", where + ": training");
    MT_REQUIRE(*saved_horizon >= 1, where, ": training.total_steps is ", *saved_horizon);
  }
  LrSchedule chosen = requested;
  const int asked = requested.total_steps;
  const bool decays = requested.kind != LrScheduleKind::Constant;
  if (!saved_horizon) {
    if (step > 0 && decays)
      notes.push_back("the checkpoint records no learning-rate horizon: the schedule decays over " +
                      std::to_string(asked) + " steps from the start, so the learning rate jumps here if the run "
                      "that wrote it had another --steps");
  } else if (horizon_given) {
    if (*saved_horizon != asked && decays) {
      LrSchedule before = requested;
      before.total_steps = *saved_horizon;
      std::string jump;
      if (step > 0 && before.warmup_steps <= before.total_steps)
        jump = ": the learning rate goes from " + lr_text(before.at(step - 1)) + " at step " + std::to_string(step) +
               " to " + lr_text(requested.at(step)) + " at step " + std::to_string(step + 1);
      notes.push_back("--lr-decay-steps " + std::to_string(asked) + " replaces the checkpoint's learning-rate horizon of " +
                      std::to_string(*saved_horizon) + " steps" + jump);
    }
  } else {
    chosen.total_steps = *saved_horizon;
    MT_REQUIRE(chosen.warmup_steps <= chosen.total_steps, "--warmup ", chosen.warmup_steps,
               " is beyond the checkpoint's learning-rate horizon of ", chosen.total_steps,
               " steps: give --lr-decay-steps to set another");
    if (*saved_horizon != asked && decays) {
      notes.push_back(
          "the learning rate keeps decaying over the checkpoint's " + std::to_string(*saved_horizon) + " steps (--steps " +
          std::to_string(asked) +
          (asked > *saved_horizon ? " trains past it at the schedule's floor, " + lr_text(chosen.min_lr()) + ")"
                                  : " ends before the decay reaches its floor)") +
          "; give --lr-decay-steps " + std::to_string(asked) + (asked > *saved_horizon ? " to stretch it" : " to end it there"));
    }
  }
  if (saved && (saved->kind != chosen.kind || saved->max_lr != chosen.max_lr ||
                saved->warmup_steps != chosen.warmup_steps || saved->min_lr_fraction != chosen.min_lr_fraction))
    notes.push_back("learning-rate schedule " + chosen.describe() + " (the checkpoint's: " + saved->describe() + ")");
  chosen.validate();
  return chosen;
}

ckpt::Slice shard_slice(const ParamShard& shard, std::int64_t begin, std::int64_t end) {
  const ckpt::Shape& full = shard.full.shape;
  ckpt::Slice slice;
  slice.begin = begin;
  slice.end = end;
  if (shard.replicated()) {
    slice.boxes.push_back({ckpt::Shape(full.size(), 0), full});
    return slice;
  }
  // Block j of the split dimension is cut into `parts`; this shard holds part `part` of each.
  const auto dim = static_cast<std::size_t>(shard.split_dim);
  const std::int64_t block = full[dim] / shard.blocks;
  const std::int64_t width = block / shard.parts;
  for (int j = 0; j < shard.blocks; ++j) {
    ckpt::Box box{ckpt::Shape(full.size(), 0), full};
    box.offset[dim] = j * block + shard.part * width;
    box.shape[dim] = width;
    slice.boxes.push_back(std::move(box));
  }
  return slice;
}

ClaimedDir claim_checkpoint_dir(Communicator& world, DeviceContext& ctx, const std::filesystem::path& root,
                                const std::optional<std::string>& resume, bool overwrite) {
  ClaimedDir claimed;
  if (root.empty()) {
    if (resume) run_agreed(world, ctx, [&] { claimed.start.resume_dir = ckpt::resolve_checkpoint(*resume, root); });
    return claimed;
  }
  run_on_first_rank_agreed(world, ctx, [&] {
    claimed.lock = std::make_unique<ckpt::CheckpointDirLock>(root);
    ckpt::remove_partial_saves(root);
    claimed.start = ckpt::plan_run_start(root, resume, overwrite);
  });
  if (resume) claimed.start.resume_dir = allgather_strings(world, ctx, claimed.start.resume_dir.string()).front();
  return claimed;
}

std::vector<std::string> settle_checkpoint_dir(Communicator& world, DeviceContext& ctx,
                                               const std::filesystem::path& root, const ckpt::RunStart& start) {
  std::vector<std::string> lines;
  if (root.empty()) return lines;
  run_on_first_rank_agreed(world, ctx, [&] {
    char stamp[32];
    const std::time_t now = std::time(nullptr);
    std::tm utc{};
    gmtime_r(&now, &utc);
    std::strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &utc);
    lines = ckpt::apply_run_start(root, start, stamp);
  });
  return lines;
}

SaveResult save_checkpoint(ParallelTrainer& trainer, const std::filesystem::path& root, int keep,
                           const RunIdentity& run) {
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  Communicator& world = trainer.world();
  DeviceContext& ctx = trainer.context();
  const int rank = trainer.groups().world_rank;
  const std::int64_t step = trainer.steps_done();
  std::optional<ckpt::SaveFault> fault;
  const std::filesystem::path partial = ckpt::partial_dir(root, step);
  SaveResult result;
  try {
    run_agreed(world, ctx, [&] {
      fault = ckpt::save_fault_from_env();
      if (rank == 0) ckpt::prepare_partial(root, step);
    });
    run_agreed(world, ctx, [&] {
      ckpt::RankWriter writer(partial, rank, step, fault);
      write_pieces(trainer, writer);
      writer.finish();
    });
    run_agreed(world, ctx, [&] {
      if (rank != 0) return;
      ckpt::maybe_crash(fault, "manifest", step, rank);
      const ckpt::Manifest manifest = ckpt::assemble_manifest(partial, world.size(), manifest_base(trainer, run));
      for (const ckpt::FileEntry& f : manifest.files) result.bytes += f.bytes;
      ckpt::commit_checkpoint(root, manifest, fault);
      ckpt::maybe_crash(fault, "latest", step, rank);
      ckpt::set_latest(root, step);
      result.pruned = ckpt::prune_checkpoints(root, keep, fault);
    });
  } catch (const JobError&) {
    // Agreed, so every rank is done writing: the partial directory is nobody's now. Best effort (the
    // next start removes it too); once renamed to step_N it is gone and this removes nothing.
    if (rank == 0) {
      std::error_code ignored;
      std::filesystem::remove_all(partial, ignored);
    }
    throw;
  }
  result.dir = root / ckpt::step_dir_name(step);
  result.seconds = std::chrono::duration<double>(clock::now() - start).count();
  return result;
}

ResumeReport load_checkpoint(ParallelTrainer& trainer, const std::filesystem::path& step_dir,
                             const ResumeOptions& options) {
  ResumeReport report;
  report.dir = step_dir;
  run_agreed(trainer.world(), trainer.context(), [&] {
    ckpt::CheckpointReader reader(step_dir);
    const ckpt::Manifest& m = reader.manifest();
    const std::string where = "checkpoint " + step_dir.string();
    const GptConfig& config = trainer.model().config();
    const GptConfig saved = gpt_config_from_json(m.model, where + " (model)");
    MT_REQUIRE(gpt_config_json(saved) == gpt_config_json(config), where, " holds another model: ", saved.describe(),
               "; the options ask for ", config.describe());
    report.step = static_cast<int>(m.step);
    report.sequences = m.data.value("sequences_consumed", std::int64_t{0});
    report.saved_layout = describe_saved_layout(m.layout);
    const LrSchedule schedule = resumed_lr_schedule(m.training, report.step, trainer.settings().schedule,
                                                    options.lr_decay_steps_given, report.notes, where);

    Gpt& model = trainer.model();
    ParameterStore& store = model.parameters();
    DeviceContext& ctx = trainer.context();
    std::vector<float> params(static_cast<std::size_t>(store.numel()), 0.0f);
    for (std::size_t p = 0; p < store.size(); ++p) {
      const ParamShard& shard = model.shards()[p];
      const std::int64_t n = shard.local.numel();
      reader.read(param_tensor(shard.full.name), shard_slice(shard, 0, n),
                  std::span<float>(params).subspan(static_cast<std::size_t>(store.offset(p)), static_cast<std::size_t>(n)));
    }
    trainer.set_local_parameters(params);

    report.optimizer_state = !model.shards().empty() && reader.has_tensor(adam_m_tensor(model.shards()[0].full.name));
    ZeroEngine& zero = trainer.zero();
    if (report.optimizer_state) {
      // The moments this rank holds: every param whole without ZeRO, its owned pieces with it.
      for (const OwnedPiece& piece : zero.held_pieces()) {
        const ParamShard& shard = model.shards()[static_cast<std::size_t>(piece.param)];
        std::vector<float> host(static_cast<std::size_t>(piece.numel));
        for (const AdamMoment which : {AdamMoment::First, AdamMoment::Second}) {
          reader.read(which == AdamMoment::First ? adam_m_tensor(shard.full.name) : adam_v_tensor(shard.full.name),
                      shard_slice(shard, piece.first, piece.first + piece.numel), host);
          zero.moment(which, piece).copy_from_host(host.data(), host.size() * sizeof(float), ctx.stream());
        }
      }
      zero.set_step_count(m.training.value("optimizer_steps", m.step));
    } else {
      report.notes.push_back("the checkpoint holds weights only: AdamW starts from zero moments");
      zero.set_step_count(0);
    }
    ctx.synchronize();

    const data::DataLoader& data = trainer.train_data();
    if (m.data.contains("fingerprint") && m.data.value("fingerprint", std::string()) != hex64(data.fingerprint()))
      report.notes.push_back("the training data, its sequence length or its seed differ from the checkpoint's: "
                             "the stream continues at sequence " + std::to_string(report.sequences) + " of the new one");
    const int global_batch = trainer.plan().global_batch();
    const int saved_batch = m.training.value("global_batch", global_batch);
    if (saved_batch != global_batch)
      report.notes.push_back("global batch " + std::to_string(global_batch) + " (the checkpoint's: " +
                             std::to_string(saved_batch) + ")");
    trainer.set_lr_schedule(schedule);
    trainer.restore_progress(report.step, report.sequences);
  });
  return report;
}

}  // namespace mt
