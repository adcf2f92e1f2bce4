#include "launch/child_process.h"

#include <fcntl.h>     // defines: O_RDONLY, O_WRONLY, O_CREAT, O_TRUNC
#include <spawn.h>     // defines: posix_spawnp, posix_spawn_file_actions_init,
//          posix_spawn_file_actions_addopen, posix_spawn_file_actions_destroy
#include <sys/wait.h>  // defines: waitpid, WIFEXITED, WEXITSTATUS
#include <unistd.h>    // defines: environ (with _GNU_SOURCE)

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "runtime/error.h"  // defines: EnvironmentError, errno_message

namespace mt {

ChildExit run_child(const std::vector<std::string>& args, const std::filesystem::path& stdout_file,
                    const std::filesystem::path& stderr_file) {
  MT_CHECK(!args.empty(), "run_child needs a program");
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, stdout_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, 2, stderr_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  std::vector<std::string> copy = args;  // posix_spawn wants char*, not const char*
  std::vector<char*> argv;
  for (std::string& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = 0;
  const int spawned = posix_spawnp(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ChildExit result;
  if (spawned == ENOENT) return result;
  if (spawned != 0) MT_FAIL("cannot start ", args[0], ": ", std::strerror(spawned));
  result.started = true;
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) MT_FAIL("waiting for ", args[0], ": ", std::strerror(errno));
  }
  result.exited = WIFEXITED(status);
  result.code = result.exited ? WEXITSTATUS(status) : 0;
  result.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  return result;
}

std::string describe_exit(const ChildExit& exit) {
  if (!exit.started) return "was not found";
  return exit.exited ? "exited with status " + std::to_string(exit.code)
                     : "was killed by signal " + std::to_string(exit.signal);
}

void write_text(const std::filesystem::path& path, const std::string& text) {
  // stdio rather than a stream: errno then says why (a full disk), which a stream does not promise.
  std::FILE* out = std::fopen(path.c_str(), "wb");
  if (out == nullptr) MT_FAIL_AS(EnvironmentError, "cannot write ", path.string(), ": ", errno_message(errno));
  const bool written = std::fwrite(text.data(), 1, text.size(), out) == text.size() && std::fflush(out) == 0;
  const int err = errno;
  const bool closed = std::fclose(out) == 0;
  if (!written || !closed)
    MT_FAIL_AS(EnvironmentError, "cannot write ", path.string(), ": ", errno_message(written ? errno : err));
}

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace mt
