// One job per checkpoint directory: an exclusive flock on ROOT/.lock, held by the job's rank 0 for
// the whole run. Two jobs saving into one directory would prune each other's steps and move
// `latest` back and forth; the second one is refused at start instead, naming the holder.
//
// The kernel drops the lock when the holder's process ends however it ends (exit, crash, SIGKILL),
// so the file a killed job leaves behind never blocks the next start: only a live holder does. The
// file is never removed (unlinking it would let two jobs lock two different files of one name).
// After taking the lock the holder writes who it is into the file (host, pid, start time in UTC) so
// that a refused job can name it. flock works on local file systems and on NFS (the Linux client
// maps it onto NFS byte-range locks); a file system without lock support fails with an error
// saying so (Lustre: mount with -o flock).
// defines: CheckpointDirLock, lock_file_name
#pragma once

#include <filesystem>
#include <string>

#include "runtime/unique_fd.h"

namespace mt::ckpt {

inline constexpr const char* lock_file_name = ".lock";

class CheckpointDirLock {
 public:
  // Creates ROOT (and parents) and ROOT/.lock when missing, takes the lock without waiting and
  // writes the holder into the file. Errors: "checkpoint directory 'ROOT' is in use by another job:
  // host H, pid P, started T (lock file ROOT/.lock)" while another process holds it (another open
  // of the file in this process counts as another holder); the directory or file cannot be made;
  // the file system refuses locks.
  explicit CheckpointDirLock(const std::filesystem::path& root);
  CheckpointDirLock(const CheckpointDirLock&) = delete;
  CheckpointDirLock& operator=(const CheckpointDirLock&) = delete;
  ~CheckpointDirLock() = default;  // closing the file releases the lock

  const std::filesystem::path& file() const { return file_; }
  // "host H, pid P, started 2026-11-24T17:03:12Z": what this holder wrote into the file.
  const std::string& holder() const { return holder_; }

 private:
  std::filesystem::path file_;
  UniqueFd fd_;
  std::string holder_;
};

}  // namespace mt::ckpt
