// What a command runs with once MPI is up: where this rank sits, its device and context, the world
// communicator and why its backend was chosen. Built collectively by every rank.
// defines: Session, open_session
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/backend_selection.h"
#include "comm/communicator.h"
#include "comm/watchdog.h"
#include "launch/binding.h"
#include "launch/launch_env.h"
#include "launch/options.h"
#include "runtime/context.h"

namespace mt {

struct Session {
  NodePlacement placement;
  LaunchEnvironment launch;           // what the launcher says (reported, checked against MPI)
  std::vector<std::string> warnings;  // this rank's disagreements between the two (launch_warnings)
  Binding binding;
  std::unique_ptr<DeviceContext> context;
  BackendChoice backend;
  std::shared_ptr<Watchdog> watchdog;  // every op's deadline; milestones go to watchdog->mark()
  std::unique_ptr<Communicator> world;
};

Session open_session(const RuntimeOptions& options);

}  // namespace mt
