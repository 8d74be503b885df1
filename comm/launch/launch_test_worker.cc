// A worker for the launcher's tests. The first argument picks a behaviour:
//   env                 print the launcher's variables, a stderr line, an unterminated line
//   fail RANK CODE      rank RANK exits with CODE after 100 ms; the others wait to be stopped
//   stubborn RANK CODE  as fail, but the others ignore SIGTERM (they need SIGKILL)
//   crash RANK          rank RANK aborts (SIGABRT); the others wait
//   signal DIR          write DIR/ready.<rank>, wait for SIGINT/SIGTERM, report it, exit 0
//   saving DIR MS       a training loop with stop_request.h's handlers: write DIR/ready.<rank>,
//                       and on the first SIGINT/SIGTERM "save" for MS ms (write DIR/saved.<rank>
//                       after it), then exit 128 + the signal; a second signal kills it
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "comm/launch/stop_request.h"

namespace {

int env_int(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : -1;
}

void wait_forever() {
  for (;;) pause();
}

volatile sig_atomic_t got = 0;
void on_signal(int sig) { got = sig; }

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return 64;
  const std::string mode = argv[1];
  const int rank = env_int("RANK");
  if (mode == "env") {
    for (const char* name : {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                             "MASTER_ADDR", "MASTER_PORT", "EXTRA", "COLOSSAL_JOB_ID"}) {
      const char* v = std::getenv(name);
      std::printf("%s=%s\n", name, v ? v : "(unset)");
    }
    std::fflush(stdout);
    std::fprintf(stderr, "err from %d\n", rank);
    std::printf("tail");  // no newline: the launcher ends the line
    return 0;
  }
  if ((mode == "fail" || mode == "stubborn" || mode == "crash") && argc >= 3) {
    std::printf("waiting\n");
    std::fflush(stdout);
    if (rank == std::atoi(argv[2])) {
      usleep(100 * 1000);
      if (mode == "crash") std::abort();
      return argc >= 4 ? std::atoi(argv[3]) : 1;
    }
    if (mode == "stubborn") signal(SIGTERM, SIG_IGN);
    wait_forever();
  }
  if (mode == "signal" && argc >= 3) {
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    const std::string ready = std::string(argv[2]) + "/ready." + std::to_string(rank);
    close(open(ready.c_str(), O_CREAT | O_WRONLY, 0644));
    while (got == 0) pause();
    std::printf("got signal %d\n", static_cast<int>(got));
    return 0;
  }
  if (mode == "saving" && argc >= 4) {
    colossal::comm::InstallStopHandlers();
    const std::string dir = argv[2];
    close(open((dir + "/ready." + std::to_string(rank)).c_str(), O_CREAT | O_WRONLY, 0644));
    while (colossal::comm::StopSignal() == 0) usleep(10 * 1000);  // the steps
    usleep(std::atoi(argv[3]) * 1000);                            // the save
    close(open((dir + "/saved." + std::to_string(rank)).c_str(), O_CREAT | O_WRONLY, 0644));
    return 128 + colossal::comm::StopSignal();
  }
  return 64;
}
