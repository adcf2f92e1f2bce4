#include "runtime/gemm_tiles.h"

#include <algorithm>

namespace mt::blas {
namespace {

constexpr std::int64_t kAlign = 16;                  // rows and columns of a tile: a multiple of the kernels' unrolls
constexpr std::int64_t kLargeTileArea = 1024 * 1024; // beyond the first four tiles, none smaller than this
constexpr std::int64_t kSmallTileArea = 64 * 64;     // below this, a product is not split at all
constexpr std::int64_t kSmallProduct = 1 << 18;      // multiply-adds: not worth a second thread

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }
std::int64_t round_up(std::int64_t a, std::int64_t b) { return ceil_div(a, b) * b; }

// The split of `count` tiles (a power of two) into along_m x along_n with the least packing per flop.
GemmTiles best_split(std::int64_t m, std::int64_t n, std::int64_t count) {
  GemmTiles best;
  double best_cost = 0.0;
  for (std::int64_t along_m = 1; along_m <= count; along_m *= 2) {
    const std::int64_t along_n = count / along_m;
    if ((along_m > 1 && m < along_m * kAlign) || (along_n > 1 && n < along_n * kAlign)) continue;  // too thin
    GemmTiles t;
    t.rows = std::min(m, round_up(ceil_div(m, along_m), kAlign));
    t.cols = std::min(n, round_up(ceil_div(n, along_n), kAlign));
    t.along_m = ceil_div(m, t.rows);
    t.along_n = ceil_div(n, t.cols);
    const double cost = 1.0 / static_cast<double>(t.rows) + 1.0 / static_cast<double>(t.cols);
    if (best.rows == 0 || cost < best_cost) {
      best = t;
      best_cost = cost;
    }
  }
  return best;
}

}  // namespace

GemmTiles plan_gemm_tiles(std::int64_t m, std::int64_t n, std::int64_t k) {
  GemmTiles whole{m, n, 1, 1};
  if (m <= 0 || n <= 0) return whole;
  const std::int64_t area = m * n;
  std::int64_t count = 1;
  if (area * std::max<std::int64_t>(k, 1) >= kSmallProduct) {
    while (count < 4 && area / (2 * count) >= kSmallTileArea) count *= 2;
    while (count >= 4 && area / (2 * count) >= kLargeTileArea) count *= 2;
  }
  // Shrink the count until a split exists (a 16 x 100000 matrix has no 2 x 2 split).
  for (; count > 1; count /= 2) {
    const GemmTiles t = best_split(m, n, count);
    if (t.rows > 0) return t;
  }
  return whole;
}

}  // namespace mt::blas
