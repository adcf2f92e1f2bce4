// GPU tests skip, with the reason, where no GPU is usable (a CPU-only build, no driver, no device).
// defines: MT_SKIP_WITHOUT_GPU, test_device_discovery, no_gpu_reason
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "runtime/device.h"

namespace mt::testing {

inline const DeviceDiscovery& test_device_discovery() {
  static const DeviceDiscovery found = discover_devices();
  return found;
}

inline std::string no_gpu_reason() {
  const DeviceDiscovery& d = test_device_discovery();
  return d.cuda_compiled ? d.cuda_unavailable_reason : "meshtrain was built without CUDA";
}

}  // namespace mt::testing

// First statement of every GPU test.
#define MT_SKIP_WITHOUT_GPU()                                                                     \
  do {                                                                                            \
    if (::mt::testing::test_device_discovery().gpus.empty())                                      \
      GTEST_SKIP() << "no usable GPU: " << ::mt::testing::no_gpu_reason();                        \
  } while (0)
