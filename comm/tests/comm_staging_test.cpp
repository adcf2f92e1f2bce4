// The MPI backend's staging pool on its own (comm/staging_pool.h), on the CPU device, whose buffers
// are plain memory: reuse by size class, no allocation at steady state, no buffer handed out twice,
// fenced returns, releases from another thread. And MESHTRAIN_MPI_DEVICE_COMM's parsing.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "comm/mpi_device_comm.h"    // defines: parse_mpi_device_comm, mpi_device_comm_from_env
#include "comm/staging_pool.h"       // defines: StagingPool, StagingFence
#include "runtime/device_counters.h" // defines: device_counters
#include "runtime/error.h"           // defines: EnvironmentError

namespace mt {
namespace {

// A fence the test opens by hand.
class ManualFence final : public StagingFence {
 public:
  bool done() const override { return open.load(); }
  void wait() const override {
    waited.store(true);
    open.store(true);
  }
  mutable std::atomic<bool> open{false};
  mutable std::atomic<bool> waited{false};
};

TEST(StagingPool, SizeClassesArePowersOfTwoFromTheMinimum) {
  EXPECT_EQ(StagingPool::size_class(1, 4096), 4096u);
  EXPECT_EQ(StagingPool::size_class(4096, 4096), 4096u);
  EXPECT_EQ(StagingPool::size_class(4097, 4096), 8192u);
  EXPECT_EQ(StagingPool::size_class(3, 1), 4u);
  EXPECT_EQ(StagingPool::size_class(std::size_t{1} << 30, 4096), std::size_t{1} << 30);
  EXPECT_EQ(StagingPool::size_class((std::size_t{1} << 30) + 1, 4096), std::size_t{1} << 31);
}

TEST(StagingPool, ReusesAReleasedBufferOfTheSameClass) {
  StagingPool pool(Device::cpu());
  const DeviceCounters before = device_counters();
  char* first = nullptr;
  {
    StagingPool::Lease a = pool.acquire(1000);
    ASSERT_NE(a.data(), nullptr);
    EXPECT_EQ(a.bytes(), 4096u);
    std::memset(a.data(), 7, a.bytes());  // the whole class is usable
    first = a.data();
    EXPECT_EQ(pool.stats().in_use, 1u);
  }  // destroyed: back at once
  EXPECT_EQ(pool.stats().in_use, 0u);
  EXPECT_EQ(pool.stats().cached, 1u);
  StagingPool::Lease b = pool.acquire(3000);  // same class
  EXPECT_EQ(b.data(), first);
  EXPECT_EQ(pool.stats().allocations, 1u);
  StagingPool::Lease c = pool.acquire(5000);  // another class: a new buffer
  EXPECT_NE(c.data(), first);
  EXPECT_EQ(c.bytes(), 8192u);
  EXPECT_EQ(pool.stats().allocations, 2u);
  EXPECT_EQ((device_counters() - before).allocations, 2u) << "each new buffer counts as an allocation";
}

TEST(StagingPool, ZeroBytesIsNoBuffer) {
  StagingPool pool(Device::cpu());
  StagingPool::Lease none = pool.acquire(0);
  EXPECT_FALSE(none.held());
  EXPECT_EQ(none.data(), nullptr);
  EXPECT_EQ(pool.stats().allocations, 0u);
}

TEST(StagingPool, ABufferInUseIsNeverHandedOutAgain) {
  StagingPool pool(Device::cpu());
  std::vector<StagingPool::Lease> held;
  std::set<char*> seen;
  for (int i = 0; i < 8; ++i) {
    held.push_back(pool.acquire(100));
    EXPECT_TRUE(seen.insert(held.back().data()).second) << "lease " << i << " got a buffer already out";
  }
  EXPECT_EQ(pool.stats().allocations, 8u);
  held.clear();
  EXPECT_EQ(pool.stats().cached, 8u);
  for (int i = 0; i < 8; ++i) {
    held.push_back(pool.acquire(100));
    EXPECT_TRUE(seen.count(held.back().data())) << "a cached buffer is reused";
  }
  EXPECT_EQ(pool.stats().allocations, 8u);
}

TEST(StagingPool, SteadyStateAllocatesNothing) {
  StagingPool pool(Device::cpu());
  const std::size_t sizes[] = {64, 5000, 70000, 4096, 1 << 20};
  auto step = [&] {
    // An op's buffers live together (a batch), then come back.
    std::vector<StagingPool::Lease> step_leases;
    for (std::size_t bytes : sizes) step_leases.push_back(pool.acquire(bytes));
  };
  step();
  const std::uint64_t warm = pool.stats().allocations;
  const DeviceCounters before = device_counters();
  for (int i = 0; i < 50; ++i) step();
  EXPECT_EQ(pool.stats().allocations, warm);
  EXPECT_EQ((device_counters() - before).allocations, 0u);
}

TEST(StagingPool, AFencedBufferComesBackOnlyOnceItsFenceIsDone) {
  StagingPool pool(Device::cpu());
  auto fence = std::make_shared<ManualFence>();
  StagingPool::Lease a = pool.acquire(100);
  char* fenced = a.data();
  a.release_after(fence);
  EXPECT_FALSE(a.held());
  EXPECT_EQ(pool.stats().pending, 1u);
  StagingPool::Lease b = pool.acquire(100);
  EXPECT_NE(b.data(), fenced) << "the device may still copy into or out of it";
  EXPECT_EQ(pool.stats().allocations, 2u);
  fence->open = true;
  StagingPool::Lease c = pool.acquire(100);
  EXPECT_EQ(c.data(), fenced);
  EXPECT_EQ(pool.stats().pending, 0u);
  EXPECT_EQ(pool.stats().allocations, 2u);
}

TEST(StagingPool, ReclaimDropsFencesThatAreDone) {
  StagingPool pool(Device::cpu());
  auto fence = std::make_shared<ManualFence>();
  pool.acquire(100).release_after(fence);
  EXPECT_EQ(fence.use_count(), 2);
  fence->open = true;
  pool.reclaim();
  EXPECT_EQ(fence.use_count(), 1) << "the pool let go of the fence (and what it keeps alive)";
  EXPECT_EQ(pool.stats().cached, 1u);
}

TEST(StagingPool, TheLastOwnerWaitsForPendingFencesBeforeFreeing) {
  auto fence = std::make_shared<ManualFence>();
  {
    StagingPool pool(Device::cpu());
    pool.acquire(100).release_after(fence);
  }
  EXPECT_TRUE(fence->waited.load());
}

TEST(StagingPool, ALeaseMayOutliveItsPool) {
  StagingPool::Lease kept;
  {
    StagingPool pool(Device::cpu());
    kept = pool.acquire(100);
  }
  std::memset(kept.data(), 1, kept.bytes());
  kept.release();  // returns to the pool's state, freed with it
  EXPECT_FALSE(kept.held());
}

// The caller's thread acquires, another (the engine) releases, some at once, some after a fence;
// at most kInFlight buffers are out at a time, so the pool never needs more than that per class.
TEST(StagingPool, ReleasesFromAnotherThreadAreSafeAndReused) {
  constexpr int kInFlight = 4;
  constexpr int kOps = 2000;
  StagingPool pool(Device::cpu());
  std::mutex mutex;
  std::condition_variable cv;
  std::deque<StagingPool::Lease> queue;
  std::set<char*> out;  // buffers held by a lease now
  bool twice = false;
  std::thread engine([&] {
    for (int i = 0; i < kOps; ++i) {
      StagingPool::Lease lease;
      {
        std::unique_lock lock(mutex);
        cv.wait(lock, [&] { return !queue.empty(); });
        lease = std::move(queue.front());
        queue.pop_front();
        out.erase(lease.data());
      }
      if (i % 2 == 0) {
        auto fence = std::make_shared<ManualFence>();
        fence->open = true;
        lease.release_after(fence);
      } else {
        lease.release();
      }
      cv.notify_all();
    }
  });
  for (int i = 0; i < kOps; ++i) {
    {
      std::unique_lock lock(mutex);
      cv.wait(lock, [&] { return queue.size() + out.size() < kInFlight; });
    }
    StagingPool::Lease lease = pool.acquire(static_cast<std::size_t>(100 + i % 3 * 5000));
    std::memset(lease.data(), i & 0xff, 64);
    {
      std::lock_guard lock(mutex);
      if (!out.insert(lease.data()).second) twice = true;
      queue.push_back(std::move(lease));
    }
    cv.notify_all();
  }
  engine.join();
  EXPECT_FALSE(twice) << "a buffer was handed out while another lease held it";
  const StagingPool::Stats s = pool.stats();
  EXPECT_EQ(s.in_use, 0u);
  EXPECT_LE(s.allocations, static_cast<std::uint64_t>(3 * (kInFlight + 1))) << "three classes, few in flight";
}

TEST(MpiDeviceCommSwitch, ParsesTheThreeModes) {
  EXPECT_EQ(parse_mpi_device_comm(""), MpiDeviceComm::Sync);
  EXPECT_EQ(parse_mpi_device_comm("sync"), MpiDeviceComm::Sync);
  EXPECT_EQ(parse_mpi_device_comm("async"), MpiDeviceComm::Async);
  EXPECT_EQ(parse_mpi_device_comm("cuda-aware"), MpiDeviceComm::CudaAware);
  for (MpiDeviceComm m : {MpiDeviceComm::Sync, MpiDeviceComm::Async, MpiDeviceComm::CudaAware}) {
    EXPECT_EQ(parse_mpi_device_comm(mpi_device_comm_name(m)), m);
  }
}

TEST(MpiDeviceCommSwitch, ABadValueIsOneErrorNamingTheVariable) {
  for (const char* bad : {"Async", "cuda_aware", "nccl", "on", " async"}) {
    try {
      parse_mpi_device_comm(bad);
      ADD_FAILURE() << "'" << bad << "' was accepted";
    } catch (const EnvironmentError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("MESHTRAIN_MPI_DEVICE_COMM="), std::string::npos) << what;
      EXPECT_NE(what.find(bad), std::string::npos) << what;
      EXPECT_NE(what.find("sync (the default), async or cuda-aware"), std::string::npos) << what;
    }
  }
}

TEST(MpiDeviceCommSwitch, ReadFromTheEnvironmentSyncWhenUnset) {
  const char* was = std::getenv(kMpiDeviceCommEnv);
  const std::string saved = was != nullptr ? was : "";
  unsetenv(kMpiDeviceCommEnv);
  EXPECT_EQ(mpi_device_comm_from_env(), MpiDeviceComm::Sync);
  setenv(kMpiDeviceCommEnv, "async", 1);
  EXPECT_EQ(mpi_device_comm_from_env(), MpiDeviceComm::Async);
  setenv(kMpiDeviceCommEnv, "fast", 1);
  EXPECT_THROW(mpi_device_comm_from_env(), EnvironmentError);
  if (was != nullptr) {
    setenv(kMpiDeviceCommEnv, saved.c_str(), 1);
  } else {
    unsetenv(kMpiDeviceCommEnv);
  }
}

}  // namespace
}  // namespace mt
