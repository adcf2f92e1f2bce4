#include "tests/test_env.h"

#include "comm/mpi_communicator.h"

namespace mt::testing {

DeviceContext& test_context() {
  static DeviceContext ctx(DeviceOptions{Device::cpu(), 0, 1});
  return ctx;
}

Communicator& test_world() {
  static std::unique_ptr<Communicator> world = MpiCommunicator::world(CommOptions{std::chrono::seconds(120)});
  return *world;
}

}  // namespace mt::testing
