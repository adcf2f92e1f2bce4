// The collective desync detector (--debug-collectives). Before each collective the members of
// the group exchange a fingerprint of what they are about to call: op, sequence number, element
// count, dtype, root and reduction, and the place it is called from. Members that disagree would
// otherwise hang, or worse, silently pair one rank's allreduce with another's; here every member
// gets the same report, naming which ranks called what and from where.
// defines: CollectiveFingerprint, fingerprint_of, find_desync
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace mt {

// Plain bytes: exchanged as they are between ranks of one build.
struct CollectiveFingerprint {
  std::int64_t kind = 0;
  std::int64_t sequence = 0;
  std::int64_t count = 0;  // elements of the input (the output where there is none)
  std::int64_t dtype = 0;
  std::int64_t root = 0;   // broadcast only, else 0
  std::int64_t op = 0;     // allreduce and reduce_scatter only, else 0
  std::int64_t line = 0;
  char file[104] = {};     // the caller, as short_source_path writes it

  bool same_call(const CollectiveFingerprint& other) const;  // everything but the place
  std::string describe() const;  // "allreduce #5 fp32 x 1024 (4.0 KiB) sum ..., called at dir/file.cpp:88"
};

CollectiveFingerprint fingerprint_of(const CollectiveDesc& desc);

// `all[i]` is the fingerprint of the member whose world rank is `world_ranks[i]`. nullopt when they
// agree; otherwise the report, the same on every member.
std::optional<std::string> find_desync(const std::vector<CollectiveFingerprint>& all,
                                       const std::vector<int>& world_ranks, const std::string& label);

}  // namespace mt
