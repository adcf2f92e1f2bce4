// The watchdog and the desync detector on real MPI ranks: a rank that skips a collective is named
// in the report of the ranks that wait for it, with the op, its group and the skipper's last op;
// members calling different collectives under --debug-collectives all get one report naming who
// called what and from where. No sleeps decide anything: the skipping rank joins late, after the
// reports are in, so every test ends cleanly.
#include "comm/watchdog.h"

#include <gtest/gtest.h>

#include <condition_variable>
#include <mutex>
#include <thread>

#include "comm/mpi_communicator.h"
#include "tests/test_env.h"

namespace mt {
namespace {

using testing::test_context;

Tensor ones(std::int64_t n) { return Tensor::from_host(std::vector<float>(static_cast<std::size_t>(n), 1.0f), {n}, test_context()); }

// Collects the report a watchdog hands over instead of ending the job.
struct ReportCatcher {
  std::mutex mutex;
  std::condition_variable arrived;
  std::string report;

  void take(const std::string& text) {
    {
      std::lock_guard lock(mutex);
      report = text;
    }
    arrived.notify_all();
  }
  std::string wait_for_report() {
    std::unique_lock lock(mutex);
    arrived.wait_for(lock, std::chrono::seconds(60), [&] { return !report.empty(); });
    return report;
  }
};

TEST(Watchdog, NamesTheRankThatSkippedACollective) {
  auto catcher = std::make_shared<ReportCatcher>();
  auto watchdog = std::make_shared<Watchdog>(Watchdog::Options{
      .timeout = std::chrono::milliseconds(500),
      .answer_wait = std::chrono::milliseconds(500),
      .on_expiry = [catcher](const std::string& text) { catcher->take(text); }});
  auto world = MpiCommunicator::world(CommOptions{.timeout = std::chrono::milliseconds(500), .watchdog = watchdog});
  const int n = world->size();
  if (n < 2) GTEST_SKIP() << "needs 2 ranks";
  const int last = n - 1;
  Tensor x = ones(16);
  world->allreduce(x);  // #0 everywhere
  watchdog->mark("began step 1 of 1");

  MpiComm side = MpiComm::world().dup();  // tells the skipping rank when the reports are in
  if (world->rank() != last) {
    WorkPtr pending = world->allreduce_async(x, x);  // #1: the last rank is not there
    const std::string report = catcher->wait_for_report();
    EXPECT_NE(report.find("watchdog: allreduce #1 fp32 x 16"), std::string::npos) << report;
    EXPECT_NE(report.find("on group \"world\""), std::string::npos) << report;
    EXPECT_NE(report.find("not arrived: world rank " + std::to_string(last)), std::string::npos) << report;
    EXPECT_NE(report.find("its last collective on this group is allreduce #0"), std::string::npos) << report;
    EXPECT_NE(report.find("watchdog_test.cpp:"), std::string::npos) << "names where the op was called\n" << report;
    EXPECT_NE(report.find("began step 1 of 1"), std::string::npos) << "its own last steps\n" << report;
    MPI_Barrier(side.get());
    pending->wait();
  } else {
    MPI_Barrier(side.get());
    world->allreduce(x);  // late: the others' #1 completes
  }
  EXPECT_FLOAT_EQ(x.to_host<float>()[0], static_cast<float>(n * n));
}

TEST(Watchdog, FinishedOpsNeverExpire) {
  auto catcher = std::make_shared<ReportCatcher>();
  auto watchdog = std::make_shared<Watchdog>(Watchdog::Options{
      .timeout = std::chrono::milliseconds(200), .on_expiry = [catcher](const std::string& text) { catcher->take(text); }});
  auto world = MpiCommunicator::world(CommOptions{.timeout = std::chrono::milliseconds(200), .watchdog = watchdog});
  Tensor x = ones(4);
  for (int i = 0; i < 20; ++i) world->allreduce(x);
  std::this_thread::sleep_for(std::chrono::milliseconds(600));  // several ticks past every deadline
  std::lock_guard lock(catcher->mutex);
  EXPECT_EQ(catcher->report, "");
}

std::string desync_error(Communicator& comm, const std::function<void()>& call) {
  try {
    call();
  } catch (const std::exception& e) {
    return e.what();
  }
  (void)comm;
  return "";
}

TEST(DesyncDetector, ReportsWhichRanksCalledWhatAndFromWhere) {
  auto world = MpiCommunicator::world(CommOptions{.timeout = std::chrono::seconds(60), .debug_collectives = true});
  const int n = world->size();
  if (n < 2) GTEST_SKIP() << "needs 2 ranks";
  const int last = n - 1;
  Tensor x = ones(8);
  world->allreduce(x);  // #0 agrees
  const std::string error = desync_error(*world, [&] {
    if (world->rank() == last) {
      world->broadcast(x, BroadcastOptions{.root = 0});
    } else {
      world->allreduce(x);
    }
  });
  EXPECT_NE(error.find("collectives out of step on group \"world\""), std::string::npos) << error;
  const std::string others = n == 2 ? "world rank 0: " : "world ranks 0," ;
  EXPECT_NE(error.find(others), std::string::npos) << error;
  EXPECT_NE(error.find("allreduce #1 fp32 x 8 (32 B) sum, called at tests/watchdog_test.cpp:"), std::string::npos) << error;
  EXPECT_NE(error.find("world rank " + std::to_string(last) + ": broadcast #1 fp32 x 8 (32 B) root 0, called at tests/watchdog_test.cpp:"),
            std::string::npos)
      << error;
  // Nothing was started: the communicator still works.
  world->barrier();
}

TEST(DesyncDetector, ACountMismatchIsCaughtAndAgreementPasses) {
  auto world = MpiCommunicator::world(CommOptions{.timeout = std::chrono::seconds(60), .debug_collectives = true});
  if (world->size() < 2) GTEST_SKIP() << "needs 2 ranks";
  Tensor small = ones(4);
  Tensor big = ones(5);
  world->allreduce(small);
  EXPECT_FLOAT_EQ(small.to_host<float>()[0], static_cast<float>(world->size()));
  const std::string error = desync_error(*world, [&] { world->allreduce(world->rank() == 0 ? big : small); });
  EXPECT_NE(error.find("fp32 x 5"), std::string::npos) << error;
  EXPECT_NE(error.find("fp32 x 4"), std::string::npos) << error;
}

}  // namespace
}  // namespace mt
