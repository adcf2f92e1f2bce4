// Options whose value is a path, marked where they are declared (`path_value(PathKind::ReadFile)`
// instead of `po::value<std::string>()`). That one mark is all parse_command_line needs to check
// the path before the command runs (one clear line instead of a stream error on every rank, or a
// rank blocked for ever opening a FIFO) and to resolve a relative path of a --config file against
// the file's folder.
// defines: PathKind, PathSemantic, path_value, path_values, path_semantic, check_path, check_path_options
#pragma once

#include <boost/program_options.hpp>
#include <string>
#include <vector>

namespace mt {

enum class PathKind {
  ReadFile,       // a regular file this process can read
  ReadDir,        // a directory this process can list and enter
  ReadFileOrDir,  // either (a weights file or a checkpoint directory)
  WriteFile,      // written (or replaced): not a directory or a FIFO; where it is missing, its nearest
                  // existing folder must be a directory we can write in
  WriteDir,       // a directory written into, created when missing: the same, for a directory
};

// What marks an option's value semantic as a path. `keywords`: values that are no path (--resume's
// "latest" and "auto"); `suffix`: when set, only values ending in it are paths, others are names (--cluster:
// a preset name, or an .ini file).
struct PathSemantic {
  PathKind kind = PathKind::ReadFile;
  std::vector<std::string> keywords;
  std::string suffix;
  virtual ~PathSemantic() = default;
  // Whether `value` names a path to check and resolve (not empty, not a keyword).
  bool is_path(const std::string& value) const;
};

// One path: the value semantic of a string option, chained as usual (->default_value(...)).
boost::program_options::typed_value<std::string>* path_value(PathKind kind, std::vector<std::string> keywords = {});
// A preset name, or a file to read when the value ends in `suffix` (".ini").
boost::program_options::typed_value<std::string>* preset_or_file_value(std::string suffix);
// A list of paths (repeatable, or ->multitoken()).
boost::program_options::typed_value<std::vector<std::string>>* path_values(PathKind kind);

// The path mark of an option, or null for an option that takes no path.
const PathSemantic* path_semantic(const boost::program_options::option_description& option);

// Throws UsageError "--OPTION 'PATH' ..." when `path` cannot serve as `kind`: missing, a directory
// where a file is wanted or the reverse, a FIFO, socket or device, or no permission. Only stat(2),
// access(2) and non-blocking opens: it never waits on a FIFO.
void check_path(const std::string& option, const std::string& path, PathKind kind);

// check_path for every path option in `vm` that was given (not defaulted), each value of a list.
void check_path_options(const boost::program_options::options_description& desc,
                        const boost::program_options::variables_map& vm);

}  // namespace mt
