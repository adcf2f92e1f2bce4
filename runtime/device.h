// Devices: what a rank computes on (cpu, or cuda:N), their discovery and properties.
// defines: DeviceKind, Device, DeviceProperties, DeviceDiscovery, discover_devices
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace mt {

enum class DeviceKind { CPU, CUDA };

struct Device {
  DeviceKind kind = DeviceKind::CPU;
  int index = 0;

  static Device cpu() { return {DeviceKind::CPU, 0}; }
  static Device cuda(int index) { return {DeviceKind::CUDA, index}; }
  bool is_cpu() const { return kind == DeviceKind::CPU; }
  bool is_cuda() const { return kind == DeviceKind::CUDA; }
  std::string str() const;  // "cpu" or "cuda:N"
  static Device parse(std::string_view text);
  friend bool operator==(const Device&, const Device&) = default;
};

struct DeviceProperties {
  Device device;
  std::string name;
  std::size_t total_memory = 0;  // bytes
  std::size_t free_memory = 0;   // bytes at discovery; 0 = unknown (GPUs: not queried, it needs a context)
  int compute_units = 0;         // SMs on a GPU, cores on the CPU
  std::string pci_bus_id;        // GPUs only: tells two ranks' GPUs apart on one host
};

// What this process can see. A toolkit without a usable driver or GPU is not an error: the
// discovery lists no GPU and says why, and the caller falls back to the CPU.
struct DeviceDiscovery {
  bool cuda_compiled = false;
  std::string cuda_unavailable_reason;  // empty when GPUs are usable or CUDA is not compiled in
  std::vector<DeviceProperties> gpus;
  DeviceProperties cpu;
};

DeviceDiscovery discover_devices();
DeviceProperties cpu_properties();

// Human-readable byte counts ("1.5 GiB") and their parsing ("512M", "2G", "1048576").
std::string format_bytes(std::size_t bytes);
std::size_t parse_bytes(std::string_view text);

}  // namespace mt
