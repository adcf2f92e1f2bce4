#include "commands/devices_command.h"

#include <cstdio>
#include <set>
#include <sstream>

#include "comm/agreement.h"  // defines: allgather_strings
#include "comm/nccl_communicator.h"
#include "launch/command_line.h"
#include "launch/session.h"
#include "launch/table.h"

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

}  // namespace

int devices_command(const std::vector<std::string>& args, const MpiRuntime& mpi) {
  po::options_description desc("options");
  add_runtime_options(desc);
  auto vm = parse_command_line("devices",
                               "Shows where every rank runs: host, world and local rank, device, its memory "
                               "and cap, CPU threads and the communication backend chosen.",
                               desc, args, mpi.world_rank());
  if (!vm) return 0;
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

  TextTable table({"host", "rank", "local", "device", "name", "memory", "cap", "threads", "backend"});
  std::set<std::string> hosts;
  for (const auto& r : rows) {
    auto fields = split(r);
    if (!fields.empty()) hosts.insert(fields[0]);
    table.add_row(std::move(fields));
  }
  std::printf("meshtrain devices: %d rank(s) on %zu host(s); backend %s (%s)%s\n", s.placement.world_size, hosts.size(),
              s.world->backend_name().c_str(), s.backend.reason.c_str(),
              nccl_compiled() ? (", NCCL " + nccl_version() + " built in").c_str() : "");
  std::printf("%s", table.render().c_str());
  std::printf("launched by %s\n", s.launch.describe().c_str());
  for (const std::string& lines : all_warnings) {
    std::istringstream in(lines);
    for (std::string w; std::getline(in, w);) std::printf("warning: %s\n", w.c_str());
  }
  return 0;
}

}  // namespace mt
