// libFuzzer target: a `meshtrain train --config FILE` ini file, read as train_command reads it:
// parse_command_line over train_options() (Boost's ini parser and typed values), then every check
// made before devices, data or MPI: tokenizer, model shape, training settings, runtime options and
// the layout for a 1- and an 8-rank job. A bad file must end in UsageError or mt::Error, nothing else.
// Seeds (written by -write_seeds): every train option (its default, else a value of its type), taken
// from train_options() itself, and a few hand-made variants (a layout, a bigger model, checkpoints, odd spellings).
// defines: LLVMFuzzerInitialize, LLVMFuzzerTestOneInput
#include <boost/any.hpp>
#include <boost/program_options.hpp>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "launch/command_line.h"   // defines: parse_command_line
#include "launch/model_options.h"  // defines: tokenizer_name, read_model_config, tokenizer_vocab_size
#include "launch/options.h"        // defines: read_runtime_options
#include "commands/train_options.h"  // defines: train_options, read_settings, read_layout
#include "tests/fuzz_support.h"

namespace {
namespace fs = std::filesystem;
namespace po = boost::program_options;

template <class T>
bool holds(const po::option_description& option) {
  return dynamic_cast<const po::typed_value<T>*>(option.semantic().get()) != nullptr;
}

// "name = value" for one option: its default, else a value of its type.
std::string sample_line(const po::option_description& option) {
  const std::string name = option.long_name();
  if (name == "config" || name == "help") return "";
  if (option.semantic()->max_tokens() == 0) return name + " = false\n";  // a switch
  boost::any value;
  const bool has_default = option.semantic()->apply_default(value);
  std::ostringstream text;
  if (const auto* v = boost::any_cast<int>(&value)) text << *v;
  else if (const auto* f = boost::any_cast<float>(&value)) text << *f;
  else if (const auto* d = boost::any_cast<double>(&value)) text << *d;
  else if (const auto* u = boost::any_cast<std::uint64_t>(&value)) text << *u;
  else if (const auto* s = boost::any_cast<std::string>(&value)) text << *s;
  else if (has_default) return "";
  else if (holds<int>(option)) text << 2;
  else if (holds<float>(option) || holds<double>(option)) text << 2.5;
  else text << "x";
  return name + " = " + text.str() + "\n";
}

void write_seeds(const fs::path& dir) {
  std::string defaults = "# every option of meshtrain train, at its default where it has one\n";
  const po::options_description desc = mt::train_options();
  for (const auto& option : desc.options()) defaults += sample_line(*option);
  mt::fuzz::write_seed(dir, "defaults.ini", defaults);
  mt::fuzz::write_seed(dir, "layout.ini",
                       "tokenizer = bytes\nmodel = tiny\ndp = 2\ntp = 2\npp = 2\nschedule = interleaved\n"
                       "virtual-stages = 2\nglobal-batch = 16\nmicro-batch = 2\nzero = 1\nbucket-mb = 0.5\n");
  mt::fuzz::write_seed(dir, "model.ini",
                       "[ignored section]\nmodel = small\nlayers = 3\nheads = 2\nchannels = 8\nmax-seq-len = 16\n"
                       "padded-vocab = 384\nseq-len = 16\npp-layers = 1,2\npp = 2\nlr = 1e-3\n"
                       "lr-schedule = linear\nwarmup = 5\nmin-lr-fraction = 0.5\n");
  mt::fuzz::write_seed(dir, "checkpoints.ini",
                       "checkpoint-dir = /nonexistent/ck\nsave-every = 5\nkeep = 0\nresume = latest\n"
                       "seed = 18446744073709551615\ndevice-memory-limit = 2G\ncomm-timeout = 0.5\n"
                       "no-overlap = true\ndebug-collectives = 1\nvirtual-devices = yes\n");
  mt::fuzz::write_seed(dir, "odd.ini", "  steps=  -3  \n;comment\n#comment\nlr = nan\nbeta2 = 1\neps = inf\n"
                                       "cpu-threads = 99999999999\nmodel\n");
}

void read_options(const po::variables_map& vm) {
  const std::string tokenizer = mt::tokenizer_name(vm);
  const mt::GptConfig config = mt::read_model_config(vm, mt::tokenizer_vocab_size(tokenizer));
  const mt::TrainSettings settings = mt::read_settings(vm);
  (void)mt::read_runtime_options(vm);
  for (const int world_size : {1, 8}) {
    try {
      (void)mt::read_layout(vm, world_size, config, settings.seq_len);
    } catch (const std::exception&) {
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  mt::fuzz::handle_write_seeds(argc, argv, write_seeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const fs::path file = mt::fuzz::fuzz_dir() / "train.ini";
  mt::fuzz::write_input(file, std::string_view(reinterpret_cast<const char*>(data), size));
  po::options_description desc = mt::train_options();
  try {
    // Rank 1: a --help never prints (it can only come from the command line anyway).
    const auto vm = mt::parse_command_line("train", "fuzzing", desc, {"--config", file.string()}, 1);
    if (vm) read_options(*vm);
  } catch (const std::exception&) {
  }
  return 0;
}
