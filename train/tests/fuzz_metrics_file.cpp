// libFuzzer target: a metrics file as `meshtrain plot` reads it (read_metrics): JSON lines of run
// headers, step records and timing lines. A bad file must end in UsageError naming the file, nothing
// else; an accepted one must have step records. Seeds (written by -write_seeds): files made by the
// project's own writer (MetricsWriter, to_json of StepRecord) in the shapes `meshtrain train
// --metrics` leaves: a run header, steps with and without val_loss, timing lines, a resumed run that
// appends a second header and repeats steps.
// defines: LLVMFuzzerInitialize, LLVMFuzzerTestOneInput
#include <nlohmann/json.hpp>  // defines: nlohmann::ordered_json

#include <cstddef>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <string>
#include <string_view>

#include "runtime/error.h"  // defines: UsageError
#include "train/metrics_reader.h"  // defines: read_metrics
#include "tests/fuzz_support.h"
#include "train/metrics.h"          // defines: MetricsWriter, StepRecord

namespace {
namespace fs = std::filesystem;

// A run header like train_command's (the fields plot reads: the layout).
std::string header(int dp, int tp, int pp, bool resumed) {
  nlohmann::ordered_json h;
  h["run"] = {{"model", "layers=2 heads=2 channels=32"}, {"parameters", 41000}, {"global_batch", 8},
              {"micro_batch", 2}, {"seq_len", 64}, {"steps", 6}, {"seed", 1}, {"device", "cpu"},
              {"compute_dtype", "fp32"},
              {"layout", {{"dp", dp}, {"tp", tp}, {"pp", pp}, {"schedule", "1f1b"}, {"virtual_stages", 1},
                          {"zero", 0}, {"bucket_mb", 25.0}, {"overlap", true}}},
              {"peak_flops", 1.5e11}};
  if (resumed) h["run"]["resumed_from"] = {{"dir", "ckpt/step_00000004"}, {"step", 4}};
  return h.dump();
}

std::string timing(int step) {
  nlohmann::ordered_json t;
  t["timing"] = {{"step", step}, {"steps", 2}, {"ranks", {{{"rank", 0}, {"compute_ms", 12.5}, {"comm_ms", 1.25},
                                                            {"bubble_ms", 0.0}}}}};
  return t.dump();
}

void write_steps(mt::MetricsWriter& writer, int first, int last) {
  for (int step = first; step <= last; ++step) {
    mt::StepRecord r;
    r.step = step;
    r.loss = 5.5 - 0.25 * step;
    if (step % 3 == 0) r.val_loss = 5.75 - 0.25 * step;
    r.lr = 6e-4 * step / last;
    r.grad_norm = 1.5 / step;
    r.tokens_per_s = 12000.0 + step;
    r.step_ms = 42.0;
    r.mfu = step % 2 ? 0.0 : 0.31;
    writer.write(r);
    if (step % 2 == 0) writer.write_json(timing(step));
  }
}

void write_seeds(const fs::path& dir) {
  fs::create_directories(dir);
  {
    mt::MetricsWriter writer(dir / "plain.jsonl");
    writer.write_json(header(2, 2, 2, false));
    write_steps(writer, 1, 6);
  }
  {
    mt::MetricsWriter writer(dir / "resumed.jsonl");
    writer.write_json(header(1, 2, 1, false));
    write_steps(writer, 1, 5);
  }
  {
    mt::MetricsWriter writer(dir / "resumed.jsonl", /*append=*/true);
    writer.write_json(header(2, 1, 1, true));
    write_steps(writer, 5, 8);
  }
  {
    mt::MetricsWriter writer(dir / "steps_only.jsonl");  // no header: the writer alone
    write_steps(writer, 1, 3);
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  mt::fuzz::handle_write_seeds(argc, argv, write_seeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const fs::path file = mt::fuzz::fuzz_dir() / "metrics.jsonl";
  mt::fuzz::write_input(file, std::string_view(reinterpret_cast<const char*>(data), size));
  try {
    const mt::RunMetrics run = mt::read_metrics(file);
    FUZZ_CHECK(!run.steps.empty());
    FUZZ_CHECK(run.layouts.size() <= static_cast<std::size_t>(run.headers));
    for (const auto& [step, point] : run.steps) FUZZ_CHECK(point.since_start >= 0);
  } catch (const mt::UsageError& e) {
    FUZZ_CHECK(std::string_view(e.what()).find(file.string()) != std::string_view::npos);
  }
  return 0;
}
