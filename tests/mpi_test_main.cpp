// GoogleTest main for multi-rank tests: starts MPI, runs every test on every rank, prints the full
// report on rank 0 and the failures of any other rank tagged with that rank, and makes every rank
// exit non-zero if any rank failed.
#include <gtest/gtest.h>

#include <cstdio>

#include "comm/mpi_runtime.h"
#include "tests/test_env.h"

namespace {

class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: failure\n%s\n", rank_, result.file_name() ? result.file_name() : "?",
                 result.line_number(), result.summary());
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  mt::MpiRuntime mpi(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
  if (mpi.world_rank() != 0) {
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(mpi.world_rank()));
  }
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  mt::testing::shutdown_test_env();  // communicators go before MPI does
  int any_failed = failed;
  MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (mpi.world_rank() == 0 && any_failed && !failed) {
    std::fprintf(stderr, "tests failed on another rank (see its [rank N] lines)\n");
  }
  return any_failed;
}
