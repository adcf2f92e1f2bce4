// Stopping a run on request without losing its steps. SIGTERM (SLURM at a time limit or on
// preemption, scancel, srun, kill), SIGINT (Ctrl-C) and SIGUSR1 (which mpirun forwards to the
// ranks at once: how a batch script asks for a stop) only record that a stop was asked for; the
// trainer asks at the end of every step whether any rank got one (comm/agreement.h agree_on_max),
// so all ranks stop after the same step, save it and exit with kExitStopped.
//
// What a launcher does around that, measured with Open MPI 4.1 and Slurm 22.05:
// - mpirun, on SIGINT or SIGTERM, sends its ranks SIGCONT at once, SIGTERM after the MCA parameter
//   odls_base_sigkill_timeout (default 1 s) and SIGKILL after twice that. A SIGCONT from the
//   Open MPI launcher that started this rank therefore counts as a stop request: the ranks get the
//   whole window instead of its second half. Ranks run in process groups of their own, so a
//   terminal's Ctrl-C reaches mpirun only.
// - mpirun, on a second SIGINT, exits at once without waiting for its ranks. A rank whose launcher
//   is gone ends at once too (a thread watches the parent), so no rank outlives mpirun.
// - A second SIGINT to a rank ends it at once: Ctrl-C twice means the user will not wait for the
//   save. Repeated SIGTERMs and SIGUSR1s are ignored (mpirun's own SIGTERM follows its SIGCONT).
// - A stop the ranks cannot agree on means one of them cannot take part (it died: srun's
//   --kill-on-bad-exit and mpirun signal the survivors, which then wait on it in a collective).
//   Once the trainer has set a deadline (set_agreement_deadline: a few steps' time), a rank that
//   has not reached the stop's agreement that long after the request ends at once, instead of
//   waiting for the launcher's SIGKILL (SLURM's KillWait: 30 s by default).
// Ending at once is safe for the checkpoints: a save that does not finish is never taken for one,
// and the last complete checkpoint stays in force (checkpoint/checkpoint_dir.h).
// defines: kExitStopped, StopOptions, StopSignals, stop_options_for
#pragma once

#include <sys/types.h>

#include <chrono>
#include <memory>
#include <string>

namespace mt {

// The exit code of a run that stopped on request after its step (0: finished, 1: an error, 2: a
// usage error). A batch script requeues on it.
inline constexpr int kExitStopped = 3;

struct StopOptions {
  int world_rank = 0;  // only rank 0 says why it ends at once
  // The launcher process that started this one (its parent), watched while the handlers are
  // installed: when it is gone, this process ends. 0: none (a process started by hand).
  pid_t launcher = 0;
  // Open MPI's mpirun or orted: a SIGCONT from `launcher` is its first word that the job ends.
  bool launcher_sigcont_stops = false;
};

// The stop handlers for SIGTERM, SIGINT, SIGUSR1 and SIGCONT, installed for the object's lifetime
// (the previous dispositions are restored after). One at a time per process. A program keeps it
// until the process ends: a SIGTERM that reaches a rank late, once the others have stopped, must
// not kill it while it finalizes or exits.
class StopSignals {
 public:
  explicit StopSignals(const StopOptions& options);
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // The first signal that asked this process to stop (SIGCONT: the launcher's), 0 while none did.
  static int requested();
  // How long the ranks may take to agree on a request (see above), counted from the request or from
  // this call, whichever is later; zero: no limit (the default: start-up, a periodic save). Set by
  // the trainer after each step.
  static void set_agreement_deadline(std::chrono::milliseconds deadline);
  // The ranks agreed on the stop (and go on to save): the deadline no longer applies.
  static void agreed();
  // "SIGTERM", "SIGINT", "SIGUSR1", or for SIGCONT "mpirun's stop (SIGINT or SIGTERM to mpirun)".
  static std::string describe(int signal);
  // Whether the request came from a launcher that is ending the job itself (mpirun's SIGCONT): it
  // no longer serves MPI_Finalize, so a rank that has saved should end without it.
  static bool launcher_is_ending(int signal);

 private:
  struct Watch;
  std::unique_ptr<Watch> watch_;
};

// The options for this process as started: the parent is watched when a launcher started it
// (`launcher` as launch_env.h names it: "none" for a process started by hand), and a SIGCONT
// from it stops the run when that launcher is Open MPI's.
StopOptions stop_options_for(const std::string& launcher, int world_rank);

}  // namespace mt
