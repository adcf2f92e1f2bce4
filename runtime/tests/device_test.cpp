// Devices: names ("cpu", "cuda:N"), byte counts as users type and read them, CPU properties,
// discovery (never throws; says why there is no GPU), and the device context's checks.
#include <gtest/gtest.h>

#include <cstddef>
#include <string>

#include "runtime/context.h"  // defines: DeviceContext, DeviceOptions, default_cpu_threads
#include "runtime/device.h"   // defines: Device, parse_bytes, format_bytes, cpu_properties, discover_devices
#include "runtime/error.h"    // defines: Error, this_host_name
#include "tests/test_helpers.h"

namespace mt {
namespace {

using testing::contains;
using testing::error_of;

constexpr std::size_t KiB = 1024;
constexpr std::size_t MiB = 1024 * KiB;
constexpr std::size_t GiB = 1024 * MiB;

TEST(Device, ParseAndPrint) {
  EXPECT_EQ(Device::parse("cpu"), Device::cpu());
  EXPECT_EQ(Device::parse("cuda"), Device::cuda(0));
  EXPECT_EQ(Device::parse("cuda:0"), Device::cuda(0));
  const Device d = Device::parse("cuda:3");
  EXPECT_TRUE(d.is_cuda());
  EXPECT_FALSE(d.is_cpu());
  EXPECT_EQ(d.index, 3);
  EXPECT_EQ(d.str(), "cuda:3");
  EXPECT_EQ(Device::cpu().str(), "cpu");
  EXPECT_EQ(Device::parse(Device::cuda(12).str()), Device::cuda(12));
  EXPECT_NE(Device::cuda(1), Device::cuda(2));
  EXPECT_NE(Device::cpu(), Device::cuda(0));
}

TEST(Device, ParseRejectsWhatIsNotADevice) {
  for (const char* bad : {"gpu:x", "gpu", "cuda:-1", "cuda:", "cuda:1x", "cuda:x", "CPU", "", " cpu", "cuda:+1"}) {
    const std::string msg = error_of([&] { Device::parse(bad); });
    EXPECT_TRUE(contains(msg, std::string("'") + bad + "'")) << bad << ": " << msg;
    EXPECT_TRUE(contains(msg, "cpu, cuda or cuda:N")) << msg;
  }
}

TEST(Bytes, ParseUnitsArePowersOf1024) {
  EXPECT_EQ(parse_bytes("1048576"), 1048576u);
  EXPECT_EQ(parse_bytes("0"), 0u);
  EXPECT_EQ(parse_bytes("512M"), 512 * MiB);
  EXPECT_EQ(parse_bytes("2G"), 2 * GiB);
  EXPECT_EQ(parse_bytes("1.5K"), 1536u);
  EXPECT_EQ(parse_bytes("3T"), 3 * 1024 * GiB);
  EXPECT_EQ(parse_bytes("10B"), 10u);
  EXPECT_EQ(parse_bytes("4k"), 4 * KiB);
  EXPECT_EQ(parse_bytes("4KB"), 4 * KiB);
  EXPECT_EQ(parse_bytes("4KiB"), 4 * KiB);
  EXPECT_EQ(parse_bytes("4Kb"), 4 * KiB);
  EXPECT_EQ(parse_bytes("0.5G"), 512 * MiB);
}

TEST(Bytes, ParseRejectsGarbageWithTheText) {
  for (const char* bad : {"12Q", "abc", "-1", "", "1.5KX", "M", "inf", "nan", " 5", "5 M", "1GG"}) {
    const std::string msg = error_of([&] { parse_bytes(bad); });
    EXPECT_TRUE(contains(msg, std::string("'") + bad + "'")) << bad << ": " << msg;
  }
  EXPECT_TRUE(contains(error_of([] { parse_bytes("12Q"); }), "unknown unit 'Q'"));
}

// Sizes past what a size_t holds must be refused: converting them is undefined, and on x86 they
// come out as 0, which for --device-memory-limit means "no cap".
TEST(Bytes, ParseRejectsSizesTooLargeToHold) {
  for (const char* huge : {"1e30", "20000000T", "18446744073709551616"}) {
    EXPECT_THROW(parse_bytes(huge), Error) << huge;
  }
  EXPECT_EQ(parse_bytes("8388607T"), std::size_t{8388607} << 40);  // large but representable
}

TEST(Bytes, Format) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(1023), "1023 B");
  EXPECT_EQ(format_bytes(1024), "1.0 KiB");
  EXPECT_EQ(format_bytes(1536), "1.5 KiB");
  EXPECT_EQ(format_bytes(MiB), "1.0 MiB");
  EXPECT_EQ(format_bytes(512 * MiB), "512.0 MiB");
  EXPECT_EQ(format_bytes(2 * GiB), "2.0 GiB");
  EXPECT_EQ(format_bytes(GiB + GiB / 2), "1.5 GiB");
  EXPECT_EQ(format_bytes(5 * 1024 * GiB), "5.0 TiB");
  EXPECT_EQ(format_bytes(2048 * 1024 * GiB), "2048.0 TiB");  // no unit beyond TiB
}

TEST(DeviceProperties, CpuIsSane) {
  const DeviceProperties p = cpu_properties();
  EXPECT_EQ(p.device, Device::cpu());
  EXPECT_FALSE(p.name.empty());
  EXPECT_GT(p.total_memory, 0u);
  EXPECT_LE(p.free_memory, p.total_memory);
  EXPECT_GE(p.compute_units, 1);
  EXPECT_TRUE(p.pci_bus_id.empty());
}

TEST(DeviceDiscovery, NeverThrowsAndSaysWhyThereIsNoGpu) {
  DeviceDiscovery found;
  ASSERT_NO_THROW(found = discover_devices());
  EXPECT_EQ(found.cpu.device, Device::cpu());
  EXPECT_GT(found.cpu.total_memory, 0u);
  if (!found.cuda_compiled) {
    EXPECT_TRUE(found.gpus.empty());
    EXPECT_TRUE(found.cuda_unavailable_reason.empty());
  } else if (found.gpus.empty()) {
    EXPECT_FALSE(found.cuda_unavailable_reason.empty());
  } else {
    EXPECT_TRUE(found.cuda_unavailable_reason.empty());
    for (std::size_t i = 0; i < found.gpus.size(); ++i) {
      EXPECT_EQ(found.gpus[i].device, Device::cuda(static_cast<int>(i)));
      EXPECT_GT(found.gpus[i].total_memory, 0u);
      EXPECT_GE(found.gpus[i].compute_units, 1);
      EXPECT_FALSE(found.gpus[i].pci_bus_id.empty());
    }
  }
}

TEST(DeviceContext, CpuThreadCounts) {
  EXPECT_GE(default_cpu_threads(1), 1);
  EXPECT_EQ(default_cpu_threads(1 << 20), 1);  // more ranks than cores: one thread each
  EXPECT_EQ(default_cpu_threads(0), default_cpu_threads(1));
  EXPECT_TRUE(contains(error_of([] { DeviceContext ctx(DeviceOptions{Device::cpu(), 0, 0}); }),
                       "cpu threads must be at least 1"));
  DeviceContext ctx(DeviceOptions{Device::cpu(), 4 * MiB, 3});
  EXPECT_EQ(ctx.device(), Device::cpu());
  EXPECT_EQ(ctx.cpu_threads(), 3);
  EXPECT_EQ(ctx.allocator().stats().limit, 4 * MiB);
  EXPECT_EQ(ctx.allocator().device(), Device::cpu());
  EXPECT_EQ(ctx.blas_handle(), nullptr);
  EXPECT_EQ(ctx.stream().handle(), nullptr);
}

TEST(Error, SaysFileLineRankAndHost) {
  try {
    Device::parse("tpu");
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_TRUE(what.starts_with("device.cpp:")) << what;
    EXPECT_TRUE(contains(what, " [rank ? host " + this_host_name() + "]: ")) << what;
    EXPECT_TRUE(contains(what, e.message())) << what;
  }
}

}  // namespace
}  // namespace mt
