// compare_losses A.jsonl B.jsonl FIRST LAST TOLERANCE: the training losses of steps FIRST..LAST in two
// metrics files (the last record of a step wins, as a resumed run appends) agree within TOLERANCE
// relative, or exactly (bit for bit) when it is 0. Prints both per step; exit 1 on a mismatch or a
// missing step. For the checkpoint tests: a resumed run against an uninterrupted one.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

namespace {

std::map<int, double> losses(const char* path) {
  std::map<int, double> out;
  std::ifstream in(path);
  if (!in) {
    std::fprintf(stderr, "compare_losses: cannot read %s\n", path);
    std::exit(2);
  }
  std::string line;
  while (std::getline(in, line)) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("step") && j.contains("loss")) out[j["step"].get<int>()] = j["loss"].get<double>();
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: compare_losses A.jsonl B.jsonl FIRST LAST TOLERANCE\n");
    return 2;
  }
  const std::map<int, double> a = losses(argv[1]), b = losses(argv[2]);
  const int first = std::stoi(argv[3]), last = std::stoi(argv[4]);
  const double tolerance = std::stod(argv[5]);
  int bad = 0;
  for (int step = first; step <= last; ++step) {
    if (!a.count(step) || !b.count(step)) {
      std::printf("step %d: missing in %s\n", step, a.count(step) ? argv[2] : argv[1]);
      ++bad;
      continue;
    }
    const double x = a.at(step), y = b.at(step);
    const double rel = std::fabs(x - y) / std::max(std::fabs(x), 1e-30);
    const bool ok = tolerance == 0.0 ? x == y : rel <= tolerance;
    std::printf("step %d: %.9g %.9g rel %.2e %s\n", step, x, y, rel, ok ? "ok" : "MISMATCH");
    bad += ok ? 0 : 1;
  }
  return bad == 0 ? 0 : 1;
}
