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
#include "comm/wait_chain.h"
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

// A batch whose peer never posts its side: the report names the batch with its messages, and the
// peer, in no op, as the culprit.
TEST(Watchdog, NamesABatchWhosePeerNeverPostedItsSide) {
  auto catcher = std::make_shared<ReportCatcher>();
  auto watchdog = std::make_shared<Watchdog>(Watchdog::Options{
      .timeout = std::chrono::milliseconds(500),
      .answer_wait = std::chrono::milliseconds(500),
      .on_expiry = [catcher](const std::string& text) { catcher->take(text); }});
  auto world = MpiCommunicator::world(CommOptions{.timeout = std::chrono::milliseconds(500), .watchdog = watchdog});
  if (world->size() < 2) GTEST_SKIP() << "needs 2 ranks";
  const int r = world->rank();
  Tensor out = ones(16);
  Tensor in = ones(16);
  MpiComm side = MpiComm::world().dup();  // tells rank 1 when the report is in
  if (r == 0) {
    WorkPtr pending = world->batch_async({PointToPoint::send(out, 1, 3), PointToPoint::recv(in, 1, 8)});
    const std::string report = catcher->wait_for_report();
    EXPECT_NE(report.find("watchdog: p2p batch #0 (128 B): send fp32 x 16 to 1 tag 3, recv fp32 x 16 from 1 tag 8 "
                          "in a group of " + std::to_string(world->size()) + " on group \"world\""),
              std::string::npos)
        << report;
    EXPECT_NE(report.find("watchdog_test.cpp:"), std::string::npos) << "names where the batch was called\n" << report;
    EXPECT_NE(report.find("culprit: world rank 1 (host "), std::string::npos) << report;
    EXPECT_NE(report.find("world rank 0 waits for world rank 1 in p2p batch #0"), std::string::npos) << report;
    MPI_Barrier(side.get());
    pending->wait();
  } else {
    MPI_Barrier(side.get());
    if (r == 1) world->batch({PointToPoint::recv(in, 0, 3), PointToPoint::send(out, 0, 8)});  // late
  }
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

// A 2 x 2 mesh of world ranks: "row" groups {0,1} and {2,3}, "col" groups {0,2} and {1,3} (as tp and dp,
// or as pp and dp). World rank 2 stays outside every watched op while the others start ops that wait
// in a chain on it: 0 waits for 1 (row), 1 waits for 3 (col), 3 waits for 2 (row). Every report must
// name rank 2 as the culprit, not the neighbour each one waits for. `row_op` starts the waiting op of
// ranks 0 and 3 on their row group (a collective, or a recv from the other member); the chain is
// then unwound by the sleeper: it calls `row_answer` (the row op's other half) and its column op.
struct ChainMesh {
  std::shared_ptr<ReportCatcher> catcher = std::make_shared<ReportCatcher>();
  std::shared_ptr<Watchdog> watchdog;
  std::unique_ptr<MpiCommunicator> world;
  std::unique_ptr<Communicator> row, col;

  ChainMesh() {
    watchdog = std::make_shared<Watchdog>(Watchdog::Options{
        .timeout = std::chrono::milliseconds(1000),
        .answer_wait = std::chrono::milliseconds(1500),
        .on_expiry = [c = catcher](const std::string& text) { c->take(text); }});
    world = MpiCommunicator::world(CommOptions{.timeout = std::chrono::milliseconds(1000), .watchdog = watchdog});
    if (world->size() != 4) return;
    const int r = world->rank();
    row = world->split(r < 2 ? std::vector<int>{0, 1} : std::vector<int>{2, 3}, "row");
    col = world->split(r % 2 == 0 ? std::vector<int>{0, 2} : std::vector<int>{1, 3}, "col");
  }

  void run(const std::function<WorkPtr(Communicator&, Tensor&)>& row_op,
           const std::function<void(Communicator&, Tensor&)>& row_answer) {
    constexpr int sleeper = 2;
    Tensor x = ones(8);
    const int r = world->rank();
    MpiComm side = MpiComm::world().dup();  // orders the test's phases, outside the watchdog
    WorkPtr pending;
    if (r == 0 || r == 3) pending = row_op(*row, x);
    if (r == 1) pending = col->allreduce_async(x, x);
    if (r == sleeper) watchdog->mark("began step 3 of 9");
    MPI_Barrier(side.get());  // every waiting op has started before any deadline passes
    if (r != sleeper) {
      const std::string report = catcher->wait_for_report();
      EXPECT_NE(report.find("culprit: world rank 2 (host "), std::string::npos) << report;
      EXPECT_NE(report.find("is busy outside any collective"), std::string::npos) << report;
      EXPECT_NE(report.find("began step 3 of 9"), std::string::npos) << "the culprit's last mark\n" << report;
      for (int other : {0, 1, 3}) {
        EXPECT_EQ(report.find("culprit: world rank " + std::to_string(other)), std::string::npos) << report;
      }
      if (r == 0) {  // the whole chain, each link with its group
        EXPECT_NE(report.find("world rank 0 waits for world rank 1 in "), std::string::npos) << report;
        EXPECT_NE(report.find("world rank 1 waits for world rank 3 in allreduce #0"), std::string::npos) << report;
        EXPECT_NE(report.find("world rank 3 waits for world rank 2 in "), std::string::npos) << report;
      }
    }
    MPI_Barrier(side.get());  // the reports are in: unwind the chain
    if (r == sleeper) {
      row_answer(*row, x);
      col->allreduce(x);
    } else {
      pending->wait();
      if (r == 0) col->allreduce(x);          // the sleeper's column op
      if (r == 1) row_answer(*row, x);        // rank 0's row op
      if (r == 3) col->allreduce(x);          // rank 1's column op
    }
  }
};

TEST(Watchdog, FollowsTheWaitChainAcrossCollectiveGroups) {
  ChainMesh mesh;
  if (mesh.world->size() != 4) GTEST_SKIP() << "needs 4 ranks";
  mesh.run([](Communicator& row, Tensor& x) { return row.allreduce_async(x, x); },
           [](Communicator& row, Tensor& x) { row.allreduce(x); });
}

TEST(Watchdog, FollowsTheWaitChainThroughPointToPoint) {
  ChainMesh mesh;
  if (mesh.world->size() != 4) GTEST_SKIP() << "needs 4 ranks";
  // As a pipeline: ranks 0 and 3 receive from the other member of their row, which sends late.
  mesh.run([](Communicator& row, Tensor& x) { return row.recv_async(x, 1 - row.rank(), {.tag = 7}); },
           [](Communicator& row, Tensor& x) { row.send(x, 1 - row.rank(), {.tag = 7}); });
}

TEST(Watchdog, FollowsTheWaitChainThroughBatches) {
  ChainMesh mesh;
  if (mesh.world->size() != 4) GTEST_SKIP() << "needs 4 ranks";
  // As a pipeline step: ranks 0 and 3 send to and receive from the other member of their row in
  // one batch; the other member posts its mirror batch late.
  auto step = [](Communicator& row, Tensor& x) {
    const int other = 1 - row.rank();
    // The receive's tensor lives in the batch's Work until it completes.
    return row.batch_async({PointToPoint::send(x, other, 2 + row.rank()), PointToPoint::recv(ones(8), other, 3 - row.rank())});
  };
  mesh.run([&](Communicator& row, Tensor& x) { return step(row, x); },
           [&](Communicator& row, Tensor& x) { step(row, x)->wait(); });
}

// The chain logic alone, on made-up answers: a stopped rank, and a cycle (ops in different orders).
PeerOp op_on(std::vector<int> members, std::uint64_t sequence) {
  PeerOp op;
  op.what = "allreduce #" + std::to_string(sequence) + " on " + join_ranks(members);
  op.members = std::move(members);
  op.kind = CollectiveKind::Allreduce;
  op.sequence = sequence;
  return op;
}
PeerStatus in_op(const PeerOp& op, std::uint64_t started_on_op_group = 1) {
  PeerStatus s;
  s.groups[join_ranks(op.members)] = {started_on_op_group, "x"};
  s.in_flight.push_back(op);
  return s;
}

TEST(WaitChain, EndsAtTheRankThatDoesNotAnswer) {
  // 0 waits in {0,1} #0; 1 answers it is in {1,3} #0 (not started {0,1}); 3 was asked, no answer.
  const PeerOp mine = op_on({0, 1}, 0);
  std::map<int, PeerStatus> answers{{0, in_op(mine)}, {1, in_op(op_on({1, 3}, 0))}};
  WaitChain chain = follow_wait_chain(0, mine, answers, {0, 1}, 2.0);
  EXPECT_EQ(chain.to_ask, std::vector<int>{3});  // ask onward
  chain = follow_wait_chain(0, mine, answers, {0, 1, 3}, 2.0);
  EXPECT_EQ(chain.silent, std::vector<int>{3});
  EXPECT_TRUE(chain.busy.empty());
  ASSERT_EQ(chain.links.size(), 2u);
  EXPECT_EQ(chain.links[1].from, 1);
  EXPECT_EQ(chain.links[1].to, 3);
  // 3 answers after all, but only after 8 s without looking for questions (stopped, then resumed
  // as the job ends): still the culprit, and not "busy".
  answers[3].unpolled_s = 8.0;
  chain = follow_wait_chain(0, mine, answers, {0, 1, 3}, 2.0);
  EXPECT_EQ(chain.silent, std::vector<int>{3});
  EXPECT_TRUE(chain.busy.empty());
  answers[3].unpolled_s = 0.4;
  chain = follow_wait_chain(0, mine, answers, {0, 1, 3}, 2.0);
  EXPECT_EQ(chain.busy, std::vector<int>{3});
}

// A rank stopped inside a collective it had started, and resumed as the job ends, answers that it
// started it: the rank blocked in that collective waits for it (hang_culprit_test saw "culprit:
// none" here under load), and without the pause the transfer is stuck.
TEST(WaitChain, AMemberThatPausedInsideAStartedOpIsTheCulprit) {
  // 0 waits in {0,1} #0 for 1, which waits in {1,2} #3; 2 has started it too (its count is past 3).
  const PeerOp mine = op_on({0, 1}, 0);
  const PeerOp theirs = op_on({1, 2}, 3);
  std::map<int, PeerStatus> answers{{0, in_op(mine)}, {1, in_op(theirs, 4)}, {2, in_op(theirs, 4)}};
  answers[2].unpolled_s = 9.0;
  WaitChain chain = follow_wait_chain(0, mine, answers, {0, 1, 2}, 2.0);
  EXPECT_EQ(chain.silent, std::vector<int>{2});
  EXPECT_TRUE(chain.stuck.empty());
  ASSERT_EQ(chain.links.size(), 2u);
  EXPECT_EQ(chain.links[1].from, 1);
  EXPECT_EQ(chain.links[1].to, 2);
  answers[2].unpolled_s = 0.3;  // it ran all along: the transfer itself is stuck
  chain = follow_wait_chain(0, mine, answers, {0, 1, 2}, 2.0);
  EXPECT_FALSE(chain.has_culprit());
  EXPECT_EQ(chain.stuck, std::vector<int>{1});
}

TEST(WaitChain, ACycleEndsWithNoCulprit) {
  // 0 waits in {0,1} #0 for 1; 1 waits in {1,0}-ordered group "b" #0 for 0, which never started it.
  const PeerOp a = op_on({0, 1}, 0);
  const PeerOp b = op_on({1, 0}, 0);
  PeerStatus zero = in_op(a);
  PeerStatus one = in_op(b);
  const std::map<int, PeerStatus> answers{{0, zero}, {1, one}};
  const WaitChain chain = follow_wait_chain(0, a, answers, {0, 1}, 2.0);
  EXPECT_FALSE(chain.has_culprit());
  EXPECT_TRUE(chain.stuck.empty());
  EXPECT_EQ(chain.links.size(), 2u);
}

// Batches in the chain: a message the peer has a matching one for in flight (alone or in a batch)
// is not waited on; a peer with none is, once however many messages go to it.
TEST(WaitChain, ABatchWaitsForThePeersWithoutTheirSide) {
  PeerOp batch;
  batch.what = "p2p batch #4 on 0,1,2";
  batch.members = {0, 1, 2};
  batch.kind = CollectiveKind::Batch;
  batch.messages = {{true, 1, 3}, {false, 2, 8}, {true, 2, 9}};
  PeerOp theirs;  // rank 1 receives from 0 with tag 3, in a batch of its own
  theirs.what = "p2p batch #2 on 0,1,2";
  theirs.members = {0, 1, 2};
  theirs.kind = CollectiveKind::Batch;
  theirs.messages = {{false, 0, 3}};
  PeerStatus one;
  one.in_flight.push_back(theirs);
  PeerStatus two = in_op(op_on({0, 1, 2}, 5));  // rank 2 is in an allreduce
  PeerStatus zero;
  zero.in_flight.push_back(batch);
  // The messages travel in the status line.
  const PeerStatus parsed = PeerStatus::parse(PeerStatus::op_line(batch));
  ASSERT_EQ(parsed.in_flight.size(), 1u);
  ASSERT_EQ(parsed.in_flight[0].messages.size(), 3u);
  EXPECT_FALSE(parsed.in_flight[0].messages[1].send);
  EXPECT_EQ(parsed.in_flight[0].messages[2].peer, 2);
  EXPECT_EQ(parsed.in_flight[0].messages[2].tag, 9);

  const std::map<int, PeerStatus> answers{{0, zero}, {1, one}, {2, two}};
  WaitChain chain = follow_wait_chain(0, batch, answers, {0, 1, 2}, 2.0);
  ASSERT_GE(chain.links.size(), 1u);
  EXPECT_EQ(chain.links[0].from, 0);
  EXPECT_EQ(chain.links[0].to, 2);
  for (const WaitLink& l : chain.links) EXPECT_FALSE(l.from == 0 && l.to == 1) << "rank 1 has its side in flight";
  // A single send of rank 1 with the wrong tag is no match: then 0 waits for 1 too.
  PeerOp wrong = theirs;
  wrong.kind = CollectiveKind::Recv;
  wrong.messages.clear();
  wrong.peer = 0;
  wrong.tag = 4;
  PeerStatus one_wrong;
  one_wrong.in_flight.push_back(wrong);
  chain = follow_wait_chain(0, batch, {{0, zero}, {1, one_wrong}, {2, two}}, {0, 1, 2}, 2.0);
  EXPECT_EQ(chain.links[0].to, 1);
  wrong.tag = 3;  // the right tag: matched
  one_wrong.in_flight = {wrong};
  chain = follow_wait_chain(0, batch, {{0, zero}, {1, one_wrong}, {2, two}}, {0, 1, 2}, 2.0);
  EXPECT_EQ(chain.links[0].to, 2);
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
