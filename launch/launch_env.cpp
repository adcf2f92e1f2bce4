#include "launch/launch_env.h"

#include <charconv>
#include <string_view>

namespace mt {
namespace {

std::optional<int> int_var(const std::function<const char*(const char*)>& get, const char* name) {
  const char* text = get(name);
  if (text == nullptr) return std::nullopt;
  const std::string_view s(text);
  int value = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return value;
}

}  // namespace

LaunchEnvironment read_launch_environment(const std::function<const char*(const char*)>& get) {
  LaunchEnvironment env;
  if (const char* job = get("SLURM_JOB_ID")) env.slurm_job = job;
  env.nodes = int_var(get, "SLURM_JOB_NUM_NODES");
  env.gpus_on_node = int_var(get, "SLURM_GPUS_ON_NODE");
  if (get("OMPI_COMM_WORLD_SIZE") != nullptr) {
    // mpirun's daemons set these for every rank they start (also inside a SLURM allocation, where
    // the batch step's SLURM_PROCID and SLURM_LOCALID are inherited and say nothing about ranks).
    env.launcher = "mpirun (Open MPI)";
    env.world_size = int_var(get, "OMPI_COMM_WORLD_SIZE");
    env.world_rank = int_var(get, "OMPI_COMM_WORLD_RANK");
    env.local_rank = int_var(get, "OMPI_COMM_WORLD_LOCAL_RANK");
    env.local_size = int_var(get, "OMPI_COMM_WORLD_LOCAL_SIZE");
  } else if (get("SLURM_STEP_ID") != nullptr && get("SLURM_PROCID") != nullptr) {
    env.launcher = "srun (SLURM)";
    env.world_size = int_var(get, "SLURM_STEP_NUM_TASKS");
    if (!env.world_size) env.world_size = int_var(get, "SLURM_NTASKS");
    env.world_rank = int_var(get, "SLURM_PROCID");
    env.local_rank = int_var(get, "SLURM_LOCALID");
  } else if (get("PMIX_RANK") != nullptr) {
    env.launcher = "PMIx";
    env.world_rank = int_var(get, "PMIX_RANK");
  } else {
    env.launcher = "none";
  }
  if (env.launcher != "none" && get("PMIX_RANK") != nullptr && env.launcher != "PMIx") env.launcher += ", PMIx";
  return env;
}

std::string LaunchEnvironment::describe() const {
  std::string s = launcher == "none"   ? "no launcher (a single process)"
                  : launcher == "PMIx" ? "PMIx alone (a single process with Open MPI's own server, or another PMIx launcher)"
                                       : launcher;
  if (slurm_job) {
    s += " in SLURM job " + *slurm_job;
    if (nodes) s += " on " + std::to_string(*nodes) + " node(s)";
  }
  return s;
}

std::vector<std::string> launch_warnings(const LaunchEnvironment& env, const NodePlacement& mpi, bool on_gpus,
                                         int visible_gpus, bool virtual_devices) {
  std::vector<std::string> out;
  const std::string where = "rank " + std::to_string(mpi.world_rank) + " on " + mpi.host + ": ";
  if (env.world_size && *env.world_size != mpi.world_size)
    out.push_back(where + env.launcher + " started " + std::to_string(*env.world_size) + " task(s) but MPI sees " +
                  std::to_string(mpi.world_size) + " rank(s): the tasks did not join one job (under srun, give " +
                  "--mpi=pmix; Debian's Open MPI has no PMI2)");
  else if (env.world_rank && *env.world_rank != mpi.world_rank)
    out.push_back(where + "the launcher numbers this task " + std::to_string(*env.world_rank) + ", MPI " +
                  std::to_string(mpi.world_rank));
  if (env.local_rank && *env.local_rank != mpi.local_rank)
    out.push_back(where + "the launcher's local rank is " + std::to_string(*env.local_rank) +
                  ", MPI's shared-memory split gives " + std::to_string(mpi.local_rank) +
                  " (meshtrain binds devices by MPI's: check that every node has its own hostname)");
  if (on_gpus) {
    if (mpi.local_size > visible_gpus && !virtual_devices)
      out.push_back(where + std::to_string(mpi.local_size) + " ranks on this node share " +
                    std::to_string(visible_gpus) + " GPU(s): give one task per GPU (--ntasks-per-node, " +
                    "--map-by ppr:G:node) or --virtual-devices to share them on purpose");
    else if (mpi.local_size < visible_gpus)
      out.push_back(where + "only " + std::to_string(mpi.local_size) + " rank(s) on this node for " +
                    std::to_string(visible_gpus) + " visible GPU(s): the others stay idle");
    if (env.gpus_on_node && *env.gpus_on_node != visible_gpus)
      out.push_back(where + "SLURM_GPUS_ON_NODE is " + std::to_string(*env.gpus_on_node) + " but this rank sees " +
                    std::to_string(visible_gpus) + " GPU(s) (check CUDA_VISIBLE_DEVICES and --gpus-per-node)");
  }
  return out;
}

}  // namespace mt
