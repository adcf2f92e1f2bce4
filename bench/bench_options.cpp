#include "bench/bench_options.h"

#include "launch/path_option.h"

namespace po = boost::program_options;

namespace mt {

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> items;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!item.empty()) items.push_back(item);
    start = comma == std::string::npos ? text.size() + 1 : comma + 1;
  }
  return items;
}

void add_repeat_options(po::options_description& desc, int steps, const char* steps_help, const char* warmup_help) {
  desc.add_options()("steps", po::value<int>()->default_value(steps), steps_help)(
      "warmup", po::value<int>()->default_value(1), warmup_help);
}

void add_json_option(po::options_description& desc, const char* help) {
  desc.add_options()("json", path_value(PathKind::WriteFile)->default_value(""), help);
}

}  // namespace mt
