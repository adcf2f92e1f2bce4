// Running another program to completion: gnuplot for the plots, mpirun for `meshbench scaling`.
// stdin is /dev/null; stdout and stderr go to files the caller names.
// defines: ChildExit, run_child, describe_exit, write_text, read_text
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace mt {

struct ChildExit {
  bool started = false;  // false: the program was not found (errno ENOENT)
  bool exited = false;   // exited normally (else: killed by `signal`)
  int code = 0;          // exit status when exited
  int signal = 0;
  bool ok() const { return started && exited && code == 0; }
};

// Looks argv[0] up on PATH. Throws Error (with the reason) when it cannot be started for another
// reason than a missing program, or when waiting fails.
ChildExit run_child(const std::vector<std::string>& argv, const std::filesystem::path& stdout_file,
                    const std::filesystem::path& stderr_file);
std::string describe_exit(const ChildExit& exit);  // "exited with status 3", "was killed by signal 9"

// Whole-file text I/O; write_text throws EnvironmentError (the file and the system's reason) when
// the file cannot be written. read_text returns
// what it could read (empty for a missing file): it is for logs and error messages.
void write_text(const std::filesystem::path& path, const std::string& text);
std::string read_text(const std::filesystem::path& path);

}  // namespace mt
