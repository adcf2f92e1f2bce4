#include "comm/desync_check.h"

#include <algorithm>
#include <cstring>
#include <sstream>

namespace mt {

bool CollectiveFingerprint::same_call(const CollectiveFingerprint& o) const {
  return kind == o.kind && sequence == o.sequence && count == o.count && dtype == o.dtype && root == o.root &&
         op == o.op;
}

std::string CollectiveFingerprint::describe() const {
  OpRecord r;
  r.kind = static_cast<CollectiveKind>(kind);
  r.sequence = static_cast<std::uint64_t>(sequence);
  r.has_data = count > 0;
  r.dtype = static_cast<DType>(dtype);
  r.count = count;
  r.bytes = static_cast<std::size_t>(count) * dtype_size(r.dtype);
  r.op = static_cast<ReduceOp>(op);
  r.root = static_cast<int>(root);
  std::string text = r.describe();
  // The group size is the same for every member; the report names the group once.
  text = text.substr(0, text.rfind(" in a group of "));
  return text + ", called at " + file + ":" + std::to_string(line);
}

CollectiveFingerprint fingerprint_of(const CollectiveDesc& desc) {
  const OpRecord r = desc.record();
  CollectiveFingerprint f;
  f.kind = static_cast<std::int64_t>(r.kind);
  f.sequence = static_cast<std::int64_t>(r.sequence);
  f.count = r.has_data ? r.count : 0;
  f.dtype = r.has_data ? static_cast<std::int64_t>(r.dtype) : 0;
  f.root = r.kind == CollectiveKind::Broadcast ? r.root : 0;
  f.op = r.kind == CollectiveKind::Allreduce || r.kind == CollectiveKind::ReduceScatter ? static_cast<std::int64_t>(r.op) : 0;
  f.line = r.where.line();
  const std::string file = short_source_path(r.where.file_name());
  std::strncpy(f.file, file.c_str(), sizeof f.file - 1);
  return f;
}

std::optional<std::string> find_desync(const std::vector<CollectiveFingerprint>& all,
                                       const std::vector<int>& world_ranks, const std::string& label) {
  bool agree = true;
  for (const auto& f : all) agree = agree && f.same_call(all.front());
  if (agree) return std::nullopt;
  // Members grouped by what they called, in order of first appearance.
  std::vector<std::pair<std::string, std::vector<int>>> calls;
  for (std::size_t i = 0; i < all.size(); ++i) {
    const std::string what = all[i].describe();
    auto it = std::find_if(calls.begin(), calls.end(), [&](const auto& c) { return c.first == what; });
    if (it == calls.end()) it = calls.insert(calls.end(), {what, {}});
    it->second.push_back(world_ranks[i]);
  }
  std::ostringstream text;
  text << "collectives out of step on group \"" << label << "\" (found by --debug-collectives): its members called "
       << calls.size() << " different operations";
  for (const auto& [what, ranks] : calls) {
    text << "\n  world rank" << (ranks.size() > 1 ? "s " : " ");
    for (std::size_t i = 0; i < ranks.size(); ++i) text << (i ? "," : "") << ranks[i];
    text << ": " << what;
  }
  return text.str();
}

}  // namespace mt
