// A POSIX file descriptor owned by a scope: closed on exit unless released (mapped files, shard
// writers and readers).
// defines: UniqueFd
#pragma once

#include <unistd.h>  // defines: close

#include <utility>

namespace mt {

class UniqueFd {
 public:
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

}  // namespace mt
