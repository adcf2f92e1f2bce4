// ZeRO-1 under bf16 lays its flat store out in two regions (zero_flat_regions): the parameters read
// in fp32 first, the GEMM weights after them from a multiple of dp, each region in the specs'
// order. On gpt2 and llama stages at dp 3: the regions are asked for only where they serve (ZeRO-1,
// bf16, dp > 1); the store's views tile its buffer without overlap at those offsets; and the
// gradient buckets cut at the region's start hold GEMM weights alone or none of them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "models/gpt.h"
#include "parallel/grad_buckets.h"
#include "runtime/context.h"
#include "zero/zero_engine.h"

namespace mt {
namespace {

constexpr int kDp = 3;

class FlatRegions : public ::testing::TestWithParam<std::string> {};

TEST_P(FlatRegions, KeepTheGemmWeightsApart) {
  GptConfig config = gpt_preset(GetParam());
  config.vocab_size = 130;  // no multiple of dp: the padding between the regions is needed
  config.max_seq_len = 16;
  const std::vector<ParamSpec> specs = gpt_parameter_specs(config);
  EXPECT_TRUE(zero_flat_regions(1, specs, 1, DType::BF16).empty()) << "one rank gathers nothing";
  EXPECT_TRUE(zero_flat_regions(1, specs, kDp, DType::F32).empty()) << "fp32 has no copy to gather";
  EXPECT_TRUE(zero_flat_regions(0, specs, kDp, DType::BF16).empty()) << "ZeRO-0 gathers nothing";
  const std::vector<int> regions = zero_flat_regions(1, specs, kDp, DType::BF16);
  ASSERT_EQ(regions.size(), specs.size());

  DeviceContext ctx(DeviceOptions{Device::cpu(), 0, 1});
  GptOptions options;
  options.flat_regions = regions;
  const Gpt model(ctx, config, DType::BF16, GptPartition::whole(config), TensorParallel{}, kDp, options);
  const ParameterStore& store = model.parameters();
  ASSERT_EQ(store.region_starts().size(), 2u);
  const std::int64_t start = store.region_starts()[1];
  EXPECT_EQ(start % kDp, 0);
  EXPECT_EQ(store.numel() % kDp, 0);
  std::vector<FlatParam> params;
  std::vector<char> used(static_cast<std::size_t>(store.numel()), 0);
  std::int64_t previous[2] = {-1, -1};
  for (std::size_t i = 0; i < store.size(); ++i) {
    const bool gemm = read_only_as_compute_copy(store.spec(i).kind);
    EXPECT_EQ(regions[i], gemm ? 1 : 0) << store.spec(i).name;
    const std::int64_t at = store.offset(i), n = store.spec(i).numel();
    EXPECT_EQ(at >= start, gemm) << store.spec(i).name << " at " << at;
    EXPECT_GT(at, previous[gemm ? 1 : 0]) << store.spec(i).name << ": a region keeps the specs' order";
    previous[gemm ? 1 : 0] = at;
    for (std::int64_t e = at; e < at + n; ++e) EXPECT_EQ(used[static_cast<std::size_t>(e)]++, 0) << "element " << e;
    // The views are the buffer at those offsets.
    EXPECT_EQ(store.param(i).data(), store.flat_params().flat_slice(at, n).data()) << store.spec(i).name;
    EXPECT_EQ(store.compute_param(i).data(), store.flat_compute_params().flat_slice(at, n).data());
    params.push_back({store.spec(i).name, at, n, store.spec(i).decay, 1.0, gemm});
  }
  EXPECT_EQ(std::count(used.begin(), used.end(), 1), store.param_numel());

  const BucketLayout layout = make_bucket_layout(params, store.numel(), kDp, 4096, std::vector<std::int64_t>{start});
  int gemm_buckets = 0;
  for (const Bucket& bucket : layout.buckets) {
    const auto gemm = std::count_if(bucket.params.begin(), bucket.params.end(),
                                    [&](int p) { return params[static_cast<std::size_t>(p)].compute_only; });
    EXPECT_TRUE(gemm == 0 || gemm == static_cast<long>(bucket.params.size())) << "a bucket mixes: [" << bucket.begin
                                                                              << ", " << bucket.end << ")";
    gemm_buckets += gemm > 0 ? 1 : 0;
  }
  EXPECT_GT(gemm_buckets, 1);
}

// What ZeRO-1 in bf16 gathers after the update, per parameter, from the specs alone (the buckets of
// region 1 gather 2 bytes an element, region 0's 4): the full-size presets (gpt2 2.64, llama-125m
// 2.81, its 100K-row embedding read in fp32).
TEST(FlatRegions, CutTheGatherOnFullSizeModels) {
  for (const std::string preset : {"gpt2", "llama-125m"}) {
    const std::vector<ParamSpec> specs = gpt_parameter_specs(gpt_preset(preset));
    const std::vector<int> regions = zero_flat_regions(1, specs, 8, DType::BF16);
    double params = 0, bytes = 0;
    for (std::size_t i = 0; i < specs.size(); ++i) {
      params += static_cast<double>(specs[i].numel());
      bytes += static_cast<double>(specs[i].numel()) * (regions[i] == 1 ? 2.0 : 4.0);
    }
    std::printf("[ gather ] %s ZeRO-1 bf16 after the update: %.3f bytes a parameter (fp32: 4)\n", preset.c_str(),
                bytes / params);
    EXPECT_LT(bytes / params, 3.0) << preset << ": the GEMM weights are most of the model";
  }
}

INSTANTIATE_TEST_SUITE_P(Presets, FlatRegions, ::testing::Values("tiny", "llama-tiny"),
                         [](const auto& p) { return p.param == "tiny" ? std::string("Gpt2") : std::string("Llama"); });

}  // namespace
}  // namespace mt
