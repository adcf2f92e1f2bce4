#include "launch/stop_signals.h"

#include <unistd.h>  // defines: getppid, write, _exit

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <optional>
#include <stop_token>
#include <thread>

#include "runtime/error.h"

namespace mt {
namespace {

constexpr std::array<int, 4> kHandled = {SIGTERM, SIGINT, SIGUSR1, SIGCONT};
constexpr auto kWatchPeriod = std::chrono::milliseconds(100);

// Shared with the handler: written before it is installed, read (or set) only by it after.
volatile std::sig_atomic_t g_requested = 0;
volatile std::sig_atomic_t g_installed = 0;
pid_t g_launcher = 0;
bool g_sigcont_stops = false;
std::array<char, 256> g_second_sigint_line{};
std::size_t g_second_sigint_length = 0;  // 0: this rank says nothing
std::array<struct sigaction, kHandled.size()> g_previous{};
// The agreement deadline in ms (0: none), and whether the ranks agreed; read by the watch thread.
std::atomic<std::int64_t> g_deadline_ms{0};
std::atomic<std::chrono::steady_clock::rep> g_deadline_set_at{0};  // the deadline counts from here or the request
std::atomic<bool> g_agreed{false};

constexpr const char* kDiscarded = "a save under way is discarded; the last complete checkpoint stays in force";

void on_signal(int signal, siginfo_t* info, void* /*context*/) {
  if (signal == SIGCONT) {
    // Only the launcher's own SIGCONT, sent as it begins to end the job (never after a stop of ours).
    const bool from_launcher = info != nullptr && info->si_code == SI_USER && info->si_pid == g_launcher;
    if (!g_sigcont_stops || !from_launcher) return;
  } else if (signal == SIGINT && g_requested != 0) {
    if (g_second_sigint_length > 0) {
      const ssize_t ignored = ::write(STDERR_FILENO, g_second_sigint_line.data(), g_second_sigint_length);
      (void)ignored;
    }
    ::_exit(128 + SIGINT);
  }
  if (g_requested == 0) g_requested = signal;
}

// The ranks could not agree on a stop in time: one of them is gone or stuck. Say so (rank 0) and end.
[[noreturn]] void end_without_agreement(int signal, std::int64_t deadline_ms, int world_rank) {
  if (world_rank == 0) {
    std::signal(SIGPIPE, SIG_IGN);
    std::fprintf(stderr,
                 "meshtrain: stopped by %s, but the ranks did not agree on it within %.1f s (a rank is gone or "
                 "stuck): ending without saving (the last complete checkpoint stays in force)\n",
                 StopSignals::describe(signal).c_str(), static_cast<double>(deadline_ms) / 1e3);
    std::fflush(stderr);
  }
  ::_exit(128 + SIGTERM);
}

// The launcher gone: say so (rank 0; its stderr may be a pipe nobody reads, hence no SIGPIPE) and end.
[[noreturn]] void end_without_launcher(pid_t launcher, int world_rank) {
  if (world_rank == 0) {
    std::signal(SIGPIPE, SIG_IGN);
    std::fprintf(stderr, "meshtrain: the launcher (pid %d) that started rank 0 is gone: ending at once (%s)\n",
                 static_cast<int>(launcher), kDiscarded);
    std::fflush(stderr);
  }
  ::_exit(128 + SIGHUP);
}

}  // namespace

// A thread that ends the process when its parent, the launcher, is gone (getppid changes as the
// process is adopted), or when a stop is not agreed on within its deadline. Polled: prctl's
// parent-death signal follows the thread that forked us, which in a launcher with a spawning pool
// need not live as long as the launcher itself.
struct StopSignals::Watch {
  std::jthread thread;
  Watch(pid_t launcher, int world_rank)
      : thread([launcher, world_rank](std::stop_token stop) {
          std::mutex mutex;
          std::condition_variable_any wake;
          std::unique_lock lock(mutex);
          std::optional<std::chrono::steady_clock::time_point> requested_at;
          while (!stop.stop_requested()) {
            if (launcher != 0 && ::getppid() != launcher) end_without_launcher(launcher, world_rank);
            const int signal = g_requested;
            if (signal != 0 && !requested_at) requested_at = std::chrono::steady_clock::now();
            const std::int64_t deadline = g_deadline_ms.load();
            if (requested_at && deadline > 0 && !g_agreed.load()) {
              const auto set_at = std::chrono::steady_clock::time_point(
                  std::chrono::steady_clock::duration(g_deadline_set_at.load()));
              const auto since = std::max(*requested_at, set_at);
              if (std::chrono::steady_clock::now() - since > std::chrono::milliseconds(deadline))
                end_without_agreement(signal, deadline, world_rank);
            }
            wake.wait_for(lock, stop, kWatchPeriod, [] { return false; });
          }
        }) {}
};

StopSignals::StopSignals(const StopOptions& options) {
  MT_CHECK(g_installed == 0, "the stop handlers are installed once at a time");
  g_requested = 0;
  g_launcher = options.launcher;
  g_sigcont_stops = options.launcher_sigcont_stops && options.launcher != 0;
  g_second_sigint_length = 0;
  if (options.world_rank == 0) {
    const int n = std::snprintf(g_second_sigint_line.data(), g_second_sigint_line.size(),
                                "meshtrain: a second SIGINT: ending at once without saving (%s)\n", kDiscarded);
    g_second_sigint_length = n > 0 ? std::min(static_cast<std::size_t>(n), g_second_sigint_line.size() - 1) : 0;
  }
  struct sigaction action {};
  action.sa_sigaction = on_signal;
  action.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&action.sa_mask);
  for (const int signal : kHandled) sigaddset(&action.sa_mask, signal);  // one handler at a time
  for (std::size_t i = 0; i < kHandled.size(); ++i) {
    MT_CHECK(::sigaction(kHandled[i], &action, &g_previous[i]) == 0, "sigaction failed for signal ", kHandled[i]);
  }
  g_deadline_ms = 0;
  g_agreed = false;
  g_installed = 1;
  if (options.launcher != 0 && ::getppid() != options.launcher)
    end_without_launcher(options.launcher, options.world_rank);
  watch_ = std::make_unique<Watch>(options.launcher, options.world_rank);
}

StopSignals::~StopSignals() {
  watch_.reset();
  for (std::size_t i = 0; i < kHandled.size(); ++i) ::sigaction(kHandled[i], &g_previous[i], nullptr);
  g_installed = 0;
}

int StopSignals::requested() { return g_requested; }

void StopSignals::set_agreement_deadline(std::chrono::milliseconds deadline) {
  g_deadline_set_at = std::chrono::steady_clock::now().time_since_epoch().count();
  g_deadline_ms = deadline.count();
}

void StopSignals::agreed() { g_agreed = true; }

std::string StopSignals::describe(int signal) {
  switch (signal) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGUSR1: return "SIGUSR1";
    case SIGCONT: return "mpirun's stop (SIGINT or SIGTERM to mpirun)";
    default: return "signal " + std::to_string(signal);
  }
}

bool StopSignals::launcher_is_ending(int signal) { return signal == SIGCONT; }

StopOptions stop_options_for(const std::string& launcher, int world_rank) {
  StopOptions options;
  options.world_rank = world_rank;
  const bool open_mpi = launcher.starts_with("mpirun");
  if (open_mpi || launcher.starts_with("srun")) options.launcher = ::getppid();
  options.launcher_sigcont_stops = open_mpi;
  return options;
}

}  // namespace mt
