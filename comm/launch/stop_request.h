// colossal::comm — stopping a training process at a step boundary on SIGINT
// or SIGTERM, so that it saves its work first.
//
// A scheduler preempting a job (Slurm, Kubernetes) sends SIGTERM and kills
// the job some time later; a user presses Ctrl-C. Either way the run should
// save a checkpoint at the end of the step it is in, then stop, instead of
// losing everything since its last periodic save:
//
//   colossal::comm::InstallStopHandlers();          // once, before training
//   for (...) {
//     train_one_step();
//     if (colossal::comm::StopSignal() != 0) { save(); return 128 + signal; }
//   }
//
// Contracts:
//  * The first SIGINT or SIGTERM is remembered (StopSignal() returns it from
//    then on) and announced on stderr; the process goes on.
//  * A second one ends the process at once, by the signal's default action:
//    "once to stop cleanly, twice to stop now".
//  * Ranks see a signal at different moments: a job decides on a step by a
//    collective over every rank's StopSignal() (the Lua recipe loop does),
//    never by its own flag alone.
//  * The handler only stores an atomic and calls write(2): async-signal-safe.
#ifndef COLOSSAL_COMM_LAUNCH_STOP_REQUEST_H_
#define COLOSSAL_COMM_LAUNCH_STOP_REQUEST_H_

namespace colossal::comm {

// Installs the SIGINT and SIGTERM handlers described above. Idempotent.
void InstallStopHandlers();

// The first SIGINT or SIGTERM received since InstallStopHandlers, or 0.
int StopSignal();

}  // namespace colossal::comm

#endif  // COLOSSAL_COMM_LAUNCH_STOP_REQUEST_H_
