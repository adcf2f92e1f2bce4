// Shared by the libFuzzer targets (*/tests/fuzz_*.cpp): a per-process scratch directory for readers
// that only take a path (removed at exit, or by the next run when this one crashed), input splitting
// for readers of several files, and the -write_seeds=DIR switch through which a fuzzer writes its
// seed corpus with the project's own writers.
//
// The contract of every target: a reader may reject any input with an exception derived from
// std::exception (mt::Error, UsageError); a crash, a sanitizer report, a hang, an allocation beyond
// -malloc_limit_mb or an exception of another type (std::terminate) is a bug.
// defines: fuzz_dir, write_input, split_input, join_input, kFuzzSplit, write_seed, handle_write_seeds, FUZZ_CHECK
#pragma once

#include <fcntl.h>     // defines: open, O_DIRECTORY
#include <signal.h>    // defines: kill
#include <sys/file.h>  // defines: flock
#include <unistd.h>    // defines: getpid, access, close

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace mt::fuzz {

// A directory of this process, removed at exit: under /dev/shm where it is writable (no disk I/O
// per input), else under the system temp dir. A run that crashes never reaches the removal, so each
// start first removes the directories of runs that are gone: the owner holds an flock on its
// directory for its whole life (the kernel drops it when the process dies, however it dies), and a
// directory is removed only when that lock can be taken and its pid is no longer a live process
// (a directory just made, not yet locked, belongs to a live pid; one of a live process in another
// pid namespace stays locked).
inline const std::filesystem::path& fuzz_dir() {
  static constexpr std::string_view kPrefix = "meshtrain_fuzz_";
  struct Dir {
    std::filesystem::path path;
    int lock = -1;
    Dir() {
      const std::filesystem::path base =
          ::access("/dev/shm", W_OK) == 0 ? std::filesystem::path("/dev/shm") : std::filesystem::temp_directory_path();
      remove_dead(base);
      path = base / (std::string(kPrefix) + std::to_string(::getpid()));
      std::filesystem::remove_all(path);
      std::filesystem::create_directories(path);
      lock = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      if (lock < 0 || ::flock(lock, LOCK_EX | LOCK_NB) != 0) {
        std::fprintf(stderr, "fuzz harness: cannot lock %s\n", path.c_str());
        std::abort();
      }
    }
    ~Dir() {
      std::error_code ignored;
      std::filesystem::remove_all(path, ignored);
      ::close(lock);
    }
    static void remove_dead(const std::filesystem::path& base) {
      std::error_code ec;
      for (const auto& entry : std::filesystem::directory_iterator(base, ec)) {
        const std::string name = entry.path().filename().string();
        if (!name.starts_with(kPrefix)) continue;
        char* end = nullptr;
        const long pid = std::strtol(name.c_str() + kPrefix.size(), &end, 10);
        if (pid <= 0 || *end != '\0' || pid == ::getpid()) continue;
        if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // alive (or not ours to ask)
        const int fd = ::open(entry.path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0) continue;
        if (::flock(fd, LOCK_EX | LOCK_NB) == 0) std::filesystem::remove_all(entry.path(), ec);
        ::close(fd);
      }
    }
  };
  static const Dir dir;
  return dir.path;
}

inline void write_input(const std::filesystem::path& file, std::string_view bytes) {
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) {
    std::fprintf(stderr, "fuzz harness: cannot write %s\n", file.c_str());
    std::abort();
  }
}

// Separates the files of one input where a reader takes several (encoder.json, vocab.bpe, text).
inline constexpr std::string_view kFuzzSplit = "\n#--meshtrain-fuzz-split--\n";

// The parts of `input` between separators; missing parts are empty.
inline std::vector<std::string_view> split_input(std::string_view input, std::size_t parts) {
  std::vector<std::string_view> out;
  while (out.size() + 1 < parts) {
    const std::size_t at = input.find(kFuzzSplit);
    if (at == std::string_view::npos) break;
    out.push_back(input.substr(0, at));
    input.remove_prefix(at + kFuzzSplit.size());
  }
  out.push_back(input);
  out.resize(parts);
  return out;
}

inline std::string join_input(const std::vector<std::string>& parts) {
  std::string out;
  for (std::size_t i = 0; i < parts.size(); ++i) out += (i ? std::string(kFuzzSplit) : "") + parts[i];
  return out;
}

inline void write_seed(const std::filesystem::path& dir, const std::string& name, std::string_view bytes) {
  std::filesystem::create_directories(dir);
  write_input(dir / name, bytes);
}

// Call first thing in LLVMFuzzerInitialize: with -write_seeds=DIR among the arguments, runs
// write(DIR) and exits (0, or 1 when it throws); otherwise returns and libFuzzer starts.
inline void handle_write_seeds(int* argc, char*** argv, const std::function<void(const std::filesystem::path&)>& write) {
  constexpr std::string_view kFlag = "-write_seeds=";
  for (int i = 1; i < *argc; ++i) {
    const std::string_view arg = (*argv)[i];
    if (!arg.starts_with(kFlag)) continue;
    try {
      write(std::filesystem::path(arg.substr(kFlag.size())));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "writing the seeds failed: %s\n", e.what());
      std::exit(1);
    }
    std::exit(0);
  }
}

}  // namespace mt::fuzz

// A property every accepted input must have; a violation is a finding (libFuzzer saves the input).
#define FUZZ_CHECK(cond)                                                                      \
  do {                                                                                        \
    if (!(cond)) {                                                                            \
      std::fprintf(stderr, "%s:%d: fuzz property violated: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                           \
    }                                                                                         \
  } while (0)
