// Turning one rank's failure into the same error on every rank. Where a rank can fail on its own
// (a shard file it alone reads is corrupt, its disk is full) and the others would go on into the
// next collective and wait for it forever, every rank calls agree_on_error at the same point with
// what it found: all go on, or all throw one JobError carrying the first failing rank's message.
// defines: allgather_strings, agree_on_max, agree_on_error, agree_on_first_rank_error, run_agreed,
//          run_on_first_rank_agreed
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "runtime/context.h"

namespace mt {

// Every member's string, in rank order, on every member (collective; tensors on ctx's device).
std::vector<std::string> allgather_strings(Communicator& comm, DeviceContext& ctx, const std::string& mine);

// The largest of every member's `mine`, on every member (collective): one int, e.g. whether any rank
// was asked to stop.
int agree_on_max(Communicator& comm, DeviceContext& ctx, int mine);

// Collective over `comm` (tensors on ctx's device). `mine`: this rank's error message, or nullopt.
// When any rank has one, every rank throws JobError with the message of the lowest failing rank,
// prefixed with "rank R: " (R in the world) unless every rank failed with the same message, and followed
// by how many other ranks failed.
void agree_on_error(Communicator& comm, DeviceContext& ctx, const std::optional<std::string>& mine);

// Collective over `comm`, for work only the group's first rank does (the others pass nullopt):
// when it failed, every rank throws JobError with its message as it is, the job's own error said
// once, not "rank 0: ..." of one rank.
void agree_on_first_rank_error(Communicator& comm, DeviceContext& ctx, const std::optional<std::string>& mine);

// Runs `body`, catching any std::exception as this rank's error, then agree_on_error.
void run_agreed(Communicator& comm, DeviceContext& ctx, const std::function<void()>& body);

// Runs `body` on the group's first rank only, then agree_on_first_rank_error with what it threw.
void run_on_first_rank_agreed(Communicator& comm, DeviceContext& ctx, const std::function<void()>& body);

}  // namespace mt
