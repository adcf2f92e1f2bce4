// A file written whole or not at all: bytes go to a temporary beside the target, commit() fsyncs
// it, renames it over the target and fsyncs the directory; destroyed uncommitted, the temporary is
// removed and the target left as it was. safetensors, config.json and llm.c weights are written so.
// defines: AtomicFile
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>

namespace mt {

class AtomicFile {
 public:
  // `what` names the kind of file in errors ("safetensors file").
  AtomicFile(std::filesystem::path target, std::string what);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, std::size_t bytes);  // Error naming the target and errno's reason
  void commit();

 private:
  [[noreturn]] void fail(const char* doing, int err) const;
  std::filesystem::path target_, temp_;
  std::string what_;
  int fd_ = -1;
  bool committed_ = false;
};

}  // namespace mt
