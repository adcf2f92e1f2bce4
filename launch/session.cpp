#include "launch/session.h"

#include <cstdio>
#include <cstdlib>

namespace mt {

Session open_session(const RuntimeOptions& options) {
  Session s;
  s.placement = node_placement(MPI_COMM_WORLD);
  const DeviceDiscovery found = discover_devices();
  s.binding = bind_device_agreed(MPI_COMM_WORLD, options.device, options.virtual_devices, s.placement, found);
  s.launch = read_launch_environment([](const char* name) { return std::getenv(name); });
  s.warnings = launch_warnings(s.launch, s.placement, s.binding.device.is_cuda(), static_cast<int>(found.gpus.size()),
                               options.virtual_devices);
  if (!s.binding.notice.empty() && s.placement.local_rank == 0) {
    std::fprintf(stderr, "meshtrain: notice: %s\n", s.binding.notice.c_str());
  }
  DeviceOptions dev;
  dev.device = s.binding.device;
  dev.memory_limit = options.device_memory_limit;
  dev.cpu_threads = options.cpu_threads > 0 ? options.cpu_threads : default_cpu_threads(s.placement.local_size);
  s.context = std::make_unique<DeviceContext>(dev);
  s.backend = choose_backend(options.comm_backend, s.binding.device, s.binding.gpu_identity);
  s.watchdog = std::make_shared<Watchdog>(Watchdog::Options{.timeout = options.comm_timeout});
  s.world = make_world_communicator(s.backend, *s.context,
                                    CommOptions{.timeout = options.comm_timeout, .watchdog = s.watchdog, .debug_collectives = options.debug_collectives});
  return s;
}

}  // namespace mt
