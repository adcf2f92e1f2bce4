#include "io/mapped_file.h"

#include <fcntl.h>     // defines: open, O_RDONLY, O_CLOEXEC
#include <sys/mman.h>  // defines: mmap, munmap
#include <sys/stat.h>  // defines: fstat, S_ISREG

#include <cerrno>
#include <system_error>
#include <utility>

#include "runtime/error.h"
#include "runtime/unique_fd.h"

namespace mt {
namespace {

std::string errno_text(int err) { return std::error_code(err, std::generic_category()).message(); }

void unmap(const unsigned char* data, std::size_t size) {
  if (data) ::munmap(const_cast<unsigned char*>(data), size);
}

}  // namespace

MappedFile::MappedFile(std::filesystem::path path, const std::string& what) : path_(std::move(path)) {
  const UniqueFd fd(::open(path_.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    const int err = errno;
    MT_REQUIRE(err != ENOENT, what, " ", path_.string(), " does not exist");
    MT_FAIL_AS(UsageError, "cannot open ", what, " ", path_.string(), ": ", errno_text(err));
  }
  struct stat info {};
  MT_REQUIRE(::fstat(fd.get(), &info) == 0, "cannot stat ", what, " ", path_.string(), ": ", errno_text(errno));
  MT_REQUIRE(S_ISREG(info.st_mode), what, " ", path_.string(), " is not a regular file");
  size_ = static_cast<std::size_t>(info.st_size);
  if (size_ == 0) return;
  void* mapped = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd.get(), 0);
  MT_REQUIRE(mapped != MAP_FAILED, "cannot map ", what, " ", path_.string(), ": ", errno_text(errno));
  data_ = static_cast<const unsigned char*>(mapped);
}

MappedFile::~MappedFile() { unmap(data_, size_); }

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)), data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    unmap(data_, size_);
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

}  // namespace mt
