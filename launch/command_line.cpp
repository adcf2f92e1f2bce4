#include "launch/command_line.h"

#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <sstream>
#include <string_view>
#include <typeinfo>

#include "runtime/error.h"  // defines: UsageError
#include "launch/path_option.h"

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
// commands/tests/fuzz_config_file.cpp). Such text is refused before Boost sees it.
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

// Whether an option holds one value, which a second occurrence replaces: every option but lists
// (a std::vector value: --input, --metrics, --set...) and composing ones, which gather each occurrence.
bool single_valued(const po::options_description& desc, const std::string& key) {
  const po::option_description* option = desc.find_nothrow(key, false);
  if (option == nullptr || option->semantic()->is_composing()) return false;
  const auto* typed = dynamic_cast<const po::typed_value_base*>(option->semantic().get());
  return typed == nullptr || typed->value_type() != typeid(std::vector<std::string>);
}

// The last occurrence of a single-valued option wins, as in most programs: a wrapper that passes
// "$@" after its own defaults lets the user override them. Boost alone refuses a second occurrence.
void keep_last_occurrences(po::parsed_options& parsed, const po::options_description& desc) {
  std::map<std::string, std::size_t> last;
  for (std::size_t i = 0; i < parsed.options.size(); ++i) {
    const std::string& key = parsed.options[i].string_key;
    if (!key.empty() && !parsed.options[i].unregistered && single_valued(desc, key)) last[key] = i;
  }
  std::vector<po::option> kept;
  for (std::size_t i = 0; i < parsed.options.size(); ++i) {
    const auto found = last.find(parsed.options[i].string_key);
    if (found == last.end() || found->second == i) kept.push_back(std::move(parsed.options[i]));
  }
  parsed.options = std::move(kept);
}

// A relative path in a config file names a place next to the file, wherever the command runs.
void resolve_against(po::parsed_options& parsed, const po::options_description& desc,
                     const std::filesystem::path& folder) {
  if (folder.empty()) return;  // the file is in the current directory
  for (po::option& o : parsed.options) {
    const po::option_description* option = desc.find_nothrow(o.string_key, false);
    const PathSemantic* mark = option != nullptr ? path_semantic(*option) : nullptr;
    if (mark == nullptr) continue;
    // Normalized ("configs/../run" is "run"), so that what is printed later reads plainly.
    for (std::string& value : o.value)
      if (mark->is_path(value) && std::filesystem::path(value).is_relative())
        value = (folder / value).lexically_normal().string();
  }
}

// The whole text of the config file; every way it cannot be read is a UsageError naming it.
std::string read_config_file(const std::string& path) {
  check_path("config", path, PathKind::ReadFile);
  try {
    std::ifstream file(path, std::ios::binary);
    if (!file) throw UsageError("--config '" + path + "' cannot be read");
    std::string text{std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
    if (file.bad()) throw UsageError("--config '" + path + "' cannot be read");
    return text;
  } catch (const std::ios_base::failure& e) {  // libstdc++'s filebuf throws on a read error
    throw UsageError("--config '" + path + "' cannot be read: " + e.what());
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
    po::parsed_options given = po::command_line_parser(args).options(desc).run();
    keep_last_occurrences(given, desc);
    po::store(given, vm);
    if (vm.count("help")) {
      if (rank == 0) {
        std::cout << "usage: mpirun -np N " << program_and_command(command) << " [options]\n\n" << summary << "\n\n"
                  << desc << "\nAn option given twice takes its last value; a list option (one that takes\n"
                  << "several files or a repeatable KEY=VALUE) gathers every value.\n" << std::flush;
      }
      return std::nullopt;
    }
    // Options from an ini file (`key = value` per line, the option names without dashes); the
    // command line wins over the file because values stored first are kept.
    if (desc.find_nothrow("config", false) != nullptr && vm.count("config")) {
      const std::string path = vm["config"].as<std::string>();
      const std::string text = read_config_file(path);
      refuse_placeholders(text, "config file '" + path + "'");
      std::istringstream in(text);
      try {
        po::parsed_options from_file = po::parse_config_file(in, desc);
        keep_last_occurrences(from_file, desc);
        resolve_against(from_file, desc, std::filesystem::path(path).parent_path());
        po::store(from_file, vm);
      } catch (const po::error& e) {
        throw UsageError("config file '" + path + "': " + e.what());
      }
    }
    po::notify(vm);
  } catch (const po::error& e) {
    throw UsageError(std::string(e.what()) + " (see: " + program_and_command(command) + " --help)");
  }
  check_path_options(desc, vm);
  return vm;
}

}  // namespace mt
