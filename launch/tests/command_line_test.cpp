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
#include "launch/train_command.h"  // defines: train_options
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

}  // namespace
}  // namespace mt
