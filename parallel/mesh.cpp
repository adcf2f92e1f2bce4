// The mesh arithmetic: strides from the order string, groups by walking one coordinate.
#include "parallel/mesh.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <sstream>
#include <utility>

#include "runtime/error.h"

namespace mt {

void resolve_data_parallel(MeshShape& shape, int world_size) {
  MT_REQUIRE(shape.dp >= 0, "--dp must be at least 1 (or 0 for ranks / (tp x cp x pp)), got ", shape.dp);
  MT_REQUIRE(shape.tp >= 1 && shape.pp >= 1 && shape.cp >= 1, "--tp, --cp and --pp must be at least 1");
  if (shape.dp != 0) return;
  const std::int64_t others = std::int64_t{shape.tp} * shape.cp * shape.pp;
  MT_REQUIRE(world_size % others == 0, "--tp ", shape.tp,
             shape.cp > 1 ? " x --cp " + std::to_string(shape.cp) : std::string(), " x --pp ", shape.pp, " = ", others,
             " does not divide the job's ", world_size, " ranks (launch a multiple of it, or give --dp)");
  shape.dp = static_cast<int>(world_size / others);
}

std::string MeshShape::describe() const {
  std::ostringstream out;
  out << "dp=" << dp << " tp=" << tp;
  if (cp > 1) out << " cp=" << cp;
  out << " pp=" << pp << " (order " << (cp > 1 ? full_order() : order) << ")";
  return out.str();
}

std::string MeshShape::full_order() const {
  if (order.find("cp") != std::string::npos) return order;
  const std::size_t tp_at = order.find("tp");
  if (tp_at == std::string::npos) return order;  // not an order: Mesh says so
  return order.substr(0, tp_at + 2) + "-cp" + order.substr(tp_at + 2);
}

namespace {

// "tp-dp-pp" -> {"tp", "dp", "pp"}
std::vector<std::string> split_dashes(const std::string& text) {
  std::vector<std::string> parts(1);
  for (char c : text) {
    if (c == '-') parts.emplace_back();
    else parts.back() += c;
  }
  return parts;
}

}  // namespace

Mesh::Mesh(MeshShape shape) : shape_(std::move(shape)) {
  MT_REQUIRE(shape_.dp >= 1, "--dp must be at least 1, got ", shape_.dp);
  MT_REQUIRE(shape_.tp >= 1, "--tp must be at least 1, got ", shape_.tp);
  MT_REQUIRE(shape_.pp >= 1, "--pp must be at least 1, got ", shape_.pp);
  MT_REQUIRE(shape_.cp >= 1, "--cp must be at least 1, got ", shape_.cp);
  // MPI ranks are ints: a product beyond that is no job (and would overflow every stride below).
  const std::int64_t ranks = std::int64_t{shape_.dp} * shape_.tp * shape_.pp * shape_.cp;
  MT_REQUIRE(ranks <= std::numeric_limits<int>::max(), "--dp ", shape_.dp, " x --tp ", shape_.tp, " x --pp ",
             shape_.pp, shape_.cp > 1 ? " x --cp " + std::to_string(shape_.cp) : std::string(), " = ", ranks,
             " ranks, more than MPI can number");
  size_ = {shape_.tp, shape_.dp, shape_.pp, shape_.cp};

  const std::vector<std::string> names = split_dashes(shape_.full_order());
  std::array<bool, kDims> seen{};
  bool valid = names.size() == kDims;
  std::array<Dim, kDims> order{};
  for (std::size_t i = 0; valid && i < names.size(); ++i) {
    const std::string& n = names[i];
    const int d = n == "tp" ? Tp : n == "dp" ? Dp : n == "pp" ? Pp : n == "cp" ? Cp : -1;
    valid = d >= 0 && !seen[static_cast<std::size_t>(d)];
    if (valid) {
      seen[static_cast<std::size_t>(d)] = true;
      order[i] = static_cast<Dim>(d);
    }
  }
  MT_REQUIRE(valid, "--mesh-order '", shape_.order,
             "' must name tp, dp and pp once each, fastest-varying first, separated by '-' (e.g. tp-dp-pp), "
             "and may name cp once (else it follows tp)");

  int stride = 1;
  for (Dim d : order) {
    stride_[d] = stride;
    stride *= size_[d];
  }
}

int Mesh::coordinate(const MeshCoord& c, Dim dim) const {
  return dim == Tp ? c.tp : dim == Dp ? c.dp : dim == Pp ? c.pp : c.cp;
}

MeshCoord Mesh::coord_of(int rank) const {
  MT_CHECK(rank >= 0 && rank < world_size(), "rank ", rank, " outside a mesh of ", world_size());
  const auto at = [&](Dim d) { return (rank / stride_[d]) % size_[d]; };
  return {at(Dp), at(Tp), at(Pp), at(Cp)};
}

int Mesh::rank_of(MeshCoord c) const {
  int rank = 0;
  for (const Dim d : {Tp, Dp, Pp, Cp}) {
    const int x = coordinate(c, d);
    MT_CHECK(x >= 0 && x < size_[d], "coordinate dp ", c.dp, " tp ", c.tp, " pp ", c.pp, " cp ", c.cp, " outside ",
             shape_.describe());
    rank += x * stride_[d];
  }
  return rank;
}

std::vector<int> Mesh::along(int rank, Dim dim) const {
  const int base = rank - coordinate(coord_of(rank), dim) * stride_[dim];
  std::vector<int> members;
  for (int i = 0; i < size_[dim]; ++i) members.push_back(base + i * stride_[dim]);
  return members;
}

std::vector<int> Mesh::tp_group(int rank) const { return along(rank, Tp); }
std::vector<int> Mesh::dp_group(int rank) const { return along(rank, Dp); }
std::vector<int> Mesh::pp_group(int rank) const { return along(rank, Pp); }
std::vector<int> Mesh::cp_group(int rank) const { return along(rank, Cp); }

std::vector<int> Mesh::dp_cp_group(int rank) const {
  std::vector<int> members;
  for (const int r : along(rank, Dp))
    for (const int c : along(r, Cp)) members.push_back(c);
  std::sort(members.begin(), members.end());
  return members;
}

std::vector<int> Mesh::embedding_group(int rank) const {
  const MeshCoord c = coord_of(rank);
  if (shape_.pp == 1) return {rank};
  if (c.pp != 0 && c.pp != shape_.pp - 1) return {};
  return {rank_of({c.dp, c.tp, 0, c.cp}), rank_of({c.dp, c.tp, shape_.pp - 1, c.cp})};
}

std::vector<std::vector<int>> Mesh::all_of(std::vector<int> (Mesh::*group)(int) const) const {
  std::vector<std::vector<int>> groups;
  for (int r = 0; r < world_size(); ++r) {
    std::vector<int> g = (this->*group)(r);
    // Each group once, when met at its smallest member (the lists are increasing).
    if (!g.empty() && g.front() == r) groups.push_back(std::move(g));
  }
  return groups;
}

std::vector<std::vector<int>> Mesh::all_tp_groups() const { return all_of(&Mesh::tp_group); }
std::vector<std::vector<int>> Mesh::all_dp_groups() const { return all_of(&Mesh::dp_group); }
std::vector<std::vector<int>> Mesh::all_pp_groups() const { return all_of(&Mesh::pp_group); }
std::vector<std::vector<int>> Mesh::all_cp_groups() const { return all_of(&Mesh::cp_group); }
std::vector<std::vector<int>> Mesh::all_dp_cp_groups() const { return all_of(&Mesh::dp_cp_group); }
std::vector<std::vector<int>> Mesh::all_embedding_groups() const { return all_of(&Mesh::embedding_group); }

}  // namespace mt
