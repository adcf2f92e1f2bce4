// The stop handlers: the first signal is recorded and later ones of other kinds are not; a second
// SIGINT ends the process at once; a SIGCONT stops only when the launcher sent it; a process whose
// launcher is gone ends within the watch period; a stop not agreed on in time ends the process.
// The cases that end a process run in a child of their own.
#include "launch/stop_signals.h"

#include <gtest/gtest.h>
#include <sys/prctl.h>  // defines: prctl, PR_SET_CHILD_SUBREAPER
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <thread>

namespace mt {
namespace {

using namespace std::chrono_literals;

// Waits up to `limit` for `pid` to end; returns its wait status, or -1 when it is still running.
int wait_for_exit(pid_t pid, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  int status = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    if (::waitpid(pid, &status, WNOHANG) == pid) return status;
    std::this_thread::sleep_for(10ms);
  }
  return -1;
}

// Until the handler has seen a signal: the stop request arrives asynchronously.
int wait_for_request(std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (StopSignals::requested() == 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(5ms);
  return StopSignals::requested();
}

TEST(StopSignals, TheFirstSignalIsTheRequest) {
  StopSignals handlers({});
  EXPECT_EQ(StopSignals::requested(), 0);
  ::kill(::getpid(), SIGTERM);
  EXPECT_EQ(wait_for_request(2000ms), SIGTERM);
  ::kill(::getpid(), SIGUSR1);  // ignored: a stop is already under way
  ::kill(::getpid(), SIGTERM);
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(StopSignals::requested(), SIGTERM);
}

TEST(StopSignals, UsrOneAsksForAStop) {
  StopSignals handlers({});
  ::kill(::getpid(), SIGUSR1);
  EXPECT_EQ(wait_for_request(2000ms), SIGUSR1);
}

TEST(StopSignals, HandlersGoWithTheObject) {
  { StopSignals handlers({}); }
  struct sigaction now {};
  ::sigaction(SIGTERM, nullptr, &now);
  EXPECT_EQ(now.sa_handler, SIG_DFL);
}

TEST(StopSignals, NamesTheSignals) {
  EXPECT_EQ(StopSignals::describe(SIGTERM), "SIGTERM");
  EXPECT_EQ(StopSignals::describe(SIGINT), "SIGINT");
  EXPECT_EQ(StopSignals::describe(SIGUSR1), "SIGUSR1");
  EXPECT_EQ(StopSignals::describe(SIGCONT), "mpirun's stop (SIGINT or SIGTERM to mpirun)");
}

TEST(StopSignalsDeathTest, ASecondSigintEndsAtOnce) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        StopSignals handlers({});
        ::kill(::getpid(), SIGINT);
        wait_for_request(2000ms);
        ::kill(::getpid(), SIGINT);
        std::this_thread::sleep_for(2000ms);
        std::exit(0);
      },
      testing::ExitedWithCode(128 + SIGINT), "meshtrain: a second SIGINT: ending at once without saving");
}

TEST(StopSignalsDeathTest, SigintDuringAnotherStopEndsAtOnce) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        StopSignals handlers({.world_rank = 3});  // not rank 0: ends without a word
        ::kill(::getpid(), SIGTERM);
        wait_for_request(2000ms);
        ::kill(::getpid(), SIGINT);
        std::this_thread::sleep_for(2000ms);
        std::exit(0);
      },
      testing::ExitedWithCode(128 + SIGINT), "");
}

// A stop not agreed on within its deadline: a rank is gone, so this one ends rather than wait for
// the launcher's SIGKILL. Agreed, or with no deadline (start-up, a save), it goes on.
TEST(StopSignalsDeathTest, AStopNotAgreedInTimeEndsTheProcess) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        StopSignals handlers({});
        StopSignals::set_agreement_deadline(200ms);
        ::kill(::getpid(), SIGTERM);
        std::this_thread::sleep_for(3s);
        std::exit(0);
      },
      testing::ExitedWithCode(128 + SIGTERM), "stopped by SIGTERM, but the ranks did not agree on it within 0.2 s");
}

TEST(StopSignals, AStopAgreedOrWithoutDeadlineGoesOn) {
  StopSignals handlers({});
  ::kill(::getpid(), SIGTERM);
  wait_for_request(2000ms);
  std::this_thread::sleep_for(300ms);  // no deadline set: start-up may take what it takes
  StopSignals::set_agreement_deadline(200ms);
  StopSignals::agreed();
  std::this_thread::sleep_for(400ms);
  EXPECT_EQ(StopSignals::requested(), SIGTERM);  // still here
}

// The child's exit code is the request it saw: SIGCONT from itself is ignored, from its parent
// (the launcher) it is a stop.
TEST(StopSignals, SigcontStopsOnlyFromTheLauncher) {
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    StopSignals handlers({.launcher = ::getppid(), .launcher_sigcont_stops = true});
    ::kill(::getpid(), SIGCONT);
    std::this_thread::sleep_for(50ms);
    const char byte = StopSignals::requested() == 0 ? 'y' : 'n';
    if (::write(ready[1], &byte, 1) != 1) ::_exit(90);
    ::_exit(wait_for_request(5000ms));
  }
  char byte = 0;
  ASSERT_EQ(::read(ready[0], &byte, 1), 1);
  EXPECT_EQ(byte, 'y') << "a SIGCONT from the process itself was taken for a stop";
  ::kill(child, SIGCONT);
  const int status = wait_for_exit(child, 5000ms);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), SIGCONT);
  ::close(ready[0]);
  ::close(ready[1]);
}

// A launcher (the middle process) that exits without waiting for its worker, as mpirun does on a
// second Ctrl-C: the worker, adopted by this test process (a subreaper), ends within the watch period.
TEST(StopSignals, AProcessWhoseLauncherIsGoneEnds) {
  ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t launcher = ::fork();
  ASSERT_GE(launcher, 0);
  if (launcher == 0) {
    const pid_t worker = ::fork();
    if (worker == 0) {
      StopSignals handlers({.world_rank = 1, .launcher = ::getppid()});
      const pid_t me = ::getpid();
      if (::write(ready[1], &me, sizeof me) != sizeof me) ::_exit(90);
      std::this_thread::sleep_for(10s);
      ::_exit(0);  // not reached: the watch ends the process first
    }
    pid_t started = 0;
    if (::read(ready[0], &started, sizeof started) != sizeof started) ::_exit(91);
    ::_exit(0);
  }
  int launcher_status = 0;
  ASSERT_EQ(::waitpid(launcher, &launcher_status, 0), launcher);
  ASSERT_TRUE(WIFEXITED(launcher_status) && WEXITSTATUS(launcher_status) == 0) << launcher_status;
  // The worker's pid went to the launcher, which read it: find the adopted worker by waiting for any child.
  const auto start = std::chrono::steady_clock::now();
  int status = 0;
  pid_t ended = 0;
  while (ended <= 0 && std::chrono::steady_clock::now() - start < 5s) {
    ended = ::waitpid(-1, &status, WNOHANG);
    if (ended <= 0) std::this_thread::sleep_for(10ms);
  }
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_GT(ended, 0) << "the worker outlived its launcher by 5 s";
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGHUP);
  EXPECT_LT(took, 1s);
  ::close(ready[0]);
  ::close(ready[1]);
}

}  // namespace
}  // namespace mt
