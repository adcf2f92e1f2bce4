// Rank-to-device binding as a pure decision: placements and discoveries built by hand, no MPI
// and no GPU needed. Covers the CPU fallback and its notice, the errors that name the host and
// the fix, and GPU = local rank mod GPUs with and without --virtual-devices.
#include <gtest/gtest.h>

#include <string>

#include "launch/binding.h"  // defines: bind_device, parse_device_request, NodePlacement, Binding
#include "runtime/error.h"   // defines: Error
#include "tests/test_helpers.h"

namespace mt {
namespace {

using testing::contains;
using testing::error_of;

DeviceDiscovery discovery(int gpus, bool cuda_compiled, std::string reason = "") {
  DeviceDiscovery d;
  d.cuda_compiled = cuda_compiled;
  d.cuda_unavailable_reason = std::move(reason);
  d.cpu.device = Device::cpu();
  d.cpu.name = "Test CPU";
  d.cpu.total_memory = 64ull << 30;
  d.cpu.compute_units = 16;
  for (int i = 0; i < gpus; ++i) {
    DeviceProperties p;
    p.device = Device::cuda(i);
    p.name = "Test GPU " + std::to_string(i);
    p.total_memory = 80ull << 30;
    p.compute_units = 132;
    p.pci_bus_id = "0000:0" + std::to_string(i) + ":00.0";
    d.gpus.push_back(p);
  }
  return d;
}

NodePlacement placement(int local_rank, int local_size, std::string host = "node7") {
  NodePlacement p;
  p.world_rank = 8 + local_rank;
  p.world_size = 16;
  p.local_rank = local_rank;
  p.local_size = local_size;
  p.host = std::move(host);
  return p;
}

TEST(ParseDeviceRequest, KnownNames) {
  EXPECT_EQ(parse_device_request("auto"), DeviceRequest::Auto);
  EXPECT_EQ(parse_device_request("cpu"), DeviceRequest::Cpu);
  EXPECT_EQ(parse_device_request("cuda"), DeviceRequest::Cuda);
  EXPECT_EQ(parse_device_request("gpu"), DeviceRequest::Cuda);
}

TEST(ParseDeviceRequest, UnknownNamesThrow) {
  for (const char* bad : {"", "tpu", "CUDA", "cuda:0", "Auto"}) {
    const std::string msg = error_of([&] { parse_device_request(bad); });
    EXPECT_TRUE(contains(msg, std::string("--device '") + bad + "'")) << msg;
    EXPECT_TRUE(contains(msg, "auto, cpu or cuda")) << msg;
  }
}

TEST(BindDevice, CpuRequestIgnoresGpus) {
  const Binding b = bind_device(DeviceRequest::Cpu, false, placement(2, 4), discovery(4, true));
  EXPECT_EQ(b.device, Device::cpu());
  EXPECT_EQ(b.properties.name, "Test CPU");
  EXPECT_TRUE(b.gpu_identity.empty());
  EXPECT_TRUE(b.notice.empty());
}

TEST(BindDevice, AutoWithoutGpuFallsBackToCpuAndSaysWhy) {
  const Binding b =
      bind_device(DeviceRequest::Auto, false, placement(0, 2), discovery(0, true, "no CUDA driver found"));
  EXPECT_EQ(b.device, Device::cpu());
  EXPECT_EQ(b.properties.name, "Test CPU");
  EXPECT_TRUE(b.gpu_identity.empty());
  EXPECT_TRUE(contains(b.notice, "no CUDA driver found")) << b.notice;
  EXPECT_TRUE(contains(b.notice, "node7")) << b.notice;
  EXPECT_TRUE(contains(b.notice, "CPU")) << b.notice;
}

TEST(BindDevice, AutoWithoutCudaBuildIsQuietlyCpu) {
  const Binding b = bind_device(DeviceRequest::Auto, false, placement(1, 8), discovery(0, false));
  EXPECT_EQ(b.device, Device::cpu());
  EXPECT_TRUE(b.notice.empty()) << b.notice;
  EXPECT_TRUE(b.gpu_identity.empty());
}

TEST(BindDevice, CudaRequestWithoutGpuNamesHostAndFix) {
  std::string msg = error_of([] {
    bind_device(DeviceRequest::Cuda, false, placement(0, 1, "gpu-less-host"), discovery(0, true, "driver too old"));
  });
  EXPECT_TRUE(contains(msg, "gpu-less-host")) << msg;
  EXPECT_TRUE(contains(msg, "--device cpu")) << msg;
  EXPECT_TRUE(contains(msg, "driver too old")) << msg;

  msg = error_of(
      [] { bind_device(DeviceRequest::Cuda, true, placement(0, 1, "cpu-build-host"), discovery(0, false)); });
  EXPECT_TRUE(contains(msg, "cpu-build-host")) << msg;
  EXPECT_TRUE(contains(msg, "--device cpu")) << msg;
  EXPECT_TRUE(contains(msg, "without CUDA")) << msg;
}

TEST(BindDevice, OneGpuPerLocalRank) {
  for (DeviceRequest request : {DeviceRequest::Auto, DeviceRequest::Cuda}) {
    const Binding b = bind_device(request, false, placement(2, 4), discovery(4, true));
    EXPECT_EQ(b.device, Device::cuda(2));
    EXPECT_EQ(b.properties.name, "Test GPU 2");
    EXPECT_EQ(b.gpu_identity, "node7/0000:02:00.0");
    EXPECT_TRUE(b.notice.empty()) << b.notice;
  }
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_EQ(bind_device(DeviceRequest::Auto, false, placement(rank, 4), discovery(4, true)).device,
              Device::cuda(rank));
  }
  // Fewer ranks than GPUs: still rank r on GPU r, nothing to say.
  const Binding few = bind_device(DeviceRequest::Auto, false, placement(1, 2), discovery(4, true));
  EXPECT_EQ(few.device, Device::cuda(1));
  EXPECT_TRUE(few.notice.empty());
  // --virtual-devices changes nothing when there are enough GPUs.
  const Binding enough = bind_device(DeviceRequest::Auto, true, placement(3, 4), discovery(4, true));
  EXPECT_EQ(enough.device, Device::cuda(3));
  EXPECT_TRUE(enough.notice.empty());
}

TEST(BindDevice, MoreRanksThanGpusNeedVirtualDevices) {
  const std::string msg =
      error_of([] { bind_device(DeviceRequest::Auto, false, placement(0, 4, "node3"), discovery(1, true)); });
  EXPECT_TRUE(contains(msg, "--virtual-devices")) << msg;
  EXPECT_TRUE(contains(msg, "node3")) << msg;
  EXPECT_TRUE(contains(msg, "4 ranks")) << msg;
  EXPECT_TRUE(contains(msg, "only 1 GPU")) << msg;
  EXPECT_THROW(bind_device(DeviceRequest::Cuda, false, placement(3, 4), discovery(2, true)), Error);
}

TEST(BindDevice, VirtualDevicesShareGpusRoundRobin) {
  const Binding one = bind_device(DeviceRequest::Auto, true, placement(3, 4), discovery(1, true));
  EXPECT_EQ(one.device, Device::cuda(0));
  EXPECT_EQ(one.gpu_identity, "node7/0000:00:00.0");
  EXPECT_TRUE(contains(one.notice, "4 ranks share 1 GPU")) << one.notice;
  EXPECT_TRUE(contains(one.notice, "--virtual-devices")) << one.notice;
  EXPECT_TRUE(contains(one.notice, "node7")) << one.notice;

  const int expected[] = {0, 1, 0, 1};
  for (int rank = 0; rank < 4; ++rank) {
    const Binding b = bind_device(DeviceRequest::Cuda, true, placement(rank, 4), discovery(2, true));
    EXPECT_EQ(b.device, Device::cuda(expected[rank])) << "local rank " << rank;
    EXPECT_EQ(b.properties.name, "Test GPU " + std::to_string(expected[rank]));
    EXPECT_EQ(b.gpu_identity, "node7/0000:0" + std::to_string(expected[rank]) + ":00.0");
    EXPECT_FALSE(b.notice.empty());
  }
}

TEST(BindDevice, NcclHostIdNamesTheHostAsNcclSeesIt) {
  // Ranks sharing one GPU, each with its own NCCL_HOSTID: NCCL takes them for separate hosts, and
  // so does the backend choice (comm/backend_selection.cpp compares these identities).
  NodePlacement where = placement(1, 2);
  where.nccl_host_id = "fake-host-1";
  const Binding b = bind_device(DeviceRequest::Cuda, true, where, discovery(1, true));
  EXPECT_EQ(b.gpu_identity, "fake-host-1/0000:00:00.0");
}

}  // namespace
}  // namespace mt
