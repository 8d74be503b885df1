#include "comm/launch/stop_request.h"

#include <signal.h>
#include <string.h>
#include <unistd.h>

#include <atomic>

namespace colossal::comm {
namespace {

std::atomic<int> first_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "the handler needs a lock-free flag");

void Say(const char* text) { (void)!::write(STDERR_FILENO, text, ::strlen(text)); }

void OnStopSignal(int signo) {
  int expected = 0;
  if (first_signal.compare_exchange_strong(expected, signo)) {
    Say(signo == SIGINT ? "\ncolossal: SIGINT" : "\ncolossal: SIGTERM");
    Say(" received: this process stops after the current step, saving a checkpoint first "
        "(send it again to stop at once)\n");
    return;
  }
  // The second one: the default action, now.
  struct sigaction dfl = {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  ::sigaction(signo, &dfl, nullptr);
  ::raise(signo);
}

}  // namespace

void InstallStopHandlers() {
  struct sigaction sa = {};
  sa.sa_handler = OnStopSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // reads and writes in flight go on
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
}

int StopSignal() { return first_signal.load(std::memory_order_relaxed); }

}  // namespace colossal::comm
