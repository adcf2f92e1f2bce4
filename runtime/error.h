// Errors that say where: every meshtrain error carries file:line, the rank and the host.
// Four kinds, by whose move it is: UsageError (what the user gave is wrong: MT_REQUIRE),
// InternalError (a broken invariant, our bug: MT_CHECK), EnvironmentError (the system refused a
// file: a full disk, no permission), and plain Error (the machine or the network failed: MT_FAIL).
// JobError marks an error every rank raised together.
// defines: Error, UsageError, InternalError, EnvironmentError, TimeoutError, OutOfMemoryError, JobError,
//          ProcessLabel, errno_message, MT_CHECK, MT_REQUIRE, MT_REQUIRE_ENV, MT_FAIL, MT_FAIL_AS
#pragma once

#include <source_location>
#include <sstream>
#include <stdexcept>
#include <string>

namespace mt {

// Who this process is, for messages. Set once after MPI starts; errors thrown deep inside a
// kernel name the rank without every call passing it down (the only process-wide state here).
struct ProcessLabel {
  int rank = -1;
  std::string host;
};
void set_process_label(int rank, std::string host);
const ProcessLabel& process_label();
std::string this_host_name();

class Error : public std::runtime_error {
 public:
  Error(const std::string& what, const std::source_location& where);
  // The message without the location prefix, as given by the thrower.
  const std::string& message() const { return message_; }

 private:
  std::string message_;
};

// A mistake in what the user gave (an option, a file, a layout): message() alone tells what to fix.
// Options are read alike on every rank, so the top level (launch/guard.h) prints one raised on every
// rank once; one raised on some ranks only ends the job naming the rank.
class UsageError : public Error {
 public:
  explicit UsageError(const std::string& what, const std::source_location& where = std::source_location::current())
      : Error(what, where) {}
};

// A condition the code itself guarantees did not hold: a bug in meshtrain, never the user's doing.
class InternalError : public Error {
 public:
  using Error::Error;
};

// The system refused what was asked of it, for reasons outside meshtrain and its input: a disk full
// (ENOSPC), a read-only file system, no permission, a failing disk (EIO). message() names the file
// and the system's reason. The top level prints it as one line without file:line (no bug of ours to
// locate), naming the rank and host in a multi-rank job: that says which machine's disk to look at.
class EnvironmentError : public Error {
 public:
  using Error::Error;
};

class TimeoutError : public Error {
 public:
  using Error::Error;
};

class OutOfMemoryError : public Error {
 public:
  using Error::Error;
};

// An error every rank of a job raises together, having agreed on it (comm/agreement.h): a bad
// checkpoint, a failed save. The top level prints message() once, on rank 0, and every rank exits
// with 1 on its own: nothing needs aborting, and the user sees one line, not one per rank.
class JobError : public Error {
 public:
  using Error::Error;
};

// The system's words for an errno value: "No space left on device".
std::string errno_message(int err);

// "file:line [rank R host H]" for the given place.
std::string describe_location(const std::source_location& where);

template <class E = Error, class... Parts>
[[noreturn]] void fail_at(const std::source_location& where, const Parts&... parts) {
  std::ostringstream msg;
  (msg << ... << parts);
  throw E(msg.str(), where);
}

}  // namespace mt

#define MT_FAIL(...) ::mt::fail_at(std::source_location::current(), __VA_ARGS__)
#define MT_FAIL_AS(E, ...) ::mt::fail_at<E>(std::source_location::current(), __VA_ARGS__)
// For checks of what a user gave (options, files): a UsageError, the message alone without the
// condition's text.
#define MT_REQUIRE(cond, ...)                                                                     \
  do {                                                                                            \
    if (!(cond)) ::mt::fail_at<::mt::UsageError>(std::source_location::current(), __VA_ARGS__);   \
  } while (0)
// For what the system may refuse (creating, writing, syncing or renaming a file): an EnvironmentError.
#define MT_REQUIRE_ENV(cond, ...)                                                                     \
  do {                                                                                                \
    if (!(cond)) ::mt::fail_at<::mt::EnvironmentError>(std::source_location::current(), __VA_ARGS__); \
  } while (0)
// For what the code guarantees: an InternalError quoting the condition.
#define MT_CHECK(cond, ...)                                                                       \
  do {                                                                                            \
    if (!(cond))                                                                                  \
      ::mt::fail_at<::mt::InternalError>(std::source_location::current(), "check failed: " #cond ": ", __VA_ARGS__); \
  } while (0)
