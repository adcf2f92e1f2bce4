// The token ids of one step's micro-batches on their way to the device. The data loader reads them
// into page-locked host memory (checking every id against the vocabulary: the one check), and one
// asynchronous copy on the compute stream takes them all to the device before the step's first
// forward: the inputs where the rank holds the embedding, the targets where it holds the head (a
// pipeline's first stage uploads no targets, its last no inputs). Nothing in a step waits for the
// host; the step's one read (its loss and norm) comes after the copy in stream order, so the next
// step finds the host memory free again. With context parallelism a rank holds only some positions of
// each sequence (its chunks of the causal split, parallel/causal_split.h): the loader's whole
// sequences go through a host buffer of the batch's size, made once, and the rank's rows are copied
// out of it.
// defines: StepBatch
#pragma once

#include <cstdint>
#include <vector>

#include "data/loader.h"
#include "models/gpt.h"
#include "runtime/pinned_buffer.h"
#include "runtime/stream.h"

namespace mt {

class StepBatch {
 public:
  // What the rank's chunks read: the embedding the inputs, the head the targets.
  struct Reads {
    bool inputs = true, targets = true;
  };
  // micro_batches x micro_batch sequences of seq_len tokens, ids below vocab_size. positions: the
  // positions of each sequence this rank holds, in the order it holds them (distinct, below
  // seq_len); empty: every position in order.
  StepBatch(DeviceContext& ctx, int micro_batches, int micro_batch, int seq_len, int vocab_size, Reads reads,
            std::vector<std::int64_t> positions = {});

  // Sequences first_sequence .. of `loader` into the host buffer, then queues their upload. A loader
  // that does not check ids against this vocabulary (LoaderOptions::vocab_size 0 or larger) has them
  // checked here. Waits only if the previous upload has not run yet (evaluation's batches follow one
  // another with no read in between).
  void load(const data::DataLoader& loader, std::int64_t first_sequence);

  // Micro-batch m's ids on the device, [micro_batch * rows()] each (undefined where not read):
  // views valid until the next load.
  Gpt::DeviceTokens micro(int m) const;
  int rows() const { return rows_; }  // positions per sequence this rank holds

 private:
  DeviceContext& ctx_;
  int micro_batches_, micro_batch_, seq_len_, rows_;
  std::int64_t tokens_per_micro_;
  int vocab_size_;
  Reads reads_;
  std::vector<std::int64_t> positions_;  // empty: all, in order
  std::vector<std::int32_t> whole_;      // with positions: the loader's whole sequences (inputs | targets)
  PinnedHostBuffer host_;  // [inputs of every micro-batch | targets of every micro-batch], int32
  Tensor device_;          // the same on the device
  Event uploaded_;
  bool loaded_ = false;
};

}  // namespace mt
