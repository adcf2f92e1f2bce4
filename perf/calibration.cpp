#include "perf/calibration.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <optional>
#include <nlohmann/json.hpp>

#include "perf/comm_model.h"
#include "runtime/error.h"

namespace mt::perf {
namespace {

using nlohmann::json;

double number(const json& row, const char* key, const std::string& where, const char* bench) {
  const auto it = row.find(key);
  MT_REQUIRE(it != row.end() && it->is_number(), where, ": ", bench, " row lacks the number \"", key, "\"");
  return it->get<double>();  // finite: the parser rejects 1e999 (not a JSON line)
}

int whole(const json& row, const char* key, const std::string& where, const char* bench) {
  const double v = number(row, key, where, bench);
  // Bounded before the cast: a double beyond int does not convert (undefined behaviour).
  MT_REQUIRE(v >= 1 && v <= std::numeric_limits<int>::max() && v == std::floor(v), where, ": ", bench, " row: \"", key,
             "\" must be a whole number in [1, ", std::numeric_limits<int>::max(), "], got ", v);
  return static_cast<int>(v);
}

// The time of one collective: "time_s" (hand-written rows), else the fastest placement that ran of
// what `meshbench coll --json` writes ("out_of_place_time_s", "in_place_time_s"; null when skipped).
double coll_time(const json& row, const std::string& where) {
  if (row.contains("time_s")) return number(row, "time_s", where, "coll");
  std::optional<double> best;
  bool named = false;
  for (const char* key : {"out_of_place_time_s", "in_place_time_s"}) {
    const auto it = row.find(key);
    if (it == row.end()) continue;
    named = true;
    if (it->is_null()) continue;
    const double t = number(row, key, where, "coll");
    best = best ? std::min(*best, t) : t;
  }
  MT_REQUIRE(named, where,
             ": coll row lacks the number \"time_s\" (or meshbench's \"out_of_place_time_s\", \"in_place_time_s\")");
  MT_REQUIRE(best, where, ": coll row has no time: neither placement ran");
  return *best;
}

}  // namespace

CalibrationData read_calibration(const std::vector<std::filesystem::path>& files) {
  CalibrationData data;
  data.files = files;
  for (const auto& file : files) {
    std::ifstream in(file);
    MT_REQUIRE(in.good(), "cannot read calibration file ", file.string());
    std::string line;
    int number_of_line = 0;
    while (std::getline(in, line)) {
      ++number_of_line;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      const std::string where = file.string() + ":" + std::to_string(number_of_line);
      json row;
      try {
        row = json::parse(line);
      } catch (const json::exception&) {
        MT_FAIL_AS(UsageError, where, ": not a JSON line: ", line.substr(0, 80));
      }
      MT_REQUIRE(row.is_object(), where, ": not a JSON object");
      const auto bench = row.find("bench");
      MT_REQUIRE(bench != row.end() && bench->is_string(), where, ": the row has no \"bench\" name");
      const std::string kind = bench->get<std::string>();
      if (kind == "coll") {
        const auto op = row.find("op");
        MT_REQUIRE(op != row.end() && op->is_string(), where, ": coll row lacks the string \"op\"");
        CollSample s;
        s.ranks = whole(row, "ranks", where, "coll");
        const int hosts = whole(row, "hosts", where, "coll");
        s.bytes = number(row, "bytes", where, "coll");
        s.time_s = coll_time(row, where);
        MT_REQUIRE(s.bytes >= 0 && s.time_s > 0, where, ": coll row needs bytes >= 0 and time_s > 0");
        MT_REQUIRE(hosts <= s.ranks, where, ": coll row has more hosts (", hosts, ") than ranks (", s.ranks, ")");
        if (op->get<std::string>() != "allreduce" || s.ranks < 2) {
          ++data.skipped;
          continue;
        }
        (hosts == 1 ? data.intra : data.inter).push_back(s);
      } else if (kind == "train") {
        TrainSample s;
        s.gemm_flops_per_s = number(row, "gemm_flops_per_s", where, "train");
        s.mfu = number(row, "mfu", where, "train");
        s.step_s = number(row, "step_s", where, "train");
        if (row.contains("params")) s.params = number(row, "params", where, "train");
        MT_REQUIRE(s.gemm_flops_per_s > 0 && s.mfu > 0 && s.mfu <= 1 && s.step_s > 0, where,
                   ": train row needs gemm_flops_per_s > 0, 0 < mfu <= 1 and step_s > 0");
        data.train.push_back(s);
      } else {
        ++data.skipped;  // another benchmark's rows
      }
    }
  }
  return data;
}

Link fit_link(const std::vector<CollSample>& samples) {
  // time = alpha x1 + inv_bw x2, x1 = ring steps, x2 = bytes each rank sends.
  double s11 = 0, s12 = 0, s22 = 0, s1t = 0, s2t = 0;
  for (const CollSample& s : samples) {
    const double x1 = ring_allreduce_steps(s.ranks), x2 = ring_allreduce_bytes(s.ranks, s.bytes);
    s11 += x1 * x1;
    s12 += x1 * x2;
    s22 += x2 * x2;
    s1t += x1 * s.time_s;
    s2t += x2 * s.time_s;
  }
  const double det = s11 * s22 - s12 * s12;
  MT_REQUIRE(samples.size() >= 2 && det > 1e-12 * s11 * s22, "fitting a link needs allreduce rows of at least two "
             "sizes (got ", samples.size(), " row(s))");
  double alpha = (s1t * s22 - s2t * s12) / det, inv_bw = (s11 * s2t - s12 * s1t) / det;
  if (alpha < 0) {
    alpha = 0;
    inv_bw = s2t / s22;
  }
  MT_REQUIRE(inv_bw > 0, "the allreduce rows do not grow with size: no bandwidth can be fitted");
  return {1.0 / inv_bw, alpha};
}

Calibration calibrate(const CalibrationData& data, const Cluster& cluster) {
  Calibration c;
  c.intra_rows = static_cast<int>(data.intra.size());
  c.inter_rows = static_cast<int>(data.inter.size());
  c.train_rows = static_cast<int>(data.train.size());
  c.skipped = data.skipped;
  // A fit that fails is the files' fault: name them.
  const auto fit = [&](const std::vector<CollSample>& samples, const char* kind) {
    try {
      return fit_link(samples);
    } catch (const Error& e) {
      std::string files;
      for (const auto& f : data.files) files += (files.empty() ? "" : ", ") + f.string();
      MT_FAIL_AS(UsageError, "calibration ", files, ": ", kind, " link: ", e.message());
    }
  };
  if (!data.intra.empty()) c.intra = fit(data.intra, "intra-node");
  if (!data.inter.empty()) c.inter = fit(data.inter, "inter-node");
  if (!data.train.empty()) {
    double flops = 0, fraction = 0;
    for (const TrainSample& s : data.train) {
      flops += s.gemm_flops_per_s;
      const double optimizer = s.params * 36.0 / cluster.memory_bandwidth;
      const double compute = s.step_s - optimizer > 0.2 * s.step_s ? s.step_s - optimizer : s.step_s;
      fraction += std::min(1.0, s.mfu * s.step_s / compute);
    }
    c.peak_flops = flops / static_cast<double>(data.train.size());
    c.achieved_fraction = fraction / static_cast<double>(data.train.size());
  }
  return c;
}

void apply_calibration(const Calibration& c, Cluster& cluster) {
  if (c.intra) cluster.intra = *c.intra;
  if (c.inter) cluster.inter = *c.inter;
  if (c.peak_flops) cluster.peak_flops = *c.peak_flops;
  if (c.achieved_fraction) cluster.achieved_fraction = *c.achieved_fraction;
}

std::string describe(const Calibration& c) {
  std::string out = "calibration: ";
  char buf[256];
  const auto link = [&](const char* name, const std::optional<Link>& l, int rows) {
    if (l) {
      std::snprintf(buf, sizeof buf, "%s link %.4g GB/s, %.3g us (%d allreduce rows); ", name, l->bandwidth / 1e9,
                    l->latency * 1e6, rows);
      out += buf;
    }
  };
  link("intra-node", c.intra, c.intra_rows);
  link("inter-node", c.inter, c.inter_rows);
  if (c.peak_flops) {
    std::snprintf(buf, sizeof buf, "GEMM %.4g GFLOP/s, achieved fraction %.3f (%d train rows); ", *c.peak_flops / 1e9,
                  *c.achieved_fraction, c.train_rows);
    out += buf;
  }
  out += std::to_string(c.skipped) + " row(s) skipped";
  return out;
}

}  // namespace mt::perf
