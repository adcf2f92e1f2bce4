#include "bench/bench_json.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <stdexcept>

namespace mt {

void BenchJson::append(const nlohmann::ordered_json& row) const {
  if (path_.empty()) return;
  std::ofstream out(path_, std::ios::app);
  if (!out) throw std::runtime_error("cannot open " + path_ + " for appending: " + std::strerror(errno));
  out << row.dump() << '\n';
  if (!out) throw std::runtime_error("cannot write " + path_ + ": " + std::strerror(errno));
}

}  // namespace mt
