// `meshbench train`: single-rank training throughput of GPT shapes next to the device's measured
// sgemm rate (the ceiling), with the time split into forward, backward and optimizer, and the
// peak resident memory.
// defines: train_bench
#pragma once

#include <string>
#include <vector>

namespace mt {
int train_bench(const std::vector<std::string>& args);
}  // namespace mt
