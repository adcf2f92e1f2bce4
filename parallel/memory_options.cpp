#include "parallel/memory_options.h"

#include "runtime/error.h"

namespace mt {

Recompute parse_recompute(std::string_view name) {
  if (name == "none") return Recompute::None;
  if (name == "selective") return Recompute::Selective;
  if (name == "full") return Recompute::Full;
  MT_FAIL_AS(UsageError, "unknown --recompute '", name, "' (expected none, selective or full)");
}

const char* recompute_name(Recompute recompute) {
  switch (recompute) {
    case Recompute::None: return "none";
    case Recompute::Selective: return "selective";
    case Recompute::Full: return "full";
  }
  return "?";
}

}  // namespace mt
