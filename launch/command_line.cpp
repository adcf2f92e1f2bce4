#include "launch/command_line.h"

#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string_view>

#include "launch/cli.h"

namespace po = boost::program_options;

namespace mt {
namespace {

// "train" is meshtrain's; "meshbench coll" names its program itself.
std::string program_and_command(const std::string& command) {
  return command.find(' ') == std::string::npos ? "meshtrain " + command : command;
}

// Boost.Program_options (1.74) words an error by replacing placeholders such as %value% in its
// template with the offending text until none is left: text that holds the placeholder itself
// never ends (a config file line `tp = %value%` hung `meshtrain train`; found by
// launch/tests/fuzz_config_file.cpp). Such text is refused before Boost sees it.
void refuse_placeholders(std::string_view text, const std::string& where) {
  // Every key Boost 1.74 substitutes (errors.hpp and the library's templates).
  for (const std::string_view token :
       {"%value%", "%option%", "%canonical_option%", "%original_token%", "%prefix%", "%invalid_line%"}) {
    if (text.find(token) != std::string_view::npos) {
      throw UsageError(where + " contains '" + std::string(token) +
                       "', which the option parser cannot quote in its messages: remove it");
    }
  }
}

}  // namespace

std::optional<int> parse_whole_number(const std::string& text) {
  std::size_t used = 0;
  int value = 0;
  try {
    value = std::stoi(text, &used);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (used == 0 || used != text.size()) return std::nullopt;
  return value;
}

std::optional<po::variables_map> parse_command_line(const std::string& command, const std::string& summary,
                                                    po::options_description& desc,
                                                    const std::vector<std::string>& args, int rank) {
  desc.add_options()("help,h", "print this help and exit");
  po::variables_map vm;
  for (const std::string& arg : args) refuse_placeholders(arg, "the argument '" + arg + "'");
  try {
    po::store(po::command_line_parser(args).options(desc).run(), vm);
    if (vm.count("help")) {
      if (rank == 0) {
        std::cout << "usage: mpirun -np N " << program_and_command(command) << " [options]\n\n" << summary << "\n\n"
                  << desc << std::flush;
      }
      return std::nullopt;
    }
    // Options from an ini file (`key = value` per line, the option names without dashes); the
    // command line wins over the file because values stored first are kept.
    if (desc.find_nothrow("config", false) != nullptr && vm.count("config")) {
      const std::string path = vm["config"].as<std::string>();
      std::ifstream file(path, std::ios::binary);
      if (!file) throw UsageError("cannot read config file '" + path + "'");
      const std::string text{std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
      if (file.bad()) throw UsageError("cannot read config file '" + path + "'");
      refuse_placeholders(text, "config file '" + path + "'");
      std::istringstream in(text);
      try {
        po::store(po::parse_config_file(in, desc), vm);
      } catch (const po::error& e) {
        throw UsageError("config file '" + path + "': " + e.what());
      }
    }
    po::notify(vm);
  } catch (const po::error& e) {
    throw UsageError(std::string(e.what()) + " (see: " + program_and_command(command) + " --help)");
  }
  return vm;
}

}  // namespace mt
