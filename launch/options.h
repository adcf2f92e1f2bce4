// The options every meshtrain command shares: device, memory cap, threads, communication.
// Parsed once into a struct and passed down; nothing reads the environment behind its back.
// defines: RuntimeOptions, add_runtime_options, read_runtime_options
#pragma once

#include <boost/program_options.hpp>
#include <chrono>
#include <cstddef>
#include <string>

#include "comm/backend_selection.h"
#include "launch/binding.h"

namespace mt {

struct RuntimeOptions {
  DeviceRequest device = DeviceRequest::Auto;
  bool virtual_devices = false;
  std::size_t device_memory_limit = 0;  // 0: none
  int cpu_threads = 0;                   // 0: cores of the node / ranks on the node
  CommBackend comm_backend = CommBackend::Auto;
  std::chrono::milliseconds comm_timeout{std::chrono::minutes(10)};
  bool debug_collectives = false;
};

void add_runtime_options(boost::program_options::options_description& desc);
RuntimeOptions read_runtime_options(const boost::program_options::variables_map& vm);

}  // namespace mt
