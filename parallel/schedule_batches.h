// Runs of messages as grouped batches (NCCL group semantics, parallel/schedule.h
// check_grouped_messages, defined here too), and the repair that makes lists pass by moving
// receives earlier. Internal to the schedules.
// defines: move_receives_until_batches_complete
#pragma once

#include "parallel/schedule.h"

namespace mt {

// Runs the lists with grouped batches; wherever every stuck stage waits, takes the first stuck
// batch holding a send whose receive its peer has not posted, and moves that receive (with the
// receives from the same sender before it, in order) to the end of the batch the peer waits in.
// Only receives move, each to an earlier run of messages on its own stage; the computations and the
// per-pair order stay. Throws Error if a deadlock has no such send (no receive move can help).
void move_receives_until_batches_complete(Schedule& schedule);

}  // namespace mt
