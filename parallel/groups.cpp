// Turning the mesh's member lists into communicators.
#include "parallel/groups.h"

#include <sstream>
#include <vector>

#include "runtime/error.h"

namespace mt {

ParallelGroups build_groups(Communicator& world, const Mesh& mesh) {
  // Every rank checks the same two numbers, so every rank throws and none waits in a split.
  MT_REQUIRE(world.size() == mesh.world_size(), "the mesh ", mesh.shape().describe(), " needs ", mesh.world_size(),
             " ranks, but the job has ", world.size(), " (launch with -np ", mesh.world_size(),
             mesh.shape().cp > 1 ? " or change --dp/--tp/--cp/--pp)" : " or change --dp/--tp/--pp)");
  const int rank = world.rank();
  // Braced initializers run in order, so every rank splits in the same order, as collectives require.
  ParallelGroups groups{.mesh = mesh,
                        .coord = mesh.coord_of(rank),
                        .world_rank = rank,
                        .tp = world.split(mesh.tp_group(rank), "tp"),
                        .dp = world.split(mesh.dp_group(rank), "dp"),
                        .pp = world.split(mesh.pp_group(rank), "pp"),
                        .embedding = world.split(mesh.embedding_group(rank), "embedding"),  // middle stage: null
                        .cp = nullptr,
                        .dp_cp = nullptr};
  if (mesh.shape().cp > 1) {
    groups.cp = world.split(mesh.cp_group(rank), "cp");
    groups.dp_cp = world.split(mesh.dp_cp_group(rank), "dp x cp");
  }
  MT_CHECK(groups.tp && groups.dp && groups.pp, "a split returned no communicator for rank ", rank);
  return groups;
}

namespace {

std::string list(const Communicator& comm) {
  std::ostringstream out;
  out << "[";
  const std::vector<int> ranks = comm.world_ranks();
  for (std::size_t i = 0; i < ranks.size(); ++i) out << (i ? "," : "") << ranks[i];
  out << "]";
  return out.str();
}

}  // namespace

std::string describe_rank(const ParallelGroups& g) {
  std::ostringstream out;
  out << "rank " << g.world_rank << ": dp " << g.coord.dp << " tp " << g.coord.tp;
  if (g.cp) out << " cp " << g.coord.cp;
  out << " stage " << g.coord.pp << " (tp group " << list(*g.tp) << ", dp group " << list(*g.dp);
  if (g.cp) out << ", cp group " << list(*g.cp);
  out << ", pp group " << list(*g.pp) << ")";
  return out.str();
}

}  // namespace mt
