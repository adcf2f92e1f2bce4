// parse_command_line with a --config ini file, as `meshtrain train` reads it: values from the file,
// the command line winning, the last of an option given twice winning, relative paths of the file
// taken from its folder, path options checked (launch/path_option.h), the default micro-batch, and
// the inputs commands/tests/fuzz_config_file.cpp found to hang or to
// overflow, each now a clear UsageError.
#include "launch/command_line.h"  // defines: parse_command_line

#include <gtest/gtest.h>

#include <sys/stat.h>

#include <boost/program_options.hpp>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "runtime/error.h"  // defines: UsageError
#include "launch/model_options.h"  // defines: read_model_config
#include "launch/path_option.h"    // defines: check_path
#include "commands/train_options.h"  // defines: train_options, read_settings, read_layout
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
    return e.message();
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
  // Other percent signs are ordinary text (a relative path: next to the file).
  EXPECT_EQ(parse_train(dir, "metrics = 100%.jsonl\n")["metrics"].as<std::string>(), (dir / "100%.jsonl").string());
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
    const int seq_len = read_settings(vm).seq_len;
    return usage_error_of([&] { read_layout(vm, 8, config, seq_len); });
  };
  // --dp 0 (the default) divides the ranks by tp x pp.
  EXPECT_EQ(layout_error("tp = 100000\npp = 100000\n"),
            "--tp 100000 x --pp 100000 = 10000000000 does not divide the job's 8 ranks (launch a multiple of it, or "
            "give --dp)");
  EXPECT_EQ(layout_error("dp = 100000\ntp = 100000\npp = 3\n"),
            "--dp 100000 x --tp 100000 x --pp 3 = 30000000000 ranks, more than MPI can number");
  EXPECT_EQ(layout_error("dp = 4\npp = 2\nlayers = 4\npp-layers = 2147483647,2147483647\n"),
            "--pp-layers 2147483647,2147483647 sums to 4294967294 layers but the model has 4");
  // The plan checks --pp-layers, in its one wording (the CLI only reads the numbers).
  EXPECT_EQ(layout_error("dp = 4\npp = 2\nlayers = 4\npp-layers = 2,2\nvirtual-stages = 2\n"),
            "--pp-layers 2,2 cannot be combined with --schedule interleaved (its model chunks split the layers evenly)");
  EXPECT_EQ(layout_error("dp = 4\npp = 2\nlayers = 4\npp-layers = 1,1,2\n"),
            "--pp-layers 1,1,2 lists 3 stages but --pp is 2 (give one layer count per stage)");
  EXPECT_EQ(layout_error("dp = 1\npp = 8\nlayers = 8\nschedule = interleaved\nvirtual-stages = 2147483647\n"),
            "--schedule interleaved with --pp 8 x --virtual-stages 2147483647 = 17179869176 model chunks needs the "
            "model's 8 layers divisible by 17179869176 (every chunk takes the same number of layers)");
  EXPECT_EQ(layout_error("dp = 8\nmicro-batch = 2147483647\nglobal-batch = 2147483647\n"),
            "--global-batch 2147483647 must be a positive multiple of --dp 8 x --micro-batch 2147483647 = 17179869176 (each "
            "data-parallel rank takes global-batch/dp sequences in micro-batches of --micro-batch)");
}

// A wrapper passes its defaults, then "$@": the user's later value must win (Boost alone refused
// the second occurrence: "option '--steps' cannot be specified more than once").
TEST(LastOccurrence, WinsOnTheCommandLineAndInTheFile) {
  ScratchDir dir("command_line");
  po::variables_map vm = parse_train(dir, "", {"--steps", "3", "--lr", "0.5", "--steps", "9", "--no-overlap", "--no-overlap"});
  EXPECT_EQ(vm["steps"].as<int>(), 9);
  EXPECT_EQ(vm["lr"].as<float>(), 0.5f);
  EXPECT_TRUE(vm["no-overlap"].as<bool>());
  // In the file too; and the command line still wins over the file.
  EXPECT_EQ(parse_train(dir, "steps = 3\nsteps = 4\n")["steps"].as<int>(), 4);
  EXPECT_EQ(parse_train(dir, "steps = 3\nsteps = 4\n", {"--steps", "7"})["steps"].as<int>(), 7);
  // --config itself: the last file is read (parse_train adds its own --config last).
  const std::string first = (dir / "first.ini").string();
  std::ofstream(first) << "steps = 11\n";
  EXPECT_EQ(parse_train(dir, "steps = 12\n", {"--config", first})["steps"].as<int>(), 12);
}

// A list option (several files, --set KEY=VALUE...) keeps gathering every occurrence.
TEST(LastOccurrence, ListsKeepEveryValue) {
  ScratchDir dir("command_line");
  po::options_description desc("options");
  desc.add_options()("input", po::value<std::vector<std::string>>()->multitoken(), "files")(
      "name", po::value<std::string>(), "a name");
  const po::variables_map vm =
      *parse_command_line("prepare", "test", desc, {"--input", "a", "b", "--name", "x", "--input", "c", "--name", "y"}, 1);
  EXPECT_EQ(vm["input"].as<std::vector<std::string>>(), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(vm["name"].as<std::string>(), "y");
}

// Relative paths in the file are the file's folder's, whatever the current directory; absolute
// ones, keywords (--resume latest) and the command line's own paths are left as they are.
TEST(ConfigFile, RelativePathsResolveAgainstTheFilesFolder) {
  ScratchDir dir("command_line");
  const std::filesystem::path folder = dir / "configs";
  std::filesystem::create_directories(folder / "corpus");
  std::ofstream(folder / "w.bin") << "x";
  const std::string file = (folder / "run.ini").string();
  std::ofstream(file) << "data = corpus\ninit-weights = w.bin\nmetrics = out/m.jsonl\ncheckpoint-dir = "
                      << (dir / "ckpt").string() << "\nsteps = 5\n";
  po::options_description desc = train_options();
  const po::variables_map vm =
      *parse_command_line("train", "test", desc, {"--config", file, "--save-weights", "here.bin"}, 1);
  EXPECT_EQ(vm["data"].as<std::string>(), (folder / "corpus").string());
  EXPECT_EQ(vm["init-weights"].as<std::string>(), (folder / "w.bin").string());
  EXPECT_EQ(vm["metrics"].as<std::string>(), (folder / "out/m.jsonl").string());
  EXPECT_EQ(vm["checkpoint-dir"].as<std::string>(), (dir / "ckpt").string());
  EXPECT_EQ(vm["save-weights"].as<std::string>(), "here.bin");
  EXPECT_EQ(vm["steps"].as<int>(), 5);
  std::ofstream(file) << "resume = latest\n";
  po::options_description again = train_options();
  EXPECT_EQ((*parse_command_line("train", "test", again, {"--config", file}, 1))["resume"].as<std::string>(), "latest");
}

// A config path that is a directory threw std::ios_base::failure ("basic_filebuf::underflow error
// reading the file: Is a directory") on every rank, which ended the job in MPI_Abort.
TEST(PathOptions, ConfigThatIsNoReadableFileIsAUsageError) {
  ScratchDir dir("command_line");
  const std::string fifo = (dir / "fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const auto config_error = [&](const std::string& path) {
    return usage_error_of([&] {
      po::options_description desc = train_options();
      parse_command_line("train", "test", desc, {"--config", path}, 1);
    });
  };
  EXPECT_EQ(config_error(dir.path().string()), "--config '" + dir.path().string() + "' is a directory, where a file is wanted");
  // stat, never open: a FIFO nobody writes to would block the reader for ever.
  EXPECT_EQ(config_error(fifo), "--config '" + fifo + "' is a FIFO, not a regular file");
  EXPECT_EQ(config_error((dir / "none.ini").string()), "--config '" + (dir / "none.ini").string() + "' does not exist");
}

// Every kind, through the shared check: what each refuses, and what it accepts.
TEST(PathOptions, CheckPathNamesTheOptionAndThePath) {
  ScratchDir dir("command_line");
  const std::string folder = dir.path().string(), file = (dir / "f").string(), fifo = (dir / "fifo").string();
  std::ofstream(file) << "x";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const auto error = [](const std::string& path, PathKind kind) {
    return usage_error_of([&] { check_path("opt", path, kind); });
  };
  EXPECT_EQ(error(folder, PathKind::ReadFile), "--opt '" + folder + "' is a directory, where a file is wanted");
  EXPECT_EQ(error(file, PathKind::ReadDir), "--opt '" + file + "' is a file, where a directory is wanted");
  EXPECT_EQ(error(fifo, PathKind::ReadFileOrDir), "--opt '" + fifo + "' is a FIFO, not a regular file");
  EXPECT_EQ(error(folder, PathKind::WriteFile), "--opt '" + folder + "' is a directory, where a file is wanted");
  EXPECT_EQ(error(fifo, PathKind::WriteFile), "--opt '" + fifo + "' is a FIFO, not a regular file");
  EXPECT_EQ(error(file, PathKind::WriteDir), "--opt '" + file + "' is a file, where a directory is wanted");
  EXPECT_EQ(error(file + "/sub/x", PathKind::WriteFile),
            "--opt '" + file + "/sub/x' does not exist (a folder on its way is a file)");
  EXPECT_NO_THROW(check_path("opt", file, PathKind::ReadFile));
  EXPECT_NO_THROW(check_path("opt", folder, PathKind::ReadFileOrDir));
  EXPECT_NO_THROW(check_path("opt", folder + "/new/deeper/m.jsonl", PathKind::WriteFile));  // folders made later
  EXPECT_NO_THROW(check_path("opt", "/dev/null", PathKind::WriteFile));
}

// Without --micro-batch, the largest of 4, 2, 1 dividing global-batch / dp: the defaults (global
// batch 8) train on 1, 2, 4 and 8 ranks. Before, 4 ranks failed with "--global-batch 8 must be a
// positive multiple of --dp 4 x --micro-batch 4 = 16".
TEST(MicroBatch, DefaultDividesEachReplicasShare) {
  ScratchDir dir("command_line");
  const po::variables_map vm = parse_train(dir, "tokenizer = bytes\n");
  const GptConfig config = read_model_config(vm, 256);
  const int seq_len = read_settings(vm).seq_len;
  for (const auto& [ranks, micro] : std::vector<std::pair<int, int>>{{1, 4}, {2, 4}, {4, 2}, {8, 1}}) {
    std::optional<LayoutPlan> plan;
    EXPECT_NO_THROW(plan.emplace(read_layout(vm, ranks, config, seq_len))) << ranks << " ranks";
    if (plan) {
      EXPECT_EQ(plan->micro_batch(), micro) << ranks << " ranks";
    }
  }
  // A global batch dp does not divide: micro-batch 1, and the message names only that.
  const po::variables_map odd = parse_train(dir, "tokenizer = bytes\nglobal-batch = 6\n");
  EXPECT_EQ(usage_error_of([&] { read_layout(odd, 4, config, seq_len); }),
            "--global-batch 6 must be a positive multiple of --dp 4 x --micro-batch 1 = 4 (each data-parallel rank "
            "takes global-batch/dp sequences in micro-batches of --micro-batch)");
  // A given --micro-batch is kept and checked as before.
  const po::variables_map given = parse_train(dir, "tokenizer = bytes\nmicro-batch = 4\n");
  EXPECT_EQ(usage_error_of([&] { read_layout(given, 4, config, seq_len); }),
            "--global-batch 8 must be a positive multiple of --dp 4 x --micro-batch 4 = 16 (each data-parallel rank "
            "takes global-batch/dp sequences in micro-batches of --micro-batch)");
}

// --cp cuts each sequence into 2 x cp chunks: a --seq-len that does not divide is one UsageError
// naming both; dp takes what tp x cp x pp leave; with sequence parallelism a cp rank's rows of the
// micro-batch are what tp splits.
TEST(ContextParallel, SeqLenMustCutIntoTwiceCpChunks) {
  ScratchDir dir("command_line");
  const po::variables_map vm = parse_train(dir, "tokenizer = bytes\ncp = 2\n");
  const GptConfig config = read_model_config(vm, 256);
  const LayoutPlan plan = read_layout(vm, 4, config, 64);
  EXPECT_EQ(plan.mesh().cp, 2);
  EXPECT_EQ(plan.mesh().dp, 2);
  EXPECT_EQ(usage_error_of([&] { read_layout(vm, 4, config, 62); }),
            "--cp 2 cuts each sequence into 4 chunks: --seq-len 62 must be a multiple of 4");
  const po::variables_map four = parse_train(dir, "tokenizer = bytes\ncp = 4\n");
  EXPECT_EQ(usage_error_of([&] { read_layout(four, 4, config, 100); }),
            "--cp 4 cuts each sequence into 8 chunks: --seq-len 100 must be a multiple of 8");
  // tp 4 x cp 2, micro-batch 1: 8 rows of a 16-token sequence per cp rank split over 4; 12 tokens
  // leave 6 rows, which 4 does not divide.
  const po::variables_map sp =
      parse_train(dir, "tokenizer = bytes\ncp = 2\ntp = 4\nsequence-parallel = true\nmicro-batch = 1\n");
  EXPECT_NO_THROW(read_layout(sp, 8, config, 16));
  EXPECT_EQ(usage_error_of([&] { read_layout(sp, 8, config, 12); }),
            "--sequence-parallel splits a micro-batch's --micro-batch 1 x --seq-len 12 / --cp 2 = 6 positions over "
            "--tp 4: they must divide evenly");
}

// Without --micro-batch, enough micro-batches per step for the schedule: 1F1B (and zb-*) need --pp
// of them, interleaved a multiple of --pp. Before, the default ignored --pp: `-np 4 --pp 4` failed with
// "--schedule 1f1b needs at least --pp 4 micro-batches per step, but --global-batch 8 / (--dp 1 x
// --micro-batch 4) = 2", though 2 would have run.
TEST(MicroBatch, DefaultLeavesEnoughMicroBatchesForTheSchedule) {
  ScratchDir dir("command_line");
  struct Case {
    std::vector<std::string> args;
    int ranks, micro;
  };
  const std::vector<Case> cases = {
      {{"--pp", "4"}, 4, 2},                                  // 4 per step
      {{"--pp", "2"}, 4, 2},                                  // dp 2: 2 per step
      {{"--dp", "2", "--tp", "2", "--pp", "2"}, 8, 2},        // dp 2: 2 per step
      {{"--pp", "2"}, 2, 4},                                  // 4 already gives 2
      {{"--pp", "4", "--schedule", "gpipe"}, 4, 4},           // gpipe takes any number
      {{"--pp", "4", "--schedule", "zb-h1"}, 4, 2},
      {{"--pp", "2", "--schedule", "zb-v"}, 4, 2},
      {{"--pp", "2", "--schedule", "interleaved", "--virtual-stages", "2"}, 2, 4},  // 2 per step, a multiple of 2
      {{"--pp", "2", "--schedule", "interleaved", "--virtual-stages", "2", "--global-batch", "12"}, 2, 2},  // 6, not 3
      {{"--pp", "4", "--global-batch", "16"}, 4, 4},
  };
  for (const Case& c : cases) {
    const po::variables_map vm = parse_train(dir, "tokenizer = bytes\n", c.args);
    const GptConfig config = read_model_config(vm, 256);
    const std::string what = ::testing::PrintToString(c.args) + " on " + std::to_string(c.ranks) + " ranks";
    std::optional<LayoutPlan> plan;
    EXPECT_NO_THROW(plan.emplace(read_layout(vm, c.ranks, config, read_settings(vm).seq_len))) << what;
    if (plan) {
      EXPECT_EQ(plan->micro_batch(), c.micro) << what;
    }
  }
  // None of 4, 2, 1 is enough: 1, and the message does not ask for a lower --micro-batch.
  const po::variables_map few = parse_train(dir, "tokenizer = bytes\n", {"--pp", "4", "--global-batch", "2"});
  const GptConfig config = read_model_config(few, 256);
  const int seq_len = read_settings(few).seq_len;
  EXPECT_EQ(usage_error_of([&] { read_layout(few, 4, config, seq_len); }),
            "--schedule 1f1b needs at least --pp 4 micro-batches per step, but --global-batch 2 / (--dp 1 x "
            "--micro-batch 1) = 2 (raise --global-batch, or use --schedule gpipe)");
  // A given --micro-batch is kept, and refused as before.
  const po::variables_map given = parse_train(dir, "tokenizer = bytes\n", {"--pp", "4", "--micro-batch", "4"});
  EXPECT_EQ(usage_error_of([&] { read_layout(given, 4, config, seq_len); }),
            "--schedule 1f1b needs at least --pp 4 micro-batches per step, but --global-batch 8 / (--dp 1 x "
            "--micro-batch 4) = 2 (raise --global-batch, lower --micro-batch, or use --schedule gpipe)");
}

// --virtual-stages 2 or more without --schedule runs the interleaved schedule, the one that takes
// virtual stages; a schedule named (on the command line or in the file) is kept, and refused as before.
TEST(Schedule, VirtualStagesWithoutAScheduleMeanInterleaved) {
  ScratchDir dir("command_line");
  const auto plan_of = [&](const std::string& text, const std::vector<std::string>& args) {
    const po::variables_map vm = parse_train(dir, "tokenizer = bytes\n" + text, args);
    const GptConfig config = read_model_config(vm, 256);
    return read_layout(vm, 2, config, read_settings(vm).seq_len);
  };
  const LayoutPlan plan = plan_of("", {"--pp", "2", "--virtual-stages", "2"});
  EXPECT_EQ(plan.layout().schedule, ScheduleKind::Interleaved);
  EXPECT_EQ(plan.layout().virtual_stages, 2);
  EXPECT_EQ(plan_of("pp = 2\nvirtual-stages = 2\n", {}).layout().schedule, ScheduleKind::Interleaved);
  EXPECT_EQ(plan_of("", {"--pp", "2"}).layout().schedule, ScheduleKind::OneFOneB);  // the default otherwise
  EXPECT_EQ(usage_error_of([&] { plan_of("", {"--pp", "2", "--virtual-stages", "2", "--schedule", "1f1b"}); }),
            "--virtual-stages 2 needs --schedule interleaved, not --schedule 1f1b");
  EXPECT_EQ(usage_error_of([&] { plan_of("schedule = gpipe\n", {"--pp", "2", "--virtual-stages", "2"}); }),
            "--virtual-stages 2 needs --schedule interleaved, not --schedule gpipe");
}

// Each value refused names the option the user gave. Before, --steps 0 was refused as
// "--lr-decay-steps must be at least 1, got 0" (the decay horizon defaults to --steps), and the
// learning-rate options by the schedule's field names ("learning-rate warmup_steps must be in [0,
// total_steps = 100], got 200").
TEST(Settings, RefusalsNameTheOptionGiven) {
  ScratchDir dir("command_line");
  const auto error = [&](const std::vector<std::string>& args) {
    return usage_error_of([&] { read_settings(parse_train(dir, "tokenizer = bytes\n", args)); });
  };
  EXPECT_EQ(error({"--steps", "0"}), "--steps must be at least 1, got 0");
  EXPECT_EQ(error({"--lr-decay-steps", "0"}), "--lr-decay-steps must be at least 1, got 0");
  EXPECT_EQ(error({"--warmup", "200"}), "--warmup 200 is longer than the 100 steps the learning rate decays over "
                                        "(--steps): give --warmup 100 or less, or more --steps");
  EXPECT_EQ(error({"--warmup", "50", "--lr-decay-steps", "40"}),
            "--warmup 50 is longer than the 40 steps the learning rate decays over (--lr-decay-steps): give --warmup "
            "40 or less, or a larger --lr-decay-steps");
  EXPECT_EQ(error({"--warmup", "-1"}), "--warmup must be at least 0, got -1");
  EXPECT_EQ(error({"--lr", "-1"}), "--lr must be a number of at least 0, got -1");
  EXPECT_EQ(error({"--min-lr-fraction", "2"}), "--min-lr-fraction must be in [0, 1], got 2");
  EXPECT_NO_THROW(read_settings(parse_train(dir, "tokenizer = bytes\n", {"--warmup", "100"})));
  // The batch options are the plan's (read_layout); a --micro-batch of 0 would ask the plan to choose.
  const auto layout_error = [&](const std::vector<std::string>& args) {
    const po::variables_map vm = parse_train(dir, "tokenizer = bytes\n", args);
    return usage_error_of([&] { read_layout(vm, 1, read_model_config(vm, 256), read_settings(vm).seq_len); });
  };
  EXPECT_EQ(layout_error({"--global-batch", "0"}), "--global-batch must be at least 1, got 0");
  EXPECT_EQ(layout_error({"--micro-batch", "0"}), "--micro-batch must be at least 1, got 0");
}

// The llama family's options, from the command line or as config-file keys of the same names, on
// top of a llama preset; a gpt2 preset refuses them in one line.
TEST(ModelOptions, LlamaFieldsOverrideALlamaPresetAndAreRefusedForGpt2) {
  ScratchDir dir("command_line");
  const GptConfig c = read_model_config(
      parse_train(dir, "model = llama-tiny\nkv-heads = 1\nffn-hidden = 96\nrope-theta = 500000\nnorm-eps = 1e-6\n"),
      50257);
  EXPECT_TRUE(c.is_llama());
  EXPECT_EQ(c.kv_head_count(), 1);
  EXPECT_EQ(c.mlp_hidden(), 96);
  EXPECT_EQ(c.rope_theta, 500000.0f);
  EXPECT_EQ(c.norm_eps, 1e-6f);
  const GptConfig cli = read_model_config(parse_train(dir, "model = llama-tiny\n", {"--kv-heads", "4"}), 50257);
  EXPECT_EQ(cli.kv_head_count(), 4);
  EXPECT_EQ(cli.mlp_hidden(), gpt_preset("llama-tiny").mlp_hidden());  // the preset's, untouched
  for (const char* option : {"kv-heads = 2", "ffn-hidden = 256", "rope-theta = 500000", "norm-eps = 1e-6"}) {
    const std::string name = std::string(option).substr(0, std::string(option).find(' '));
    EXPECT_EQ(usage_error_of([&] { read_model_config(parse_train(dir, std::string(option) + "\n"), 50257); }),
              "--" + name + " is a llama option, and --model tiny is a gpt2 (llama presets: llama-tiny, llama-125m, "
              "llama3-8b, llama3-70b)");
  }
  // GptConfig::validate's checks stand behind them.
  EXPECT_EQ(usage_error_of([&] { read_model_config(parse_train(dir, "model = llama-tiny\nkv-heads = 3\n"), 50257); }),
            "model: kv_heads (3) must divide heads (4)");
  EXPECT_EQ(usage_error_of([&] { read_model_config(parse_train(dir, "model = llama-tiny\nrope-theta = 0.5\n"), 50257); }),
            "model: rope_theta must be a number greater than 1, got 0.5");
}

}  // namespace
}  // namespace mt
