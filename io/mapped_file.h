// A whole file mapped read-only for the life of the object (RAII: unmapped on destruction), for
// readers of outside files that look at every byte in place instead of copying it.
// defines: MappedFile
#pragma once

#include <cstddef>
#include <filesystem>
#include <span>
#include <string>

namespace mt {

class MappedFile {
 public:
  // Maps `path`. Errors (UsageError) name `what` and the path: missing, a directory, unreadable.
  // An empty file maps to an empty span (mmap refuses zero bytes).
  MappedFile(std::filesystem::path path, const std::string& what);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;

  std::span<const unsigned char> bytes() const { return {data_, size_}; }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  const unsigned char* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace mt
