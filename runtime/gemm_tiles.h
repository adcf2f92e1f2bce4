// How the CPU GEMM cuts its output into tiles, so that its bits never depend on the thread count.
//
// OpenBLAS threads a GEMM by splitting C among its threads, and some of its kernels (Haswell's and
// Zen's sgemm among them; selected on every AVX2 CPU without AVX-512) round an element differently
// depending on where the split falls: 1 and 2 threads gave 2,976 different outputs of a
// [64x64]x[64x256]^T product. So the CPU GEMM splits C itself, into tiles whose shape is a function
// of the problem alone, computes each tile with one single-threaded sgemm, and lets the threads share
// the tiles out: whatever thread takes a tile, it computes the same call on the same data.
//
// The shape trades balance against packing. Each tile packs its own rows of A and columns of B,
// so the copies per flop grow as 1/rows + 1/cols: their count is a power of two, 4 when the product
// is big enough, so 1, 2 or 4 threads share equal tiles evenly, and more only while every tile keeps
// at least 1024 x 1024 outputs (with 256 x 256 tiles GPT-2's step was 8% slower on 2 threads; with
// these it is within the noise of OpenBLAS's own threading: docs/PERFORMANCE.md, "GEMM tiles").
#pragma once

#include <cstdint>

namespace mt::blas {

struct GemmTiles {
  std::int64_t rows = 0, cols = 0;        // of every tile but the last in each direction
  std::int64_t along_m = 1, along_n = 1;  // tiles down and across C
  std::int64_t count() const { return along_m * along_n; }
};

// The tiles of an m x n output over an inner dimension k; depends on (m, n, k) only.
GemmTiles plan_gemm_tiles(std::int64_t m, std::int64_t n, std::int64_t k);

}  // namespace mt::blas
