// The launcher's environment as reported and checked against what MPI found (no MPI here: the
// variables come from a map, the placement is made up).
#include "launch/launch_env.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace mt {
namespace {

LaunchEnvironment read(const std::map<std::string, std::string>& vars) {
  return read_launch_environment([&](const char* name) -> const char* {
    const auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

NodePlacement placement(int rank, int size, int local_rank, int local_size) {
  return {rank, size, local_rank, local_size, "n1", ""};
}

TEST(LaunchEnvironment, MpirunInsideASlurmAllocationIsMpirun) {
  const LaunchEnvironment env = read({{"OMPI_COMM_WORLD_SIZE", "8"}, {"OMPI_COMM_WORLD_RANK", "3"},
                                      {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                                      {"SLURM_JOB_ID", "42"}, {"SLURM_JOB_NUM_NODES", "4"}, {"SLURM_PROCID", "0"},
                                      {"SLURM_STEP_ID", "4294967291"}, {"PMIX_RANK", "3"}});
  EXPECT_EQ(env.launcher, "mpirun (Open MPI), PMIx");
  EXPECT_EQ(env.world_size, 8);
  EXPECT_EQ(env.world_rank, 3);
  EXPECT_EQ(env.describe(), "mpirun (Open MPI), PMIx in SLURM job 42 on 4 node(s)");
  EXPECT_TRUE(launch_warnings(env, placement(3, 8, 1, 2), false, 0, false).empty());
}

TEST(LaunchEnvironment, SrunDirectLaunch) {
  const LaunchEnvironment env = read({{"SLURM_JOB_ID", "7"}, {"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "5"},
                                      {"SLURM_LOCALID", "1"}, {"SLURM_STEP_NUM_TASKS", "8"}, {"PMIX_RANK", "5"}});
  EXPECT_EQ(env.launcher, "srun (SLURM), PMIx");
  EXPECT_EQ(env.world_size, 8);
  EXPECT_EQ(env.local_rank, 1);
  EXPECT_TRUE(launch_warnings(env, placement(5, 8, 1, 4), false, 0, false).empty());
}

TEST(LaunchEnvironment, NoLauncher) {
  const LaunchEnvironment env = read({});
  EXPECT_EQ(env.describe(), "no launcher (a single process)");
  EXPECT_TRUE(launch_warnings(env, placement(0, 1, 0, 1), false, 0, false).empty());
}

TEST(LaunchWarnings, SrunWithoutPmixGivesSingletons) {
  // srun without --mpi=pmix: every task starts alone, as rank 0 of 1.
  const LaunchEnvironment env = read({{"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "2"}, {"SLURM_NTASKS", "4"}});
  const auto w = launch_warnings(env, placement(0, 1, 0, 1), false, 0, false);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0].find("started 4 task(s) but MPI sees 1 rank(s)"), std::string::npos) << w[0];
  EXPECT_NE(w[0].find("--mpi=pmix"), std::string::npos) << w[0];
}

TEST(LaunchWarnings, LocalRankDisagreement) {
  const LaunchEnvironment env = read({{"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_RANK", "2"},
                                      {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}});
  const auto w = launch_warnings(env, placement(2, 4, 2, 4), false, 0, false);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0].find("local rank is 0, MPI's shared-memory split gives 2"), std::string::npos) << w[0];
}

TEST(LaunchWarnings, GpusOutnumberedIdleOrMiscounted) {
  const LaunchEnvironment env = read({{"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "8"},
                                      {"SLURM_GPUS_ON_NODE", "8"}});
  auto w = launch_warnings(env, placement(0, 8, 0, 8), true, 4, false);
  ASSERT_EQ(w.size(), 2u);
  EXPECT_NE(w[0].find("8 ranks on this node share 4 GPU(s)"), std::string::npos) << w[0];
  EXPECT_NE(w[1].find("SLURM_GPUS_ON_NODE is 8 but this rank sees 4"), std::string::npos) << w[1];
  EXPECT_EQ(launch_warnings(env, placement(0, 8, 0, 8), true, 8, true).size(), 0u);
  w = launch_warnings(env, placement(0, 8, 0, 2), true, 8, false);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0].find("only 2 rank(s) on this node for 8 visible GPU(s)"), std::string::npos) << w[0];
}

}  // namespace
}  // namespace mt
