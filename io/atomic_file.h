// A file written whole or not at all: bytes go to a temporary beside the target, commit() fsyncs
// it, renames it over the target and fsyncs the directory; destroyed uncommitted, the temporary is
// removed and the target left as it was. safetensors, config.json and llm.c weights are written so.
// A target that exists and is not a regular file (/dev/null, /dev/full: a path option may name a
// character device) is written in place: renaming over it would replace the device with a file.
// defines: AtomicFile
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>

namespace mt {

class AtomicFile {
 public:
  // `what` names the kind of file in errors ("safetensors file"). Errors the system gives (a full
  // disk, no permission, a read-only file system) are EnvironmentErrors naming the target and the
  // system's reason: "cannot write llm.c weights file w.bin: No space left on device".
  AtomicFile(std::filesystem::path target, std::string what);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, std::size_t bytes);
  void commit();

 private:
  [[noreturn]] void fail(int err) const;
  std::filesystem::path target_, temp_;  // temp_ empty: writing the target in place (a device)
  std::string what_;
  int fd_ = -1;
  bool committed_ = false;
};

}  // namespace mt
