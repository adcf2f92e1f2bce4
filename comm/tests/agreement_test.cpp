// agree_on_error: one rank's failure becomes the same JobError on every rank; no failure, no error.
// agree_on_first_rank_error: the first rank's verdict on work it alone did, the same on every rank.
// agree_on_max: the largest of the ranks' numbers (a stop asked of one rank stops them all).
#include "comm/agreement.h"

#include <gtest/gtest.h>

#include "tests/test_env.h"

namespace mt {
namespace {

using testing::test_context;
using testing::test_world;

std::string job_error_of(const std::optional<std::string>& mine) {
  try {
    agree_on_error(test_world(), test_context(), mine);
  } catch (const JobError& e) {
    return e.message();
  }
  return "";
}

TEST(Agreement, MaxIsTheLargestOfEveryRanksNumber) {
  const int rank = test_world().rank(), last = test_world().size() - 1;
  EXPECT_EQ(agree_on_max(test_world(), test_context(), 0), 0);
  EXPECT_EQ(agree_on_max(test_world(), test_context(), rank == last ? 15 : 0), 15);
  EXPECT_EQ(agree_on_max(test_world(), test_context(), 10 * rank - 7), 10 * last - 7);
}

TEST(Agreement, NoFailureThrowsNothing) { EXPECT_EQ(job_error_of(std::nullopt), ""); }

TEST(Agreement, OneRankFailingStopsEveryRank) {
  const int last = test_world().size() - 1;
  const auto mine = test_world().rank() == last ? std::optional<std::string>("disk full") : std::nullopt;
  const std::string expected = test_world().size() == 1 ? "disk full" : "rank " + std::to_string(last) + ": disk full";
  EXPECT_EQ(job_error_of(mine), expected);
}

TEST(Agreement, TheSameFailureEverywhereIsReportedOnce) {
  EXPECT_EQ(job_error_of(std::string("checkpoint holds another model")), "checkpoint holds another model");
}

TEST(Agreement, DifferentFailuresNameTheLowestRankAndCountTheOthers) {
  const int n = test_world().size();
  if (n < 3) GTEST_SKIP() << "needs 3 ranks";
  const int r = test_world().rank();
  const auto mine = r >= 1 ? std::optional<std::string>("bad shard " + std::to_string(r)) : std::nullopt;
  EXPECT_EQ(job_error_of(mine), "rank 1: bad shard 1 (and " + std::to_string(n - 2) + " more rank(s) failed)");
}

TEST(Agreement, RunAgreedCatchesAnyException) {
  const bool fail = test_world().rank() == 0;
  std::string message;
  try {
    run_agreed(test_world(), test_context(), [&] {
      if (fail) throw std::runtime_error("boom");
    });
  } catch (const JobError& e) {
    message = e.message();
  }
  EXPECT_EQ(message, test_world().size() == 1 ? "boom" : "rank 0: boom");
}

std::string first_rank_error_of(const std::optional<std::string>& mine) {
  try {
    agree_on_first_rank_error(test_world(), test_context(), mine);
  } catch (const JobError& e) {
    return e.message();
  }
  return "";
}

TEST(Agreement, TheFirstRanksErrorReachesEveryRankUnprefixed) {
  const bool first = test_world().rank() == 0;
  EXPECT_EQ(first_rank_error_of(first ? std::optional<std::string>("directory 'ck' is in use") : std::nullopt),
            "directory 'ck' is in use");
  EXPECT_EQ(first_rank_error_of(std::nullopt), "");
  // Only the first rank's verdict counts: the others pass nothing, and what they pass is not read.
  EXPECT_EQ(first_rank_error_of(first ? std::nullopt : std::optional<std::string>("ignored")), "");
  EXPECT_EQ(first_rank_error_of(first ? std::optional<std::string>("") : std::nullopt), "unknown error");
}

}  // namespace
}  // namespace mt
