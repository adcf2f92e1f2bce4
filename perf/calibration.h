// Fitting a cluster's numbers to measurements: JSON-lines files written by `meshbench --json`.
// From collective rows (bench "coll", op "allreduce") the latency and bandwidth of each link kind
// (hosts == 1: intra-node, hosts > 1: inter-node), by least squares of the ring's
// time = alpha x 2(n-1) + (2(n-1)/n x bytes) / bandwidth, the time being "time_s" or, as
// `meshbench coll --json` writes it, the faster of "out_of_place_time_s" and "in_place_time_s".
// From training rows (bench "train") the GEMM rate of one device and the fraction of it the
// model's forward and backward reach. Rows of other benches are skipped; a malformed line is an
// error naming the file and line.
// defines: CollSample, TrainSample, CalibrationData, read_calibration, fit_link, Calibration,
//          calibrate, apply_calibration, describe
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "perf/cluster.h"

namespace mt::perf {

struct CollSample {
  int ranks = 1;
  double bytes = 0;
  double time_s = 0;
};

struct TrainSample {
  double gemm_flops_per_s = 0;
  double mfu = 0;
  double step_s = 0;
  double params = 0;  // 0 when the row does not say
};

struct CalibrationData {
  std::vector<CollSample> intra, inter;  // allreduce rows by link kind
  std::vector<TrainSample> train;
  int skipped = 0;                       // rows of other benches or other collectives
  std::vector<std::filesystem::path> files;  // read from, for calibrate's errors
};

// Reads and checks every line of every file (empty lines allowed).
CalibrationData read_calibration(const std::vector<std::filesystem::path>& files);

// Least squares over the samples; needs two distinct (steps, bytes) points, else throws Error
// (calibrate's names the files).
// A negative latency fit is refitted with latency 0.
Link fit_link(const std::vector<CollSample>& samples);

struct Calibration {
  std::optional<Link> intra, inter;
  std::optional<double> peak_flops, achieved_fraction;
  int intra_rows = 0, inter_rows = 0, train_rows = 0, skipped = 0;
};

// Fits what the data allows. The training rows' MFU includes the optimizer, which the cost model
// counts on its own: the optimizer's time (36 bytes per parameter at the cluster's memory
// bandwidth) is taken out of step_s before the achieved fraction is computed.
Calibration calibrate(const CalibrationData& data, const Cluster& cluster);
void apply_calibration(const Calibration& calibration, Cluster& cluster);
std::string describe(const Calibration& calibration);

}  // namespace mt::perf
