// The communicators of the mesh: one split of the world per kind of group, returned as a struct
// that is passed down explicitly (no global group state).
// defines: ParallelGroups, build_groups, describe_rank
#pragma once

#include <memory>
#include <string>

#include "comm/communicator.h"
#include "parallel/mesh.h"

namespace mt {

struct ParallelGroups {
  Mesh mesh;
  MeshCoord coord;  // this rank's
  int world_rank = 0;
  std::unique_ptr<Communicator> tp, dp, pp;  // always non-null (size-1 groups included)
  std::unique_ptr<Communicator> embedding;   // first and last stage of this dp, tp, cp; null on middle stages
  // With cp > 1 only (null otherwise: no split made): this sequence's ranks, and the dp x cp ranks
  // that hold the same weights.
  std::unique_ptr<Communicator> cp, dp_cp;

  // Where gradients are reduced: dp x cp (the dp group when cp == 1).
  Communicator& gradient_group() const { return dp_cp ? *dp_cp : *dp; }

  bool first_stage() const { return coord.pp == 0; }
  bool last_stage() const { return coord.pp == mesh.shape().pp - 1; }
};

// Collective over `world`, which must be the world communicator (its ranks are the mesh's ranks)
// and have mesh.world_size() ranks; a mismatch throws the same Error on every rank.
ParallelGroups build_groups(Communicator& world, const Mesh& mesh);

// One line for the start-up print:
// "rank 5: dp 0 tp 1 stage 1 (tp group [4,5], dp group [5,7], pp group [1,5])"
std::string describe_rank(const ParallelGroups& groups);

}  // namespace mt
