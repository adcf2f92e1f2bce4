// The 3D device mesh as pure arithmetic: sizes and an order -> each rank's coordinates and the
// member lists of its tensor-, data- and pipeline-parallel groups. No MPI here (see groups.h).
// defines: MeshShape, MeshCoord, Mesh
#pragma once

#include <array>
#include <string>
#include <vector>

namespace mt {

struct MeshShape {
  int dp = 1, tp = 1, pp = 1;
  // The dimensions from fastest-varying to slowest. "tp-dp-pp": rank = tp + TP * (dp + DP * pp),
  // so a tensor-parallel group is consecutive ranks (one node) and a stage is a block of ranks.
  std::string order = "tp-dp-pp";

  int world_size() const { return dp * tp * pp; }
  std::string describe() const;  // "dp=2 tp=2 pp=2 (order tp-dp-pp)"
};

struct MeshCoord {
  int dp = 0, tp = 0, pp = 0;
  bool operator==(const MeshCoord&) const = default;
};

class Mesh {
 public:
  // Requires sizes >= 1 and an order naming tp, dp and pp once each ("a-b-c").
  explicit Mesh(MeshShape shape);

  const MeshShape& shape() const { return shape_; }
  int world_size() const { return shape_.world_size(); }

  MeshCoord coord_of(int rank) const;  // rank in [0, world_size)
  int rank_of(MeshCoord coord) const;

  // Member lists in world-rank numbering, each ordered by the coordinate that varies in it.
  std::vector<int> tp_group(int rank) const;  // same dp and stage
  std::vector<int> dp_group(int rank) const;  // same tp and stage
  std::vector<int> pp_group(int rank) const;  // same dp and tp, by stage
  // The ranks holding the tied token embedding: {first stage, last stage} with this rank's dp and
  // tp; {rank} alone when pp == 1; empty on a middle stage (it holds no embedding).
  std::vector<int> embedding_group(int rank) const;

  // Every group of a kind, ordered by smallest member; for tests and printing.
  std::vector<std::vector<int>> all_tp_groups() const;
  std::vector<std::vector<int>> all_dp_groups() const;
  std::vector<std::vector<int>> all_pp_groups() const;
  std::vector<std::vector<int>> all_embedding_groups() const;  // middle stages are in none

 private:
  enum Dim { Tp = 0, Dp = 1, Pp = 2 };
  std::vector<int> along(int rank, Dim dim) const;  // ranks differing from `rank` only in `dim`
  std::vector<std::vector<int>> all_of(std::vector<int> (Mesh::*group)(int) const) const;

  MeshShape shape_;
  std::array<int, 3> size_{};    // by Dim
  std::array<int, 3> stride_{};  // by Dim, from the order
};

}  // namespace mt
