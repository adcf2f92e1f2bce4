// Where a pipeline's model chunks sit: which global chunk (a run of consecutive layers, 0 = the
// embedding's, P*v-1 = the head's) each stage's local chunk c holds. Schedules, the layout plan
// and the model partition all read this one mapping.
//   Looped (GPipe, 1F1B, interleaved, ZB-H1): g = c * P + s, Megatron's interleaving; activations
//     go round the stages v times.
//   VShape (ZB-V, v = 2): chunk 0 runs down the stages (g = s), chunk 1 back up (g = 2P-1-s), so
//     stage 0 holds both the embedding and the head, and the turn at the last stage is local.
// defines: ChunkPlacement, placement_of, global_chunk_of, local_chunk_of, LocalChunk
#pragma once

#include "parallel/schedule_kind.h"

namespace mt {

enum class ChunkPlacement { Looped, VShape };

constexpr ChunkPlacement placement_of(ScheduleKind kind) {
  return kind == ScheduleKind::ZeroBubbleV ? ChunkPlacement::VShape : ChunkPlacement::Looped;
}

// Global chunk of stage `stage`'s local chunk `chunk`, with P = stages.
constexpr int global_chunk_of(ChunkPlacement placement, int stages, int stage, int chunk) {
  if (placement == ChunkPlacement::VShape) return chunk == 0 ? stage : 2 * stages - 1 - stage;
  return chunk * stages + stage;
}

struct LocalChunk {
  int stage;
  int chunk;
};

// The inverse: which stage holds global chunk `global`, and as which local chunk.
constexpr LocalChunk local_chunk_of(ChunkPlacement placement, int stages, int global) {
  if (placement == ChunkPlacement::VShape)
    return global < stages ? LocalChunk{global, 0} : LocalChunk{2 * stages - 1 - global, 1};
  return {global % stages, global / stages};
}

}  // namespace mt
