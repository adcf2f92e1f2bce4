// One job per checkpoint directory: a second holder is refused with the first one named, the lock
// goes with its holder's process however that ends, and a dead job's lock file blocks nothing.
#include "checkpoint/dir_lock.h"  // defines: CheckpointDirLock, lock_file_name

#include <gtest/gtest.h>
#include <sys/wait.h>  // defines: waitpid
#include <unistd.h>    // defines: fork, pipe, getpid, _exit

#include <csignal>  // defines: kill, SIGKILL
#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>
#include <sstream>
#include <string>

#include "runtime/error.h"       // defines: this_host_name
#include "runtime/unique_fd.h"   // defines: UniqueFd
#include "tests/scratch_dir.h"   // defines: ScratchDir
#include "tests/test_helpers.h"  // defines: error_of, contains, read_text

namespace mt::ckpt {
namespace {

namespace fs = std::filesystem;
using testing::contains;
using testing::error_of;
using testing::read_text;
using testing::ScratchDir;

// "checkpoint directory 'ROOT' is in use by another job: host H, pid PID, started T (lock file ROOT/.lock)"
std::string refusal(const fs::path& root, long pid) {
  return "checkpoint directory '" + root.string() + "' is in use by another job: host " + this_host_name() +
         ", pid " + std::to_string(pid) + ", started ";
}

TEST(CheckpointDirLock, CreatesTheDirectoryAndNamesItsHolder) {
  const ScratchDir scratch("dir_lock");
  const fs::path root = scratch / "a/b/ck";
  const CheckpointDirLock lock(root);
  EXPECT_EQ(lock.file(), root / ".lock");
  EXPECT_TRUE(std::regex_match(lock.holder(), std::regex("host .+, pid [0-9]+, started "
                                                         "[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z")))
      << lock.holder();
  EXPECT_TRUE(contains(lock.holder(), "pid " + std::to_string(::getpid()) + ","));
  EXPECT_EQ(read_text(root / lock_file_name), lock.holder() + "\n");
}

// flock belongs to an open file: a second open, even in the same process, is a second holder.
TEST(CheckpointDirLock, ASecondHolderIsRefusedUntilTheFirstLetsGo) {
  const ScratchDir scratch("dir_lock");
  const fs::path root = scratch / "ck";
  auto first = std::make_unique<CheckpointDirLock>(root);
  const std::string error = error_of([&] { CheckpointDirLock second(root); });
  EXPECT_TRUE(contains(error, refusal(root, ::getpid()))) << error;
  EXPECT_TRUE(contains(error, first->holder() + " (lock file " + (root / ".lock").string() + ")")) << error;
  EXPECT_EQ(read_text(root / lock_file_name), first->holder() + "\n");  // the refused one wrote nothing
  first.reset();
  EXPECT_NO_THROW(CheckpointDirLock again(root));
}

// Another process holds it until it is SIGKILLed: no cleanup runs, the kernel drops the lock, and
// the file it leaves (naming the dead process) blocks nothing.
TEST(CheckpointDirLock, TheLockDiesWithItsHolder) {
  const ScratchDir scratch("dir_lock");
  const fs::path root = scratch / "ck";
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  UniqueFd read_end(fds[0]), write_end(fds[1]);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    try {
      const CheckpointDirLock lock(root);
      const char ready = 'y';
      if (::write(write_end.get(), &ready, 1) != 1) ::_exit(2);
      for (;;) ::pause();  // holds the lock until killed
    } catch (...) {
      ::_exit(1);
    }
  }
  ::close(write_end.release());  // so a child that dies early ends the read below
  char ready = 0;
  ASSERT_EQ(::read(read_end.get(), &ready, 1), 1) << "the child could not take the lock";

  const std::string error = error_of([&] { CheckpointDirLock refused(root); });
  EXPECT_TRUE(contains(error, refusal(root, child))) << error;

  ASSERT_EQ(::kill(child, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_TRUE(contains(read_text(root / lock_file_name), "pid " + std::to_string(child) + ","));  // left behind

  const CheckpointDirLock taken(root);
  EXPECT_EQ(read_text(root / lock_file_name), taken.holder() + "\n");  // the dead holder's line replaced whole
}

TEST(CheckpointDirLock, AnUnlockedFileOfAnyContentBlocksNothing) {
  const ScratchDir scratch("dir_lock");
  const fs::path root = scratch / "ck";
  fs::create_directories(root);
  std::ofstream(root / lock_file_name) << "host gone, pid 1, started 2000-01-01T00:00:00Z and a long tail\n\x01\x02";
  const CheckpointDirLock lock(root);
  EXPECT_EQ(read_text(root / lock_file_name), lock.holder() + "\n");
}

TEST(CheckpointDirLock, NamesWhatItCannotCreate) {
  const ScratchDir scratch("dir_lock");
  std::ofstream(scratch / "file") << "x";
  const std::string error = error_of([&] { CheckpointDirLock lock(scratch / "file/ck"); });
  EXPECT_TRUE(contains(error, "cannot create checkpoint directory " + (scratch / "file/ck").string())) << error;
}

}  // namespace
}  // namespace mt::ckpt
