#include "runtime/error.h"

#include <unistd.h>

#include <climits>
#include <filesystem>
#include <system_error>

namespace mt {
namespace {
ProcessLabel& label_storage() {
  static ProcessLabel label{-1, this_host_name()};
  return label;
}
}  // namespace

std::string this_host_name() {
  char name[HOST_NAME_MAX + 1] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "unknown-host";
  return name;
}

void set_process_label(int rank, std::string host) {
  label_storage() = ProcessLabel{rank, std::move(host)};
}

const ProcessLabel& process_label() { return label_storage(); }

std::string errno_message(int err) { return std::error_code(err, std::generic_category()).message(); }

std::string describe_location(const std::source_location& where) {
  const ProcessLabel& who = process_label();
  std::ostringstream out;
  out << std::filesystem::path(where.file_name()).filename().string() << ':' << where.line() << " [rank ";
  if (who.rank >= 0) {
    out << who.rank;
  } else {
    out << '?';
  }
  out << " host " << who.host << ']';
  return out.str();
}

Error::Error(const std::string& what, const std::source_location& where)
    : std::runtime_error(describe_location(where) + ": " + what), message_(what) {}

}  // namespace mt
