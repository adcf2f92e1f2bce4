#include "checkpoint/dir_lock.h"

#include <fcntl.h>     // defines: open, O_RDWR, O_CREAT, O_CLOEXEC
#include <sys/file.h>  // defines: flock, LOCK_EX, LOCK_NB
#include <unistd.h>    // defines: getpid, ftruncate, pwrite, pread, fsync

#include <cerrno>
#include <chrono>
#include <ctime>
#include <system_error>
#include <thread>

#include "runtime/error.h"

namespace mt::ckpt {
namespace fs = std::filesystem;

namespace {

std::string errno_text(int err) { return std::error_code(err, std::generic_category()).message(); }

std::string utc_now_iso8601() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm utc{};
  ::gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

int open_lock_file(const fs::path& root, const fs::path& file) {
  std::error_code ec;
  fs::create_directories(root, ec);
  MT_REQUIRE(!ec, "cannot create checkpoint directory ", root.string(), ": ", ec.message());
  const int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  MT_REQUIRE(fd >= 0, "cannot open the lock file ", file.string(), " of checkpoint directory '", root.string(),
             "': ", errno_text(errno));
  return fd;
}

// The first line of the file, printable characters only (it is another process's file: keep a
// corrupt one from garbling the error), at most 200 of them; "" when empty.
std::string read_holder(int fd) {
  char buffer[256];
  const ssize_t got = ::pread(fd, buffer, sizeof(buffer), 0);
  std::string line;
  for (ssize_t i = 0; i < got && buffer[i] != '\n' && line.size() < 200; ++i) {
    if (buffer[i] >= ' ' && buffer[i] <= '~') line += buffer[i];
  }
  return line;
}

// The holder writes its line just after taking the lock: a job refused in between reads an empty
// file, so it looks again for a moment before giving up on naming the holder.
std::string wait_for_holder(int fd) {
  for (int attempt = 0; attempt < 20; ++attempt) {
    if (std::string line = read_holder(fd); !line.empty()) return line;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return "holder unknown (the lock file names none yet)";
}

}  // namespace

CheckpointDirLock::CheckpointDirLock(const fs::path& root)
    : file_(root / lock_file_name), fd_(open_lock_file(root, file_)) {
  if (::flock(fd_.get(), LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (err == EWOULDBLOCK) {
      MT_FAIL("checkpoint directory '", root.string(), "' is in use by another job: ", wait_for_holder(fd_.get()),
              " (lock file ", file_.string(), ")");
    }
    MT_FAIL("cannot lock checkpoint directory '", root.string(), "' (flock on ", file_.string(), "): ",
            errno_text(err), " (the file system must support flock; Lustre: mount with -o flock)");
  }
  holder_ = "host " + this_host_name() + ", pid " + std::to_string(::getpid()) + ", started " + utc_now_iso8601();
  const std::string line = holder_ + "\n";
  // One write of the whole line after emptying the file: a reader sees nothing or all of it (short
  // of a torn write, which read_holder survives). Fsynced, for readers on other NFS clients.
  const bool written = ::ftruncate(fd_.get(), 0) == 0 &&
                       ::pwrite(fd_.get(), line.data(), line.size(), 0) == static_cast<ssize_t>(line.size()) &&
                       ::fsync(fd_.get()) == 0;
  MT_REQUIRE(written, "cannot write the lock file ", file_.string(), ": ", errno_text(errno));
}

}  // namespace mt::ckpt
