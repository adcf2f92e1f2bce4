// Rank to device binding. The local rank comes from MPI's shared-memory split (not from launcher
// environment variables); GPU = local rank mod visible GPUs. More ranks on a node than GPUs only
// with --virtual-devices; CPU ranks share the node's cores. A request that some rank cannot meet
// becomes one error agreed by every rank (said once by rank 0), before any communicator exists.
// defines: DeviceRequest, NodePlacement, Binding, parse_device_request, bind_device, node_placement,
//          bind_device_agreed
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <mpi.h>

#include "runtime/device.h"

namespace mt {

enum class DeviceRequest { Auto, Cpu, Cuda };
DeviceRequest parse_device_request(std::string_view text);

// Where this rank sits: from MPI_Comm_split_type(MPI_COMM_TYPE_SHARED).
struct NodePlacement {
  int world_rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_size = 1;
  std::string host;
  // NCCL_HOSTID when set: NCCL then takes it for the host's identity, so two ranks on one GPU
  // with different ids are, to NCCL, on two hosts (its socket transport joins them; a test setup).
  std::string nccl_host_id;
};
NodePlacement node_placement(MPI_Comm world);

struct Binding {
  Device device = Device::cpu();
  DeviceProperties properties;
  std::string gpu_identity;  // "host/pci-bus-id" for a GPU (the host as NCCL sees it); empty on the CPU
  std::string notice;        // one line worth telling the user, or empty
};

// Pure decision, tested without MPI or GPUs. Throws an error naming the host and the fix when the
// request cannot be met.
Binding bind_device(DeviceRequest request, bool virtual_devices, const NodePlacement& where,
                    const DeviceDiscovery& found);

// bind_device on every rank of `world`, then agree_before_communicators (launch/early_agreement.h): a
// GPU missing on one host ends every rank with one line from rank 0, not one line per rank and an
// MPI_Abort.
Binding bind_device_agreed(MPI_Comm world, DeviceRequest request, bool virtual_devices, const NodePlacement& where,
                           const DeviceDiscovery& found);

}  // namespace mt
