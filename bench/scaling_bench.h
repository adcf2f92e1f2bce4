// `meshbench scaling`: see bench/main.cpp for the summary.
// defines: scaling_bench
#pragma once

#include <string>
#include <vector>

namespace mt {
int scaling_bench(const std::vector<std::string>& args);
}  // namespace mt
