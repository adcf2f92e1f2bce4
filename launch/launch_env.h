// What the launcher (mpirun, srun, a PMIx server) says about the job. MPI is the truth here: world
// rank and size come from MPI, the local rank and the node from its shared-memory split. The
// launcher's variables are read only to report how the job was started and to warn where they
// disagree with what MPI found, which is how a wrong --ntasks-per-node, a missing --mpi=pmix or
// ranks piled onto too few GPUs show up before they cost a run.
// defines: LaunchEnvironment, read_launch_environment, launch_warnings
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "launch/binding.h"

namespace mt {

struct LaunchEnvironment {
  std::string launcher;                // "mpirun (Open MPI)", "srun (SLURM)", "PMIx", or "none"
  std::optional<std::string> slurm_job;  // SLURM_JOB_ID, also under mpirun inside an allocation
  std::optional<int> world_size, world_rank, local_rank, local_size;  // as the launcher claims them
  std::optional<int> nodes;            // SLURM_JOB_NUM_NODES
  std::optional<int> gpus_on_node;     // SLURM_GPUS_ON_NODE
  std::string describe() const;        // "srun (SLURM job 42, 2 node(s)), 8 task(s), PMIx"
};

// Reads the variables through `get` (std::getenv in the program, a map in the tests).
LaunchEnvironment read_launch_environment(const std::function<const char*(const char*)>& get);

// What disagrees, each a line naming the variable, what MPI found and the likely fix:
// the launcher's world size, rank or local rank differing from MPI's; on GPUs, the ranks on this
// node outnumbering its GPUs without --virtual-devices, or fewer ranks than GPUs (idle GPUs);
// SLURM's GPUs on the node differing from the GPUs this rank sees.
std::vector<std::string> launch_warnings(const LaunchEnvironment& env, const NodePlacement& mpi, bool on_gpus,
                                         int visible_gpus, bool virtual_devices);

}  // namespace mt
