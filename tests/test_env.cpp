#include "tests/test_env.h"

#include <map>
#include <memory>

#include "comm/mpi_communicator.h"

namespace mt::testing {
namespace {
struct Env {
  std::unique_ptr<DeviceContext> context;
  std::unique_ptr<Communicator> world;
  std::map<std::string, std::unique_ptr<Communicator>> groups;
};
Env& env() {
  static Env e;
  return e;
}
}  // namespace

DeviceContext& test_context() {
  if (!env().context) env().context = std::make_unique<DeviceContext>(DeviceOptions{Device::cpu(), 0, 1});
  return *env().context;
}

Communicator& test_world() {
  if (!env().world) env().world = MpiCommunicator::world(CommOptions{.timeout = std::chrono::seconds(120)});
  return *env().world;
}

Communicator* test_group(const std::string& name, const std::vector<int>& members) {
  auto it = env().groups.find(name);
  if (it == env().groups.end()) it = env().groups.emplace(name, test_world().split(members)).first;
  return it->second.get();
}

void shutdown_test_env() {
  env().groups.clear();
  env().world.reset();
  env().context.reset();
}

}  // namespace mt::testing
