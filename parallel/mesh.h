// The device mesh as pure arithmetic: sizes and an order -> each rank's coordinates and the member
// lists of its tensor-, context-, data- and pipeline-parallel groups. No MPI here (see groups.h).
// Context parallelism (cp) splits each sequence over cp ranks that hold the same weights: their
// gradients are reduced over dp x cp together (dp_cp_group).
// defines: MeshShape, resolve_data_parallel, MeshCoord, Mesh
#pragma once

#include <array>
#include <string>
#include <vector>

namespace mt {

struct MeshShape {
  int dp = 1, tp = 1, pp = 1, cp = 1;
  // The dimensions from fastest-varying to slowest. "tp-dp-pp": rank = tp + TP * (dp + DP * pp),
  // so a tensor-parallel group is consecutive ranks (one node) and a stage is a block of ranks. An
  // order without cp puts it right after tp (cp passes key/value blocks every layer: next to tp,
  // the most traffic).
  std::string order = "tp-dp-pp";

  int world_size() const { return dp * tp * pp * cp; }
  // "dp=2 tp=2 pp=2 (order tp-dp-pp)"; with cp > 1 "dp=2 tp=2 cp=2 pp=2 (order tp-cp-dp-pp)".
  std::string describe() const;
  std::string full_order() const;  // the order with cp named ("tp-cp-dp-pp" for "tp-dp-pp")
};

// dp 0 takes the ranks tp x cp x pp leave in a job of world_size; UsageError for a size below 1
// (dp below 0) or tp x cp x pp not dividing the job.
void resolve_data_parallel(MeshShape& shape, int world_size);

struct MeshCoord {
  int dp = 0, tp = 0, pp = 0, cp = 0;
  bool operator==(const MeshCoord&) const = default;
};

class Mesh {
 public:
  // Requires sizes >= 1 and an order naming tp, dp and pp once each, and cp at most once.
  explicit Mesh(MeshShape shape);

  const MeshShape& shape() const { return shape_; }
  int world_size() const { return shape_.world_size(); }

  MeshCoord coord_of(int rank) const;  // rank in [0, world_size)
  int rank_of(MeshCoord coord) const;

  // Member lists in world-rank numbering, each ordered by the coordinate that varies in it.
  std::vector<int> tp_group(int rank) const;  // same dp, cp and stage
  std::vector<int> dp_group(int rank) const;  // same tp, cp and stage
  std::vector<int> pp_group(int rank) const;  // same dp, tp and cp, by stage
  std::vector<int> cp_group(int rank) const;  // same dp, tp and stage: one sequence's ranks
  // Same tp and stage: the ranks that hold the same weights, over which gradients are reduced
  // (the dp group when cp == 1). In world-rank order.
  std::vector<int> dp_cp_group(int rank) const;
  // The ranks holding the tied token embedding: {first stage, last stage} with this rank's dp, tp
  // and cp; {rank} alone when pp == 1; empty on a middle stage (it holds no embedding).
  std::vector<int> embedding_group(int rank) const;

  // Every group of a kind, ordered by smallest member; for tests and printing.
  std::vector<std::vector<int>> all_tp_groups() const;
  std::vector<std::vector<int>> all_dp_groups() const;
  std::vector<std::vector<int>> all_pp_groups() const;
  std::vector<std::vector<int>> all_cp_groups() const;
  std::vector<std::vector<int>> all_dp_cp_groups() const;
  std::vector<std::vector<int>> all_embedding_groups() const;  // middle stages are in none

 private:
  enum Dim { Tp = 0, Dp = 1, Pp = 2, Cp = 3 };
  static constexpr std::size_t kDims = 4;
  std::vector<int> along(int rank, Dim dim) const;  // ranks differing from `rank` only in `dim`
  std::vector<std::vector<int>> all_of(std::vector<int> (Mesh::*group)(int) const) const;

  MeshShape shape_;
  int coordinate(const MeshCoord& c, Dim dim) const;
  std::array<int, kDims> size_{};    // by Dim
  std::array<int, kDims> stride_{};  // by Dim, from the order
};

}  // namespace mt
