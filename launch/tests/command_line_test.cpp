// parse_command_line with a --config ini file, as `meshtrain train` reads it: values from the file,
// the command line winning, and the inputs launch/tests/fuzz_config_file.cpp found to hang or to
// overflow, each now a clear UsageError.
#include "launch/command_line.h"  // defines: parse_command_line

#include <gtest/gtest.h>

#include <boost/program_options.hpp>
#include <fstream>
#include <string>
#include <vector>

#include "launch/cli.h"            // defines: UsageError
#include "launch/model_options.h"  // defines: read_model_config
#include "launch/train_command.h"  // defines: train_options, read_settings, read_layout
#include "tests/scratch_dir.h"     // defines: ScratchDir

namespace mt {
namespace {

namespace po = boost::program_options;
using testing::ScratchDir;

// The variables of `meshtrain train ARGS --config FILE` with FILE holding `text`.
po::variables_map parse_train(const ScratchDir& dir, const std::string& text, std::vector<std::string> args = {}) {
  const std::string file = (dir / "train.ini").string();
  std::ofstream(file) << text;
  args.insert(args.end(), {"--config", file});
  po::options_description desc = train_options();
  return *parse_command_line("train", "test", desc, args, /*rank=*/1);
}

// The message of the UsageError `fn` throws, or a failure when it throws none.
template <class Fn>
std::string usage_error_of(Fn&& fn) {
  try {
    fn();
  } catch (const UsageError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a UsageError";
  return "";
}

TEST(ConfigFile, ValuesComeFromTheFileAndTheCommandLineWins) {
  ScratchDir dir("command_line");
  const po::variables_map vm = parse_train(dir, "steps = 7\n# a comment\nlr = 0.5\n\nmodel = small\n", {"--steps", "9"});
  EXPECT_EQ(vm["steps"].as<int>(), 9);
  EXPECT_EQ(vm["lr"].as<float>(), 0.5f);
  EXPECT_EQ(vm["model"].as<std::string>(), "small");
  EXPECT_EQ(parse_train(dir, "")["steps"].as<int>(), 100);  // an empty file changes nothing
}

// Found by fuzz_config_file: Boost fills its messages by replacing %value% with the value until no
// %value% is left, so a value holding "%value%" hung `meshtrain train` for ever.
TEST(ConfigFile, PlaceholderTextIsRefusedInsteadOfHanging) {
  ScratchDir dir("command_line");
  const std::string file = (dir / "train.ini").string();
  EXPECT_EQ(usage_error_of([&] { parse_train(dir, "tp = %value%\n"); }),
            "config file '" + file + "' contains '%value%', which the option parser cannot quote in its messages: remove it");
  EXPECT_EQ(usage_error_of([&] { parse_train(dir, "x%canonical_option% = 1\n"); }),
            "config file '" + file +
                "' contains '%canonical_option%', which the option parser cannot quote in its messages: remove it");
  // An invalid line quotes the line itself (found by a longer fuzz_config_file run).
  EXPECT_EQ(usage_error_of([&] { parse_train(dir, "ch&%Aci%invalid_line%tion\n"); }),
            "config file '" + file +
                "' contains '%invalid_line%', which the option parser cannot quote in its messages: remove it");
  EXPECT_EQ(usage_error_of([&] { parse_train(dir, "", {"--tp=%value%"}); }),
            "the argument '--tp=%value%' contains '%value%', which the option parser cannot quote in its messages: "
            "remove it");
  // Other percent signs are ordinary text.
  EXPECT_EQ(parse_train(dir, "metrics = 100%.jsonl\n")["metrics"].as<std::string>(), "100%.jsonl");
}

// Found with fuzz_config_file: 4 x channels (the MLP width) overflowed an int in the layout checks.
TEST(ConfigFile, ChannelsTooLargeForTheMlpWidthAreRefused) {
  ScratchDir dir("command_line");
  const po::variables_map vm = parse_train(dir, "tokenizer = bytes\nheads = 1\nchannels = 1000000000\n");
  EXPECT_EQ(usage_error_of([&] { read_model_config(vm, 256); }),
            "model: channels (1000000000) is too large: at most 536870911");
}

// A shape whose parameter count does not fit the int64 arithmetic of GptConfig::parameter_count.
TEST(ConfigFile, ModelsBeyondCountableParametersAreRefused) {
  ScratchDir dir("command_line");
  const po::variables_map vm = parse_train(dir, "tokenizer = bytes\nheads = 1\nchannels = 536870911\nlayers = 10000\n");
  const std::string message = usage_error_of([&] { read_model_config(vm, 256); });
  EXPECT_NE(message.find("model: layers=10000 channels=536870911 vocab=256 max_seq_len=64 is "), std::string::npos)
      << message;
  EXPECT_NE(message.find("parameters, more than meshtrain can count (2^48)"), std::string::npos) << message;
  EXPECT_EQ(usage_error_of([&] { read_model_config(parse_train(dir, "tokenizer = bytes\nlayers = 2000000000\n"), 256); }),
            "model: layers must be 1 to 10000, got 2000000000");
  // gpt3-175b is well inside.
  EXPECT_NO_THROW(read_model_config(parse_train(dir, "model = gpt3-175b\n"), 50257));
}

// Found by fuzz_config_file in CI: sizes whose products or sums pass INT_MAX were signed overflows
// (undefined behaviour, caught by UBSan) in the layout checks; each is now a clear UsageError.
TEST(ConfigFile, LayoutProductsAndSumsBeyondIntAreRefused) {
  ScratchDir dir("command_line");
  const auto layout_error = [&](const std::string& text) {
    const po::variables_map vm = parse_train(dir, "tokenizer = bytes\n" + text);
    const GptConfig config = read_model_config(vm, 256);
    return usage_error_of([&] { read_layout(vm, 8, config, read_settings(vm)); });
  };
  // --dp 0 (the default) divides the ranks by tp x pp.
  EXPECT_EQ(layout_error("tp = 100000\npp = 100000\n"),
            "--tp 100000 x --pp 100000 = 10000000000 does not divide the job's 8 ranks (launch a multiple of it, or "
            "give --dp)");
  EXPECT_EQ(layout_error("dp = 100000\ntp = 100000\npp = 3\n"),
            "--dp 100000 x --tp 100000 x --pp 3 = 30000000000 ranks, more than MPI can number");
  EXPECT_EQ(layout_error("dp = 4\npp = 2\nlayers = 4\npp-layers = 2147483647,2147483647\n"),
            "--pp-layers '2147483647,2147483647' sums to 4294967294 layers but the model has 4");
  EXPECT_EQ(layout_error("dp = 1\npp = 8\nlayers = 8\nschedule = interleaved\nvirtual-stages = 2147483647\n"),
            "--schedule interleaved with --pp 8 x --virtual-stages 2147483647 = 17179869176 model chunks needs the "
            "model's 8 layers divisible by 17179869176 (every chunk takes the same number of layers)");
  EXPECT_EQ(layout_error("dp = 8\nmicro-batch = 2147483647\nglobal-batch = 2147483647\n"),
            "--global-batch 2147483647 must be a positive multiple of --dp 8 x --micro-batch 2147483647 = 17179869176 (each "
            "data-parallel rank takes global-batch/dp sequences in micro-batches of --micro-batch)");
}

}  // namespace
}  // namespace mt
