#include "commands/devices_command.h"

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>
#include <set>
#include <sstream>

#include "comm/agreement.h"  // defines: allgather_strings
#include "comm/nccl_communicator.h"
#include "launch/command_line.h"
#include "launch/session.h"
#include "launch/table.h"
#include "parallel/mesh.h"
#include "runtime/error.h"

namespace po = boost::program_options;

namespace mt {
namespace {

constexpr char kSep = '\x1f';

std::string join(const std::vector<std::string>& fields) {
  std::string out;
  for (const auto& f : fields) out += (out.empty() ? "" : std::string(1, kSep)) + f;
  return out;
}

std::vector<std::string> split(const std::string& row) {
  std::vector<std::string> fields;
  std::stringstream in(row);
  std::string field;
  while (std::getline(in, field, kSep)) fields.push_back(field);
  return fields;
}

// --tp, --cp, --pp and --mesh-order: the mesh whose coordinates the table shows (dp takes the ranks
// they leave, as `train --dp 0` does); none of them given: no coordinates.
std::optional<Mesh> read_mesh(const po::variables_map& vm, int world_size) {
  const bool given = !vm["tp"].defaulted() || !vm["cp"].defaulted() || !vm["pp"].defaulted() ||
                     !vm["mesh-order"].defaulted();
  if (!given) return std::nullopt;
  MeshShape shape;
  shape.tp = vm["tp"].as<int>();
  shape.cp = vm["cp"].as<int>();
  shape.pp = vm["pp"].as<int>();
  shape.order = vm["mesh-order"].as<std::string>();
  shape.dp = 0;  // the ranks the others leave
  resolve_data_parallel(shape, world_size);
  return Mesh(shape);
}

// "dp 1 tp 0 pp 0" (" cp 1" after tp where cp > 1): a rank's coordinates.
std::string coordinates(const Mesh& mesh, int rank) {
  const MeshCoord c = mesh.coord_of(rank);
  return "dp " + std::to_string(c.dp) + " tp " + std::to_string(c.tp) +
         (mesh.shape().cp > 1 ? " cp " + std::to_string(c.cp) : std::string()) + " pp " + std::to_string(c.pp);
}

}  // namespace

int devices_command(const std::vector<std::string>& args, const MpiRuntime& mpi) {
  po::options_description desc("options");
  add_runtime_options(desc);
  po::options_description layout("layout (optional: each rank's coordinates in it, as `train` would place them)");
  layout.add_options()
      ("tp", po::value<int>()->default_value(1), "tensor-parallel ranks")
      ("cp", po::value<int>()->default_value(1),
       "context-parallel ranks per sequence (with cp > 1 the table shows each rank's cp coordinate and the "
       "cp groups: the ranks that split one sequence and pass key/value blocks around their ring)")
      ("pp", po::value<int>()->default_value(1), "pipeline stages")
      ("mesh-order", po::value<std::string>()->default_value("tp-dp-pp"),
       "rank order, fastest-varying first (tp, dp, pp and optionally cp; without cp, cp follows tp)");
  desc.add(layout);
  auto vm = parse_command_line("devices",
                               "Shows where every rank runs: host, world and local rank, device, its memory "
                               "and cap, CPU threads and the communication backend chosen; with a layout "
                               "(--tp, --cp, --pp, --mesh-order), each rank's coordinates in it.",
                               desc, args, mpi.world_rank());
  if (!vm) return 0;
  const std::optional<Mesh> mesh = read_mesh(*vm, mpi.world_size());
  const RuntimeOptions options = read_runtime_options(*vm);
  Session s = open_session(options);

  const DeviceProperties& props = s.binding.properties;
  const std::size_t cap = s.context->options().memory_limit;
  const std::string row = join({s.placement.host, std::to_string(s.placement.world_rank),
                                std::to_string(s.placement.local_rank), s.binding.device.str(), props.name,
                                format_bytes(props.total_memory), cap ? format_bytes(cap) : "none",
                                std::to_string(s.context->cpu_threads()), s.world->backend_name()});
  const auto rows = allgather_strings(*s.world, *s.context, row);
  std::string warnings;
  for (const std::string& w : s.warnings) warnings += w + '\n';
  const auto all_warnings = allgather_strings(*s.world, *s.context, warnings);
  // A collective over the chosen backend proves it works, not only that it was chosen.
  s.world->barrier();
  if (s.placement.world_rank != 0) return 0;

  std::vector<std::string> header{"host", "rank", "local", "device", "name", "memory", "cap", "threads", "backend"};
  if (mesh) header.push_back("coordinates");
  TextTable table(header);
  std::set<std::string> hosts;
  for (std::size_t r = 0; r < rows.size(); ++r) {
    auto fields = split(rows[r]);
    if (!fields.empty()) hosts.insert(fields[0]);
    if (mesh) fields.push_back(coordinates(*mesh, static_cast<int>(r)));
    table.add_row(std::move(fields));
  }
  std::printf("meshtrain devices: %d rank(s) on %zu host(s); backend %s (%s)%s\n", s.placement.world_size, hosts.size(),
              s.world->backend_name().c_str(), s.backend.reason.c_str(),
              nccl_compiled() ? (", NCCL " + nccl_version() + " built in").c_str() : "");
  std::printf("%s", table.render().c_str());
  std::printf("launched by %s\n", s.launch.describe().c_str());
  if (mesh) {
    std::printf("layout %s\n", mesh->shape().describe().c_str());
    if (mesh->shape().cp > 1) std::printf("cp groups (one sequence each): %s\n", format_groups(mesh->all_cp_groups()).c_str());
  }
  for (const std::string& lines : all_warnings) {
    std::istringstream in(lines);
    for (std::string w; std::getline(in, w);) std::printf("warning: %s\n", w.c_str());
  }
  return 0;
}

}  // namespace mt
