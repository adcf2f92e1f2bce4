#include "runtime/openmp_policy.h"

#include <unistd.h>

#include <cstdlib>

namespace mt {

void prefer_passive_openmp(char** argv) {
  if (std::getenv("OMP_WAIT_POLICY") != nullptr || std::getenv("GOMP_SPINCOUNT") != nullptr) return;
  if (setenv("OMP_WAIT_POLICY", "passive", 1) != 0) return;
  execv("/proc/self/exe", argv);
  // Only reached when exec failed: carry on with the default policy, which is slower, not wrong.
}

}  // namespace mt
