#include "launch/binding.h"

#include <cstdlib>
#include <exception>

#include "comm/mpi_runtime.h"
#include "launch/early_agreement.h"

namespace mt {

DeviceRequest parse_device_request(std::string_view text) {
  if (text == "auto") return DeviceRequest::Auto;
  if (text == "cpu") return DeviceRequest::Cpu;
  if (text == "cuda" || text == "gpu") return DeviceRequest::Cuda;
  MT_FAIL_AS(UsageError, "unknown --device '", text, "' (expected auto, cpu or cuda)");
}

NodePlacement node_placement(MPI_Comm world) {
  NodePlacement p;
  MT_MPI_CHECK(MPI_Comm_rank(world, &p.world_rank));
  MT_MPI_CHECK(MPI_Comm_size(world, &p.world_size));
  MPI_Comm node = MPI_COMM_NULL;
  MT_MPI_CHECK(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, p.world_rank, MPI_INFO_NULL, &node));
  MpiComm owned(node, true);
  p.local_rank = owned.rank();
  p.local_size = owned.size();
  p.host = this_host_name();
  if (const char* id = std::getenv("NCCL_HOSTID"); id != nullptr) p.nccl_host_id = id;
  return p;
}

Binding bind_device(DeviceRequest request, bool virtual_devices, const NodePlacement& where,
                    const DeviceDiscovery& found) {
  Binding b;
  b.properties = found.cpu;
  if (request == DeviceRequest::Cpu) return b;

  const int gpus = static_cast<int>(found.gpus.size());
  if (gpus == 0) {
    const std::string why = found.cuda_compiled ? found.cuda_unavailable_reason : "meshtrain was built without CUDA";
    if (request == DeviceRequest::Cuda) {
      MT_FAIL("--device cuda: no usable GPU on host ", where.host, " (", why, "); use --device cpu or auto");
    }
    if (found.cuda_compiled) b.notice = "no usable GPU on " + where.host + " (" + why + "); running on CPU";
    return b;
  }
  if (where.local_size > gpus && !virtual_devices) {
    MT_FAIL(where.local_size, " ranks on host ", where.host, " but only ", gpus,
            " GPU(s) visible: pass --virtual-devices to let ranks share GPUs, launch fewer ranks per node, "
            "or use --device cpu");
  }
  const int index = where.local_rank % gpus;
  b.device = Device::cuda(index);
  b.properties = found.gpus[static_cast<std::size_t>(index)];
  b.gpu_identity = (where.nccl_host_id.empty() ? where.host : where.nccl_host_id) + "/" + b.properties.pci_bus_id;
  if (where.local_size > gpus) {
    b.notice = std::to_string(where.local_size) + " ranks share " + std::to_string(gpus) + " GPU(s) on " +
               where.host + " (--virtual-devices)";
  }
  return b;
}

Binding bind_device_agreed(MPI_Comm world, DeviceRequest request, bool virtual_devices, const NodePlacement& where,
                           const DeviceDiscovery& found) {
  Binding binding;
  std::optional<std::string> error;
  try {
    binding = bind_device(request, virtual_devices, where, found);
  } catch (const Error& e) {
    error = e.message();
  } catch (const std::exception& e) {
    error = e.what();
  }
  agree_before_communicators(world, error);
  return binding;
}

}  // namespace mt
