// The allocator over host memory: accounting (in use, peak, raw calls), 256-byte blocks, the cap
// set by --device-memory-limit, and block caching (reuse, the "no more than twice" rule, release
// under the cap). Then the cap and the cache as tensors see them through a DeviceContext.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "runtime/allocator.h"  // defines: Allocator, MemoryStats, make_host_raw_memory
#include "runtime/context.h"    // defines: DeviceContext, DeviceOptions
#include "runtime/error.h"      // defines: Error, OutOfMemoryError
#include "runtime/tensor.h"     // defines: Tensor
#include "tests/test_helpers.h"

namespace mt {
namespace {

using testing::contains;
using testing::error_of;

constexpr std::size_t KiB = 1024;
constexpr std::size_t MiB = 1024 * KiB;

bool aligned_256(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 256 == 0; }
TEST(Allocator, CountsRoundedBytesInUseAndPeak) {
  Allocator a(Device::cpu(), make_host_raw_memory(), 0, BlockCache::Off);
  void* p = a.allocate(100);   // rounds to 256
  void* q = a.allocate(1000);  // rounds to 1024
  ASSERT_NE(p, nullptr);
  ASSERT_NE(q, nullptr);
  // The bytes asked for are usable; the rounding slack is not (ASan builds poison it).
  std::memset(p, 0xAB, 100);
  std::memset(q, 0xCD, 1000);
  MemoryStats s = a.stats();
  EXPECT_EQ(s.in_use, 256u + 1024u);
  EXPECT_EQ(s.peak, 256u + 1024u);
  EXPECT_EQ(s.raw_calls, 2u);
  EXPECT_EQ(s.cached, 0u);
  EXPECT_EQ(s.limit, 0u);

  a.deallocate(p);
  s = a.stats();
  EXPECT_EQ(s.in_use, 1024u);
  EXPECT_EQ(s.peak, 1280u);
  EXPECT_EQ(s.cached, 0u);  // not caching: freed bytes go straight back

  void* r = a.allocate(0);  // a zero-byte request still gets a distinct block
  EXPECT_NE(r, nullptr);
  EXPECT_EQ(a.stats().in_use, 1024u + 256u);
  a.deallocate(q);
  a.deallocate(r);
  a.deallocate(nullptr);  // no-op
  s = a.stats();
  EXPECT_EQ(s.in_use, 0u);
  EXPECT_EQ(s.peak, 1280u);
  EXPECT_EQ(s.raw_calls, 3u);
}

TEST(Allocator, BlocksAre256ByteAligned) {
  Allocator a(Device::cpu(), make_host_raw_memory(), 0, BlockCache::Off);
  std::vector<void*> blocks;
  for (std::size_t bytes : {1u, 3u, 255u, 256u, 257u, 4097u, 100000u}) {
    blocks.push_back(a.allocate(bytes));
    EXPECT_TRUE(aligned_256(blocks.back())) << bytes;
  }
  EXPECT_EQ(a.stats().in_use, 256u + 256u + 256u + 256u + 512u + 4352u + 100096u);
  for (void* p : blocks) a.deallocate(p);
}

TEST(Allocator, FreeingAForeignPointerThrows) {
  Allocator a(Device::cpu(), make_host_raw_memory(), 0, BlockCache::Off);
  int local = 0;
  EXPECT_THROW(a.deallocate(&local), Error);
  void* p = a.allocate(64);
  a.deallocate(p);
  EXPECT_THROW(a.deallocate(p), Error);  // double free is caught, not passed to free()
}

TEST(Allocator, CapThrowsOutOfMemoryNamingTheFlagAndDevice) {
  Allocator a(Device::cpu(), make_host_raw_memory(), MiB, BlockCache::Off);
  const std::string what = error_of<OutOfMemoryError>([&] { a.allocate(2 * MiB); });
  EXPECT_TRUE(contains(what, "--device-memory-limit")) << what;
  EXPECT_TRUE(contains(what, "cpu: out of memory")) << what;
  EXPECT_TRUE(contains(what, "2.0 MiB")) << what;  // the request
  EXPECT_TRUE(contains(what, "1.0 MiB")) << what;  // the cap
  MemoryStats s = a.stats();
  EXPECT_EQ(s.in_use, 0u);
  EXPECT_EQ(s.raw_calls, 0u);  // refused before touching the device
  EXPECT_EQ(s.limit, MiB);

  void* whole = a.allocate(MiB);  // exactly the cap fits
  EXPECT_THROW(a.allocate(1), OutOfMemoryError);
  a.deallocate(whole);
  EXPECT_EQ(a.stats().in_use, 0u);
}

TEST(Allocator, WithinTheCapAfterFreeing) {
  Allocator a(Device::cpu(), make_host_raw_memory(), MiB, BlockCache::Off);
  void* big = a.allocate(768 * KiB);
  const std::string what = error_of<OutOfMemoryError>([&] { a.allocate(512 * KiB); });
  EXPECT_TRUE(contains(what, "768.0 KiB already in use")) << what;
  a.deallocate(big);
  void* p = a.allocate(512 * KiB);
  void* q = a.allocate(512 * KiB);
  EXPECT_EQ(a.stats().in_use, MiB);
  EXPECT_EQ(a.stats().peak, MiB);
  a.deallocate(p);
  a.deallocate(q);
}

// A request near SIZE_MAX must fail, not wrap around in the rounding to 256 bytes and come back
// as a tiny block that counts as nothing against the cap.
TEST(Allocator, ImpossibleRequestsThrow) {
  Allocator a(Device::cpu(), make_host_raw_memory(), 0, BlockCache::Off);
  EXPECT_THROW(a.allocate(SIZE_MAX), OutOfMemoryError);
  Allocator capped(Device::cpu(), make_host_raw_memory(), MiB, BlockCache::Off);
  EXPECT_THROW(capped.allocate(SIZE_MAX - 100), OutOfMemoryError);
  EXPECT_EQ(capped.stats().in_use, 0u);
}

TEST(AllocatorCache, ReusesAFreedBlockOfTheSameSize) {
  Allocator a(Device::cpu(), make_host_raw_memory(), 0, BlockCache::UpToTwice);
  void* p = a.allocate(1000);
  a.deallocate(p);
  MemoryStats s = a.stats();
  EXPECT_EQ(s.in_use, 0u);
  EXPECT_EQ(s.cached, 1024u);
  EXPECT_EQ(s.raw_calls, 1u);

  void* q = a.allocate(1000);
  EXPECT_EQ(q, p);
  s = a.stats();
  EXPECT_EQ(s.raw_calls, 1u);
  EXPECT_EQ(s.cached, 0u);
  EXPECT_EQ(s.in_use, 1024u);

  a.deallocate(q);
  void* r = a.allocate(600);  // rounds to 768; the 1024 block is within twice that
  EXPECT_EQ(r, p);
  EXPECT_EQ(a.stats().in_use, 1024u);  // the whole block counts
  EXPECT_EQ(a.stats().raw_calls, 1u);
  a.deallocate(r);
}

TEST(AllocatorCache, SmallRequestsDoNotTakeBigBlocks) {
  Allocator a(Device::cpu(), make_host_raw_memory(), 0, BlockCache::UpToTwice);
  void* big = a.allocate(4096);
  a.deallocate(big);
  void* small = a.allocate(1024);  // 4096 > 2 * 1024: the cached block stays
  EXPECT_NE(small, big);
  MemoryStats s = a.stats();
  EXPECT_EQ(s.raw_calls, 2u);
  EXPECT_EQ(s.cached, 4096u);
  EXPECT_EQ(s.in_use, 1024u);

  void* half = a.allocate(2048);  // exactly twice smaller may take it
  EXPECT_EQ(half, big);
  EXPECT_EQ(a.stats().raw_calls, 2u);
  EXPECT_EQ(a.stats().in_use, 1024u + 4096u);
  a.deallocate(small);
  a.deallocate(half);
}

TEST(AllocatorCache, TakesTheBestFit) {
  Allocator a(Device::cpu(), make_host_raw_memory(), 0, BlockCache::UpToTwice);
  void* b4 = a.allocate(4096);
  void* b2 = a.allocate(2048);
  void* b3 = a.allocate(3072);
  a.deallocate(b4);
  a.deallocate(b2);
  a.deallocate(b3);
  EXPECT_EQ(a.allocate(2000), b2);  // 2048: the smallest that fits
  EXPECT_EQ(a.allocate(2100), b3);  // 2304 -> 3072, not 4096
  EXPECT_EQ(a.allocate(2100), b4);  // 4096 <= 2 * 2304
  EXPECT_EQ(a.stats().raw_calls, 3u);
  EXPECT_EQ(a.stats().cached, 0u);
}

TEST(AllocatorCache, ReleaseCachedEmptiesTheCache) {
  Allocator a(Device::cpu(), make_host_raw_memory(), 0, BlockCache::UpToTwice);
  void* p = a.allocate(1000);
  void* q = a.allocate(5000);
  void* kept = a.allocate(256);
  a.deallocate(p);
  a.deallocate(q);
  EXPECT_EQ(a.stats().cached, 1024u + 5120u);
  a.release_cached();
  MemoryStats s = a.stats();
  EXPECT_EQ(s.cached, 0u);
  EXPECT_EQ(s.in_use, 256u);  // live blocks are not touched
  EXPECT_EQ(s.raw_calls, 3u);
  a.allocate(1000);  // nothing cached: goes to the device again
  EXPECT_EQ(a.stats().raw_calls, 4u);
  a.deallocate(kept);
}

TEST(AllocatorCache, CachedBlocksMakeRoomUnderTheCap) {
  Allocator a(Device::cpu(), make_host_raw_memory(), MiB, BlockCache::UpToTwice);
  void* first = a.allocate(600 * KiB);
  a.deallocate(first);
  EXPECT_EQ(a.stats().cached, 600 * KiB);
  // 700K cannot reuse the 600K block, and 600K cached + 700K new would pass the cap:
  // the cache is released first.
  void* second = nullptr;
  ASSERT_NO_THROW(second = a.allocate(700 * KiB));
  MemoryStats s = a.stats();
  EXPECT_EQ(s.in_use, 700 * KiB);
  EXPECT_EQ(s.cached, 0u);
  EXPECT_EQ(s.raw_calls, 2u);
  a.deallocate(second);
}

// Whatever the sequence, the bytes held (in use plus cached) never pass the cap, and a request
// that fits beside what is in use never fails.
TEST(AllocatorCache, HeldBytesStayUnderTheCap) {
  const std::size_t cap = 2 * MiB;
  Allocator a(Device::cpu(), make_host_raw_memory(), cap, BlockCache::UpToTwice);
  std::mt19937 rng(1234);
  std::vector<std::pair<void*, std::size_t>> live;
  std::size_t in_use = 0;
  int refused = 0;
  for (int step = 0; step < 2000; ++step) {
    if (!live.empty() && rng() % 2 == 0) {
      const std::size_t i = rng() % live.size();
      a.deallocate(live[i].first);
      in_use -= live[i].second;
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      const std::size_t bytes = 256 * (1 + rng() % 1024);  // 256 B .. 256 KiB, already rounded
      try {
        void* p = a.allocate(bytes);
        const std::size_t got = a.stats().in_use - in_use;  // a reused block may be up to twice bigger
        EXPECT_GE(got, bytes);
        EXPECT_LE(got, 2 * bytes);
        live.emplace_back(p, got);
        in_use += got;
      } catch (const OutOfMemoryError&) {
        EXPECT_GT(in_use + bytes, cap) << "refused although it fits, step " << step;
        ++refused;
      }
    }
    const MemoryStats s = a.stats();
    ASSERT_EQ(s.in_use, in_use);
    ASSERT_LE(s.in_use + s.cached, cap) << "step " << step;
  }
  EXPECT_GT(refused, 0);  // the sequence did reach the cap
  for (auto& [p, bytes] : live) a.deallocate(p);
  EXPECT_EQ(a.stats().in_use, 0u);
}

TEST(AllocatorContext, TensorOverTheCapThrowsOutOfMemory) {
  DeviceContext ctx(DeviceOptions{Device::cpu(), MiB, 1});
  const std::string what = error_of<OutOfMemoryError>([&] { Tensor::empty({1024, 1024}, DType::F32, ctx); });  // 4 MiB
  EXPECT_TRUE(contains(what, "--device-memory-limit")) << what;
  EXPECT_TRUE(contains(what, "cpu")) << what;
  EXPECT_EQ(ctx.allocator().stats().in_use, 0u);
  {
    Tensor t = Tensor::empty({1000}, DType::F32, ctx);  // 4000 bytes -> 4096
    EXPECT_EQ(ctx.allocator().stats().in_use, 4096u);
    Tensor view = t.flat_slice(10, 20);
    t = Tensor();
    EXPECT_EQ(ctx.allocator().stats().in_use, 4096u);  // the view keeps the storage alive
  }
  EXPECT_EQ(ctx.allocator().stats().in_use, 0u);

  // Two tensors of 600K do not fit under 1 MiB together, one after the other they do.
  {
    Tensor a = Tensor::empty({600 * 256}, DType::F32, ctx);
    EXPECT_THROW(Tensor::empty({600 * 256}, DType::I32, ctx), OutOfMemoryError);
  }
  Tensor b = Tensor::empty({600 * 256}, DType::I32, ctx);
  EXPECT_EQ(ctx.allocator().stats().in_use, 600 * KiB);
  EXPECT_EQ(ctx.allocator().stats().peak, 600 * KiB);
}

// The host's policy: a block serves its own size only, so in_use and the peak stay what was asked;
// a miss with more cached than in use gives the cache back (sizes that never recur do not pile up).
TEST(AllocatorCache, ExactSizeReusesOnlyItsOwnSizeAndGivesBackAPileOfOthers) {
  Allocator a(Device::cpu(), make_host_raw_memory(), 0, BlockCache::ExactSize);
  a.deallocate(a.allocate(4096));
  void* same = a.allocate(4000);  // rounds to 4096: the cached block
  EXPECT_EQ(a.stats().raw_calls, 1u);
  EXPECT_EQ(a.stats().cached, 0u);
  void* big = a.allocate(8192);  // a miss, with nothing cached: nothing to give back
  EXPECT_EQ(a.stats().raw_calls, 2u);
  a.deallocate(big);
  EXPECT_EQ(a.stats().cached, 8192u);
  void* small = a.allocate(1024);  // would fit in the 8192 block, but only its own size may take it
  MemoryStats s = a.stats();
  EXPECT_EQ(s.raw_calls, 3u);
  EXPECT_EQ(s.in_use, 4096u + 1024u) << "in use counts what was asked, not a larger block";
  EXPECT_EQ(s.cached, 0u) << "8192 cached against 4096 in use: given back on the miss";
  EXPECT_EQ(s.peak, 4096u + 8192u);
  a.deallocate(same);
  a.deallocate(small);
  void* again = a.allocate(1024);
  EXPECT_EQ(a.stats().raw_calls, 3u);
  a.deallocate(again);
}

// A CPU context keeps freed blocks too: a step's big scratch (the logits chunk, the attention
// probabilities) is past glibc's mmap threshold and would otherwise be faulted in again each step.
TEST(AllocatorContext, CpuContextReusesFreedBlocks) {
  DeviceContext ctx(DeviceOptions{Device::cpu(), 0, 1});
  { Tensor first = Tensor::empty({16 * 1024 * 1024}, DType::F32, ctx); }  // 64 MiB
  const MemoryStats after_first = ctx.allocator().stats();
  EXPECT_EQ(after_first.raw_calls, 1u);
  EXPECT_EQ(after_first.cached, 64 * MiB);
  for (int i = 0; i < 3; ++i) {
    Tensor again = Tensor::empty({16 * 1024 * 1024}, DType::F32, ctx);
    EXPECT_EQ(ctx.allocator().stats().raw_calls, 1u) << "re-allocation " << i;
  }
  ctx.allocator().release_cached();
  EXPECT_EQ(ctx.allocator().stats().cached, 0u);
}

}  // namespace
}  // namespace mt
