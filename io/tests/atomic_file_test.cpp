// AtomicFile when the system refuses: a real failure of write(2) (a file over the process's size
// limit, EFBIG) and a device that is always full (ENOSPC) each give one EnvironmentError naming the
// file and the system's reason, and leave no temporary and the old file as it was. A character
// device is written in place, never renamed over.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "io/atomic_file.h"
#include "runtime/error.h"
#include "tests/scratch_dir.h"
#include "tests/test_helpers.h"

namespace mt {
namespace {

using testing::error_of;
using testing::read_text;
using testing::ScratchDir;

void write_whole(const std::filesystem::path& path, const std::string& text) {
  AtomicFile out(path, "test file");
  out.write(text.data(), text.size());
  out.commit();
}

std::vector<std::string> names_in(const std::filesystem::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) names.push_back(entry.path().filename().string());
  return names;
}

// RLIMIT_FSIZE lowered for the scope, SIGXFSZ ignored: a write past the limit fails with EFBIG
// instead of killing the process. Both restored after.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    getrlimit(RLIMIT_FSIZE, &saved_);
    old_handler_ = signal(SIGXFSZ, SIG_IGN);
    rlimit lowered = saved_;
    lowered.rlim_cur = bytes;
    setrlimit(RLIMIT_FSIZE, &lowered);
  }
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &saved_);
    signal(SIGXFSZ, old_handler_);
  }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;

 private:
  rlimit saved_{};
  sighandler_t old_handler_ = SIG_DFL;
};

TEST(AtomicFile, AWriteTheSystemRefusesIsAnEnvironmentErrorAndTheOldFileStays) {
  ScratchDir dir("atomic_file");
  const auto target = dir / "weights.bin";
  write_whole(target, "the old contents");
  const std::string big(64 * 1024, 'x');
  std::string message;
  {
    FileSizeLimit limit(16 * 1024);
    message = error_of<EnvironmentError>([&] { write_whole(target, big); });
  }
  EXPECT_EQ(message, "cannot write test file " + target.string() + ": File too large");
  EXPECT_EQ(read_text(target), "the old contents");
  EXPECT_EQ(names_in(dir.path()), std::vector<std::string>{"weights.bin"});  // no temporary left
}

// A device node made here, not the machine's /dev/full: were the device renamed over, only this
// copy would be lost. Needs the right to make device nodes (root) on a file system that honours them.
TEST(AtomicFile, ACharacterDeviceIsWrittenInPlaceAndAFullOneSaysSo) {
  ScratchDir dir("atomic_file_dev");
  const auto full = dir / "full", null = dir / "null";
  if (mknod(full.c_str(), S_IFCHR | 0666, makedev(1, 7)) != 0 || mknod(null.c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0)
    GTEST_SKIP() << "cannot make device nodes here (not root)";
  if (!std::ofstream(null).is_open()) GTEST_SKIP() << "device nodes do not open here (a nodev mount)";
  EXPECT_EQ(error_of<EnvironmentError>([&] { write_whole(full, "bytes"); }),
            "cannot write test file " + full.string() + ": No space left on device");
  write_whole(null, "bytes");
  struct stat st {};
  ASSERT_EQ(stat(null.c_str(), &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode)) << "the device was replaced by a file";
  ASSERT_EQ(stat(full.c_str(), &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode)) << "the device was replaced by a file";
  EXPECT_EQ(names_in(dir.path()).size(), 2u);
}

}  // namespace
}  // namespace mt
