// The pipeline schedules meshtrain knows, by name (--schedule).
// defines: ScheduleKind, parse_schedule_kind, schedule_kind_name, splits_backward
#pragma once

#include <string>
#include <string_view>

namespace mt {

// GPipe: all forwards, then all backwards. 1F1B: warm-up forwards, then one forward one backward.
// Interleaved: 1F1B over v model chunks per stage (--virtual-stages v >= 2), a smaller bubble.
// ZeroBubbleH1 / ZeroBubbleV (Qi et al., ICLR 2024): backward split into B (input gradients) and W
// (weight gradients), W filling the bubble; H1 with 1F1B's activation memory, V with two chunks per
// stage placed in a V (parallel/chunk_placement.h).
enum class ScheduleKind { GPipe, OneFOneB, Interleaved, ZeroBubbleH1, ZeroBubbleV };

// "gpipe", "1f1b", "interleaved", "zb-h1", "zb-v"; anything else throws Error listing the known names.
ScheduleKind parse_schedule_kind(std::string_view name);
const char* schedule_kind_name(ScheduleKind kind);

// Whether the schedule runs each backward as B and W apart (zb-h1, zb-v).
constexpr bool splits_backward(ScheduleKind kind) {
  return kind == ScheduleKind::ZeroBubbleH1 || kind == ScheduleKind::ZeroBubbleV;
}

}  // namespace mt
