// "Rank 0 decides, all ranks agree" over plain MPI, before any Communicator exists (comm/agreement.h
// is the same once one does): an error found then becomes one error raised by every rank alike,
// which launch/guard.h says once, from rank 0.
// defines: outcome_of_rank0, agree_before_communicators
#pragma once

#include <optional>
#include <string>

#include <mpi.h>

namespace mt {

// Rank 0's `mine`, on every rank of `comm` (collective; what the others pass is not read). They wait
// for it sleeping rather than spinning in MPI, so rank 0 may work alone for minutes (`meshtrain
// prepare`).
std::optional<std::string> outcome_of_rank0(MPI_Comm comm, const std::optional<std::string>& mine);

// agree_on_error (comm/agreement.h) over plain MPI: collective over `comm`; when any rank brings a
// message, every rank throws the same JobError with the lowest failing rank's message, prefixed
// "rank R: " (R in `comm`) unless all failed alike, and followed by how many other ranks failed.
// Rank 0 gathers the messages and decides; outcome_of_rank0 gives every rank its verdict.
void agree_before_communicators(MPI_Comm comm, const std::optional<std::string>& mine);

}  // namespace mt
