// What `meshbench pipeline` prints and writes, on rank 0: the header before the runs, then the
// table of configurations, the interleaved-vs-1F1B summary, the distance from theory, and one JSON
// row per configuration.
// defines: print_pipeline_header, write_pipeline_json_rows, print_pipeline_results,
//          print_interleaving_summary, print_zero_bubble_summary, print_distance_from_theory
#pragma once

#include <vector>

#include "bench/bench_session.h"
#include "bench/pipeline_plan.h"
#include "bench/pipeline_run.h"

namespace mt {

// The run's setting and how to read the rows, flushed before the configurations run.
void print_pipeline_header(const BenchSession& s, const PipelineOptions& o, const PipelineProbes& probes);

// Appends one JSON line per configuration to o.json (nothing when it is empty).
void write_pipeline_json_rows(const BenchSession& s, const PipelineOptions& o, const PipelineProbes& probes,
                              const std::vector<PipelineConfig>& configs, const std::vector<PipelineResult>& results);

// The table, a row per configuration, and the legend of its columns.
void print_pipeline_results(const std::vector<PipelineConfig>& configs, const std::vector<PipelineResult>& results);

// Interleaving (v = 2) against 1F1B at the same (p, m).
void print_interleaving_summary(const std::vector<PipelineConfig>& configs,
                                const std::vector<PipelineResult>& results);

// zb-h1 and zb-v against 1F1B at the same (p, m).
void print_zero_bubble_summary(const std::vector<PipelineConfig>& configs, const std::vector<PipelineResult>& results);

// How many measured bubbles lie within 10% of the formula, naming those that do not.
void print_distance_from_theory(const std::vector<PipelineConfig>& configs,
                                const std::vector<PipelineResult>& results);

}  // namespace mt
