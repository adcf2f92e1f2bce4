#include "io/atomic_file.h"

#include <fcntl.h>   // defines: open, O_WRONLY, O_CREAT, O_EXCL, O_CLOEXEC, O_RDONLY, O_DIRECTORY
#include <unistd.h>  // defines: write, fsync, close, unlink, getpid

#include <atomic>
#include <cerrno>
#include <system_error>
#include <utility>

#include "runtime/error.h"

namespace mt {
namespace fs = std::filesystem;

namespace {
std::string errno_text(int err) { return std::error_code(err, std::generic_category()).message(); }
fs::path dir_of(const fs::path& p) { return p.has_parent_path() ? p.parent_path() : fs::path("."); }
}  // namespace

AtomicFile::AtomicFile(fs::path target, std::string what) : target_(std::move(target)), what_(std::move(what)) {
  MT_REQUIRE(!target_.filename().empty(), "cannot write ", what_, " ", target_.string(), ": names no file");
  static std::atomic<unsigned> counter{0};
  for (int attempt = 0; attempt < 100; ++attempt) {
    temp_ = dir_of(target_) / ("." + target_.filename().string() + ".tmp-" + std::to_string(::getpid()) + "-" +
                               std::to_string(counter.fetch_add(1)));
    fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ >= 0) return;
    if (errno != EEXIST) fail("creating", errno);
  }
  MT_FAIL("cannot write ", what_, " ", target_.string(), ": no free temporary name in ", dir_of(target_).string());
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
      fail("writing", errno);
    }
    p += put;
    bytes -= static_cast<std::size_t>(put);
  }
}

void AtomicFile::commit() {
  if (::fsync(fd_) != 0) fail("flushing", errno);
  const int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0) fail("closing", errno);
  if (::rename(temp_.c_str(), target_.c_str()) != 0) fail("renaming into place", errno);
  committed_ = true;
  // The rename itself made durable; best effort: the file is complete and in place either way.
  const int dir_fd = ::open(dir_of(target_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
}

void AtomicFile::fail(const char* doing, int err) const {
  MT_FAIL(doing, " ", what_, " ", target_.string(), " (temporary ", temp_.string(), ") failed: ", errno_text(err));
}

}  // namespace mt
