// What a communicator can do, asked by the layers above instead of switching on its backend's
// name: a backend states each property once, and a new backend (or a new feature of one) changes
// the answers without touching the pipeline. Plain data, so pure checks use it without MPI.
// defines: MemoryAccess, CommCapabilities
#pragma once

namespace mt {

// How a backend reaches the memory of a tensor it is given.
enum class MemoryAccess {
  None,    // refused: an op on such a tensor throws
  Staged,  // copied through host buffers around every op: correct, but the device is synchronised
           // first and the data crosses the host link twice, so a caller may prefer host tensors
  Direct,  // read and written in place
};

// Defaults are the conservative answers: a backend claims each ability explicitly.
struct CommCapabilities {
  // A receive may be posted ahead of the computation that precedes it without holding up this
  // communicator's other operations (the MPI backend progresses every op on its communication
  // thread). The pipeline executor then posts each receive one computation early, so the transfer
  // overlaps that computation. NCCL runs ops in issue order on one stream: an early receive there
  // would sit ahead of this rank's own later sends until its sender comes.
  bool early_receives = false;

  // A rank may send to and receive from a neighbour as single ops in either order, the neighbour
  // doing the same, without deadlock: sends and receives are non-blocking and progressed
  // independently. NCCL's single send holds its stream until the matching receive runs, so it
  // answers no; the pipeline needs only batches (grouped_point_to_point).
  bool unordered_point_to_point = false;

  // A batch of sends and receives (Communicator::batch_async) completes as one: neighbours may send
  // to each other in the same batch, each listing its messages to a peer in the order the peer
  // lists its matching ones. NCCL groups the batch (ncclGroupStart/End); MPI posts it nonblocking.
  bool grouped_point_to_point = false;

  // Where a tensor may live. Host: CPU memory; device: memory of a GPU (for NCCL, only the GPU the
  // communicator was made on).
  MemoryAccess host_memory = MemoryAccess::None;
  MemoryAccess device_memory = MemoryAccess::None;
};

}  // namespace mt
