#include "runtime/device.h"

#include <unistd.h>

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <fstream>

#include "runtime/cuda_api.h"
#include "runtime/error.h"

namespace mt {

std::string Device::str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }

Device Device::parse(std::string_view text) {
  if (text == "cpu") return cpu();
  if (text == "cuda") return cuda(0);
  if (text.starts_with("cuda:")) {
    int index = -1;
    auto digits = text.substr(5);
    auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (ec == std::errc() && end == digits.data() + digits.size() && index >= 0) return cuda(index);
  }
  MT_FAIL_AS(UsageError, "unknown device '", text, "' (expected cpu, cuda or cuda:N)");
}

namespace {
std::string cpu_model_name() {
  std::ifstream info("/proc/cpuinfo");
  std::string line;
  while (std::getline(info, line)) {
    if (line.starts_with("model name")) {
      auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(line.find_first_not_of(' ', colon + 1));
    }
  }
  return "cpu";
}
}  // namespace

DeviceProperties cpu_properties() {
  DeviceProperties p;
  p.device = Device::cpu();
  p.name = cpu_model_name();
  long pages = sysconf(_SC_PHYS_PAGES);
  long avail = sysconf(_SC_AVPHYS_PAGES);
  long page = sysconf(_SC_PAGESIZE);
  p.total_memory = static_cast<std::size_t>(pages) * static_cast<std::size_t>(page);
  p.free_memory = static_cast<std::size_t>(avail) * static_cast<std::size_t>(page);
  p.compute_units = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  return p;
}

DeviceDiscovery discover_devices() {
  DeviceDiscovery found;
  found.cpu = cpu_properties();
  found.cuda_compiled = cuda::compiled();
  if (!found.cuda_compiled) return found;
  std::string why;
  int count = cuda::device_count(&why);
  if (count == 0) {
    found.cuda_unavailable_reason = why;
    return found;
  }
  for (int i = 0; i < count; ++i) found.gpus.push_back(cuda::properties(i));
  return found;
}

std::string format_bytes(std::size_t bytes) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 4) {
    value /= 1024.0;
    ++unit;
  }
  char text[32];
  if (unit == 0) {
    std::snprintf(text, sizeof(text), "%zu B", bytes);
  } else {
    std::snprintf(text, sizeof(text), "%.1f %s", value, units[unit]);
  }
  return text;
}

std::size_t parse_bytes(std::string_view text) {
  double number = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), number);
  std::string_view suffix(end, text.data() + text.size() - end);
  if (ec != std::errc() || number < 0 || !std::isfinite(number)) {
    MT_FAIL_AS(UsageError, "cannot read the size '", text, "' (expected a number with an optional K, M, G or T suffix)");
  }
  double scale = 1;
  if (!suffix.empty()) {
    char unit = static_cast<char>(std::toupper(static_cast<unsigned char>(suffix.front())));
    std::string_view rest = suffix.substr(1);
    if (rest != "" && rest != "B" && rest != "iB" && rest != "b") unit = '?';
    switch (unit) {
      case 'B': scale = 1; break;
      case 'K': scale = 1024.0; break;
      case 'M': scale = 1024.0 * 1024; break;
      case 'G': scale = 1024.0 * 1024 * 1024; break;
      case 'T': scale = 1024.0 * 1024 * 1024 * 1024; break;
      default: MT_FAIL_AS(UsageError, "cannot read the size '", text, "': unknown unit '", suffix, "' (use K, M, G or T)");
    }
  }
  const double bytes = number * scale;
  // 2^63 bytes is far beyond any device, and the conversion of larger values is undefined.
  if (bytes >= 9223372036854775808.0) MT_FAIL_AS(UsageError, "the size '", text, "' is too large");
  return static_cast<std::size_t>(bytes);
}

}  // namespace mt
