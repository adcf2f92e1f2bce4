#include "launch/path_option.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "runtime/error.h"  // defines: UsageError

namespace po = boost::program_options;

namespace mt {
namespace {

// A typed_value that also carries the path mark: Boost keeps the semantic object, so the mark
// travels with the option's declaration.
template <class T>
class PathTypedValue final : public po::typed_value<T>, public PathSemantic {
 public:
  PathTypedValue(PathKind k, std::vector<std::string> keyword_texts, std::string suffix_text)
      : po::typed_value<T>(nullptr) {
    kind = k;
    keywords = std::move(keyword_texts);
    suffix = std::move(suffix_text);
  }
};

std::string reason(int error) {
  switch (error) {
    case ENOENT: return "does not exist";
    case ENOTDIR: return "does not exist (a folder on its way is a file)";
    case EACCES: return "permission denied";
    default: return std::strerror(error);
  }
}

std::string type_name(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "not a regular file";
}

// access(2) with the effective ids (what open would use), so a process without the capability to
// override permissions sees what it would see opening the path.
bool may(const std::string& path, int mode) { return faccessat(AT_FDCWD, path.c_str(), mode, AT_EACCESS) == 0; }

[[noreturn]] void refuse(const std::string& option, const std::string& path, const std::string& what) {
  throw UsageError("--" + option + " '" + path + "' " + what);
}

void check_readable_file(const std::string& option, const std::string& path, const struct stat& st) {
  if (S_ISDIR(st.st_mode)) refuse(option, path, "is a directory, where a file is wanted");
  if (!S_ISREG(st.st_mode)) refuse(option, path, "is " + type_name(st.st_mode) + ", not a regular file");
  // A regular file: a non-blocking open answers exactly whether it can be read (permissions, ACLs).
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) refuse(option, path, "cannot be read: " + reason(errno));
  ::close(fd);
}

void check_readable_dir(const std::string& option, const std::string& path, const struct stat& st) {
  if (S_ISREG(st.st_mode)) refuse(option, path, "is a file, where a directory is wanted");
  if (!S_ISDIR(st.st_mode)) refuse(option, path, "is " + type_name(st.st_mode) + ", not a directory");
  if (!may(path, R_OK | X_OK)) refuse(option, path, "cannot be read: permission denied");
}

// Something to be written at `path`, which does not exist yet: its nearest existing folder must be
// a directory we may create entries in (the command creates any folders missing in between).
void check_creatable(const std::string& option, const std::string& path) {
  std::filesystem::path folder = std::filesystem::path(path).parent_path();
  struct stat st {};
  while (true) {
    const std::string f = folder.empty() ? "." : folder.string();
    if (::stat(f.c_str(), &st) == 0) {
      if (!S_ISDIR(st.st_mode)) refuse(option, path, "cannot be created: '" + f + "' is not a directory");
      if (!may(f, W_OK | X_OK)) refuse(option, path, "cannot be created in '" + f + "': permission denied");
      return;
    }
    if (errno != ENOENT || folder.empty() || folder == folder.parent_path()) {
      refuse(option, path, "cannot be created: '" + f + "' " + reason(errno));
    }
    folder = folder.parent_path();
  }
}

}  // namespace

bool PathSemantic::is_path(const std::string& value) const {
  if (value.empty() || std::find(keywords.begin(), keywords.end(), value) != keywords.end()) return false;
  return suffix.empty() || (value.size() > suffix.size() && value.ends_with(suffix));
}

po::typed_value<std::string>* path_value(PathKind kind, std::vector<std::string> keywords) {
  return new PathTypedValue<std::string>(kind, std::move(keywords), "");
}

po::typed_value<std::string>* preset_or_file_value(std::string suffix) {
  return new PathTypedValue<std::string>(PathKind::ReadFile, {}, std::move(suffix));
}

po::typed_value<std::vector<std::string>>* path_values(PathKind kind) {
  return new PathTypedValue<std::vector<std::string>>(kind, {}, "");
}

const PathSemantic* path_semantic(const po::option_description& option) {
  return dynamic_cast<const PathSemantic*>(option.semantic().get());
}

void check_path(const std::string& option, const std::string& path, PathKind kind) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int error = errno;
    if (error == ENOENT && (kind == PathKind::WriteFile || kind == PathKind::WriteDir)) {
      check_creatable(option, path);
      return;
    }
    refuse(option, path, reason(error));
  }
  switch (kind) {
    case PathKind::ReadFile: check_readable_file(option, path, st); return;
    case PathKind::ReadDir: check_readable_dir(option, path, st); return;
    case PathKind::ReadFileOrDir:
      if (S_ISDIR(st.st_mode)) {
        check_readable_dir(option, path, st);
      } else {
        check_readable_file(option, path, st);
      }
      return;
    case PathKind::WriteFile:
      if (S_ISDIR(st.st_mode)) refuse(option, path, "is a directory, where a file is wanted");
      // A FIFO would block the writer until a reader came; /dev/null and the like are fine.
      if (!S_ISREG(st.st_mode) && !S_ISCHR(st.st_mode))
        refuse(option, path, "is " + type_name(st.st_mode) + ", not a regular file");
      if (!may(path, W_OK)) refuse(option, path, "cannot be written: permission denied");
      return;
    case PathKind::WriteDir:
      if (S_ISREG(st.st_mode)) refuse(option, path, "is a file, where a directory is wanted");
      if (!S_ISDIR(st.st_mode)) refuse(option, path, "is " + type_name(st.st_mode) + ", not a directory");
      if (!may(path, W_OK | X_OK)) refuse(option, path, "cannot be written into: permission denied");
      return;
  }
}

void check_path_options(const po::options_description& desc, const po::variables_map& vm) {
  for (const auto& option : desc.options()) {
    const PathSemantic* mark = path_semantic(*option);
    const std::string& name = option->long_name();
    if (mark == nullptr || !vm.count(name) || vm[name].defaulted()) continue;
    const boost::any& value = vm[name].value();
    std::vector<std::string> paths;
    if (const auto* one = boost::any_cast<std::string>(&value)) {
      paths.push_back(*one);
    } else if (const auto* many = boost::any_cast<std::vector<std::string>>(&value)) {
      paths = *many;
    }
    for (const std::string& path : paths)
      if (mark->is_path(path)) check_path(name, path, mark->kind);
  }
}

}  // namespace mt
