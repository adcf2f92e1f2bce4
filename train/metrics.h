// What a training run reports: one record per optimizer step, written as JSON lines to a file and
// as a progress line (loss, tokens/s, ETA) to the terminal.
// defines: TimeBreakdown, StepRecord, MetricsWriter, format_progress, format_duration, format_count
#pragma once

#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

namespace mt {

// Where one rank's time went (seconds): compute (kernels, the optimizer, reading data), exposed
// communication (collectives it waited for: tensor-parallel allreduces, gradient buckets still
// running after backward, the norm, ZeRO's gathers, the tied embedding), and the pipeline bubble
// (waiting for a neighbouring stage's activation or gradient). Host time: on CUDA, work still
// queued on the device counts where the host next waits for it.
struct TimeBreakdown {
  double compute_s = 0.0, comm_s = 0.0, bubble_s = 0.0;
  TimeBreakdown& operator+=(const TimeBreakdown& o) {
    compute_s += o.compute_s;
    comm_s += o.comm_s;
    bubble_s += o.bubble_s;
    return *this;
  }
};

struct StepRecord {
  int step = 0;                   // 1-based: the number of optimizer steps done
  double loss = 0.0;              // mean training loss of the step's global batch
  std::optional<double> val_loss; // when evaluated at this step
  double lr = 0.0;
  double grad_norm = 0.0;         // before clipping
  double tokens_per_s = 0.0;
  double step_ms = 0.0;
  double mfu = 0.0;               // model FLOPs / (time x peak); 0 when no peak is known
  TimeBreakdown time;             // this rank's (not in to_json: the ranks' are gathered for that)
};

// Appends one JSON object per line: {"step":..,"loss":..,"val_loss":..,"lr":..,"grad_norm":..,
// "tokens_per_s":..,"step_ms":..,"mfu":..}; val_loss only on evaluated steps. Lines are flushed
// as written, so a crashed run keeps its history.
class MetricsWriter {
 public:
  // Truncates the file, or appends to it (a resumed run continues its history). The system's errors
  // (a full disk, no permission) here and in the writes are EnvironmentErrors naming the file.
  explicit MetricsWriter(const std::filesystem::path& path, bool append = false);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;
  void write(const StepRecord& record);
  // A free-form JSON object line, e.g. the run's configuration as the first line.
  void write_json(const std::string& json_object);

 private:
  [[noreturn]] void fail(int err) const;
  std::filesystem::path path_;
  std::FILE* file_ = nullptr;
};

std::string to_json(const StepRecord& record);
// "step  120/1000 | loss 3.2145 | val 3.3012 | lr 5.80e-04 | norm 0.910 | 12.3k tok/s | mfu 52.1% | 245 ms | ETA 3m35s";
// an MFU above 100% is followed by "(>100%: peak mis-measured, set --peak-tflops)".
std::string format_progress(const StepRecord& record, int total_steps, double seconds_left);
std::string format_duration(double seconds);  // "45s", "3m35s", "2h05m"
std::string format_count(double n);           // "950", "12.3k", "124.44M", "1.56B"

}  // namespace mt
