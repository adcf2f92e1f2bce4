#include "io/atomic_file.h"

#include <fcntl.h>     // defines: open, O_WRONLY, O_CREAT, O_EXCL, O_CLOEXEC, O_RDONLY, O_DIRECTORY
#include <sys/stat.h>  // defines: stat, S_ISREG
#include <unistd.h>    // defines: write, fsync, close, unlink, getpid

#include <atomic>
#include <cerrno>
#include <utility>

#include "runtime/error.h"  // defines: EnvironmentError, errno_message

namespace mt {
namespace fs = std::filesystem;

namespace {
fs::path dir_of(const fs::path& p) { return p.has_parent_path() ? p.parent_path() : fs::path("."); }
}  // namespace

AtomicFile::AtomicFile(fs::path target, std::string what) : target_(std::move(target)), what_(std::move(what)) {
  MT_REQUIRE(!target_.filename().empty(), "cannot write ", what_, " ", target_.string(), ": names no file");
  struct stat st {};
  if (::stat(target_.c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
    fd_ = ::open(target_.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd_ < 0) fail(errno);
    return;
  }
  static std::atomic<unsigned> counter{0};
  for (int attempt = 0; attempt < 100; ++attempt) {
    temp_ = dir_of(target_) / ("." + target_.filename().string() + ".tmp-" + std::to_string(::getpid()) + "-" +
                               std::to_string(counter.fetch_add(1)));
    fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ >= 0) return;
    if (errno != EEXIST) fail(errno);
  }
  MT_FAIL_AS(EnvironmentError, "cannot write ", what_, " ", target_.string(), ": no free temporary name in ",
             dir_of(target_).string());
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && !temp_.empty()) ::unlink(temp_.c_str());
}

void AtomicFile::write(const void* data, std::size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  while (bytes > 0) {
    const ssize_t put = ::write(fd_, p, bytes);
    if (put < 0) {
      if (errno == EINTR) continue;
      fail(errno);
    }
    p += put;
    bytes -= static_cast<std::size_t>(put);
  }
}

void AtomicFile::commit() {
  if (temp_.empty()) {  // a device, written in place: nothing to sync or rename
    committed_ = true;
    if (::close(std::exchange(fd_, -1)) != 0) fail(errno);
    return;
  }
  if (::fsync(fd_) != 0) fail(errno);
  if (::close(std::exchange(fd_, -1)) != 0) fail(errno);
  if (::rename(temp_.c_str(), target_.c_str()) != 0) fail(errno);
  committed_ = true;
  // The rename itself made durable; best effort: the file is complete and in place either way.
  const int dir_fd = ::open(dir_of(target_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
}

// Whether creating, writing, syncing or renaming failed, the user's question is the same: why the
// file is not there. The temporary is gone by the time they read this (the destructor removes it).
void AtomicFile::fail(int err) const {
  MT_FAIL_AS(EnvironmentError, "cannot write ", what_, " ", target_.string(), ": ", errno_message(err));
}

}  // namespace mt
