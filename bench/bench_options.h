// Options that several meshbench commands declare alike: --steps/--warmup and --json, and the
// comma-separated lists their options take.
// defines: split_list, add_repeat_options, add_json_option
#pragma once

#include <boost/program_options.hpp>
#include <string>
#include <vector>

namespace mt {

// "a,b,,c" -> {"a", "b", "c"}: empty items are dropped.
std::vector<std::string> split_list(const std::string& text);

// --steps (default `steps`) and --warmup (default 1), ints, with each command's own wording.
void add_repeat_options(boost::program_options::options_description& desc, int steps, const char* steps_help,
                        const char* warmup_help);

// --json FILE (a path to write, default empty: no rows).
void add_json_option(boost::program_options::options_description& desc, const char* help);

}  // namespace mt
