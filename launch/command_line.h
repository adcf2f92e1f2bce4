// Parsing a command's options, with --help, and turning Boost's exceptions into UsageError.
// defines: parse_command_line, parse_whole_number
#pragma once

#include <boost/program_options.hpp>
#include <optional>
#include <string>
#include <vector>

#include "launch/path_option.h"  // defines: path_value (the options parse_command_line checks and resolves)

namespace mt {

// The whole of `text` as an int ("12"; not "12x", "", or out of range), else nullopt: callers
// word their own error.
std::optional<int> parse_whole_number(const std::string& text);

// `command` is a meshtrain command ("train") or another program's, named in full ("meshbench coll").
// A command that declares a `config` option also reads the ini file it names; relative values of
// its path options (path_value) are taken from the file's folder. An option given twice takes its
// last value (lists gather every one). Every given path option is checked (check_path_options).
// Returns nullopt when --help was asked for (rank 0 has printed the help).
std::optional<boost::program_options::variables_map> parse_command_line(
    const std::string& command, const std::string& summary, boost::program_options::options_description& desc,
    const std::vector<std::string>& args, int rank);

}  // namespace mt
