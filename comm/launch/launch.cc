#include "comm/launch/launch.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"

extern char** environ;

namespace colossal::comm {
namespace {

std::atomic<bool> launch_running{false};
int signal_pipe_write = -1;  // the handler's end of the self-pipe

void on_signal(int signo) {
  const int saved = errno;
  const unsigned char b = static_cast<unsigned char>(signo);
  if (signal_pipe_write >= 0) (void)!write(signal_pipe_write, &b, 1);
  errno = saved;
}

void write_all_fd(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = write(fd, p, n);
    if (w > 0) {
      p += w;
      n -= static_cast<size_t>(w);
    } else if (w < 0 && errno == EINTR) {
      continue;
    } else {
      return;  // the reader went away: drop the output rather than the run
    }
  }
}

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev != nullptr ? absl::StrCat("SIG", abbrev) : absl::StrCat("signal ", sig);
}

struct Stream {
  int fd = -1;       // our read end; -1 once closed
  int out = -1;      // where its lines go
  std::string partial;
};

struct Worker {
  int rank = 0;
  int local_rank = 0;
  pid_t pid = -1;
  bool running = false;
  int exit_code = 0;
  Stream streams[2];
};

// Writes complete lines of `data` (and, when `flush`, the rest) with the prefix.
void emit(Stream& s, const std::string& prefix, const char* data, size_t n, bool flush) {
  s.partial.append(data, n);
  size_t start = 0;
  for (;;) {
    const size_t nl = s.partial.find('\n', start);
    if (nl == std::string::npos) break;
    const std::string line = absl::StrCat(prefix, s.partial.substr(start, nl + 1 - start));
    write_all_fd(s.out, line.data(), line.size());
    start = nl + 1;
  }
  s.partial.erase(0, start);
  // Very long lines and the tail at EOF go out as they are.
  if (!s.partial.empty() && (flush || s.partial.size() > (64u << 10))) {
    const std::string line = absl::StrCat(prefix, s.partial, flush ? "\n" : "");
    write_all_fd(s.out, line.data(), line.size());
    s.partial.clear();
  }
}

// Restores the signal handlers and clears the running flag on every exit path.
class SignalScope {
 public:
  explicit SignalScope(bool forward) : forward_(forward) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) == 0) {
      read_ = fds[0];
      write_ = fds[1];
    }
    if (forward_ && write_ >= 0) {
      signal_pipe_write = write_;
      struct sigaction sa {};
      sa.sa_handler = on_signal;
      sigemptyset(&sa.sa_mask);
      sa.sa_flags = SA_RESTART;
      sigaction(SIGINT, &sa, &old_int_);
      sigaction(SIGTERM, &sa, &old_term_);
    }
  }
  ~SignalScope() {
    if (forward_ && write_ >= 0) {
      sigaction(SIGINT, &old_int_, nullptr);
      sigaction(SIGTERM, &old_term_, nullptr);
      signal_pipe_write = -1;
    }
    if (read_ >= 0) close(read_);
    if (write_ >= 0) close(write_);
    launch_running.store(false);
  }
  int read_fd() const { return read_; }

 private:
  bool forward_;
  int read_ = -1;
  int write_ = -1;
  struct sigaction old_int_ {};
  struct sigaction old_term_ {};
};

void signal_workers(std::vector<Worker>& workers, int sig) {
  for (Worker& w : workers) {
    if (w.running) kill(-w.pid, sig);  // the worker's whole process group
  }
}

}  // namespace

std::vector<std::pair<std::string, std::string>> worker_environment(const LaunchOptions& o,
                                                                    int local_rank) {
  const int rank = o.node_rank * o.nproc_per_node + local_rank;
  return {
      {"RANK", absl::StrCat(rank)},
      {"LOCAL_RANK", absl::StrCat(local_rank)},
      {"WORLD_SIZE", absl::StrCat(o.nnodes * o.nproc_per_node)},
      {"LOCAL_WORLD_SIZE", absl::StrCat(o.nproc_per_node)},
      {"GROUP_RANK", absl::StrCat(o.node_rank)},
      {"MASTER_ADDR", o.master_addr},
      {"MASTER_PORT", absl::StrCat(o.master_port)},
  };
}

absl::StatusOr<LaunchResult> launch(const LaunchOptions& o) {
  if (o.command.empty() || o.command[0].empty()) {
    return absl::InvalidArgumentError("launch: no command to run");
  }
  if (o.nproc_per_node < 1 || o.nnodes < 1 || o.node_rank < 0 || o.node_rank >= o.nnodes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "launch: --nproc_per_node ", o.nproc_per_node, ", --nnodes ", o.nnodes, ", --node_rank ",
        o.node_rank, ": need nproc_per_node >= 1 and 0 <= node_rank < nnodes"));
  }
  if (o.master_port < 1 || o.master_port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("launch: --master_port ", o.master_port, " is not a port (1..65535)"));
  }
  if (launch_running.exchange(true)) {
    return absl::FailedPreconditionError("launch: another launch() is running in this process");
  }
  SignalScope signals(o.forward_signals);
  // The job's id for the workers' rendezvous (comm/launch/env.h), random on
  // one node; across nodes every node's launcher would draw its own, so
  // there the user's COLOSSAL_JOB_ID (inherited) is the only one.
  std::vector<std::pair<std::string, std::string>> job;
  const char* given = std::getenv("COLOSSAL_JOB_ID");
  if ((given == nullptr || *given == '\0') && o.nnodes == 1) {
    std::random_device random;
    job.emplace_back("COLOSSAL_JOB_ID", absl::StrCat(absl::Hex(random(), absl::kZeroPad8),
                                                     absl::Hex(random(), absl::kZeroPad8)));
  }

  std::vector<Worker> workers(o.nproc_per_node);
  std::string failure;
  auto stop_started = [&] {
    signal_workers(workers, SIGKILL);
    for (Worker& w : workers) {
      if (w.running) waitpid(w.pid, nullptr, 0);
      for (Stream& s : w.streams) {
        if (s.fd >= 0) close(s.fd);
      }
    }
  };
  for (int lr = 0; lr < o.nproc_per_node; ++lr) {
    Worker& w = workers[lr];
    w.local_rank = lr;
    w.rank = o.node_rank * o.nproc_per_node + lr;
    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) {
      stop_started();
      return absl::ResourceExhaustedError(absl::StrCat("launch: pipe: ", std::strerror(errno)));
    }
    // Environment: ours, minus what we set, plus the worker's.
    std::vector<std::pair<std::string, std::string>> extra = worker_environment(o, lr);
    extra.insert(extra.end(), job.begin(), job.end());
    extra.insert(extra.end(), o.env.begin(), o.env.end());
    std::vector<std::string> vars;
    for (char** e = environ; *e != nullptr; ++e) {
      bool replaced = false;
      for (const auto& [k, v] : extra) replaced = replaced || absl::StartsWith(*e, k + "=");
      if (!replaced) vars.push_back(*e);
    }
    for (const auto& [k, v] : extra) vars.push_back(k + "=" + v);
    std::vector<char*> envp, argv;
    for (std::string& v : vars) envp.push_back(v.data());
    envp.push_back(nullptr);
    std::vector<std::string> args = o.command;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);

    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, out[1], STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&actions, err[1], STDERR_FILENO);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    sigset_t defaults, empty;
    sigemptyset(&defaults);
    sigaddset(&defaults, SIGINT);
    sigaddset(&defaults, SIGTERM);
    sigaddset(&defaults, SIGPIPE);
    sigemptyset(&empty);
    posix_spawnattr_setsigdefault(&attr, &defaults);
    posix_spawnattr_setsigmask(&attr, &empty);
    posix_spawnattr_setpgroup(&attr, 0);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF |
                                        POSIX_SPAWN_SETSIGMASK);
    const int rc = posix_spawnp(&w.pid, argv[0], &actions, &attr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
    close(out[1]);
    close(err[1]);
    if (rc != 0) {
      close(out[0]);
      close(err[0]);
      stop_started();
      return absl::InvalidArgumentError(absl::StrCat("launch: cannot run '", o.command[0],
                                                     "' for rank ", w.rank, ": ",
                                                     std::strerror(rc)));
    }
    w.running = true;
    w.streams[0] = Stream{out[0], o.stdout_fd, ""};
    w.streams[1] = Stream{err[0], o.stderr_fd, ""};
  }

  int failed = -1;          // index of the first failed worker
  int interrupted = 0;      // the signal we forwarded last, if any
  int first_interrupt = 0;  // and the first (a worker stopping on it exits 128 + it)
  absl::Time kill_at = absl::InfiniteFuture();
  int running = o.nproc_per_node;
  absl::Time drain_until = absl::InfiniteFuture();  // output after the last exit
  char buf[65536];
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<std::pair<int, int>> owner;  // (worker, stream)
    if (signals.read_fd() >= 0) fds.push_back({signals.read_fd(), POLLIN, 0});
    for (int i = 0; i < o.nproc_per_node; ++i) {
      for (int s = 0; s < 2; ++s) {
        if (workers[i].streams[s].fd >= 0) {
          fds.push_back({workers[i].streams[s].fd, POLLIN, 0});
          owner.push_back({i, s});
        }
      }
    }
    if (running == 0 && (owner.empty() || absl::Now() >= drain_until)) break;
    (void)poll(fds.data(), fds.size(), 20);
    size_t k = 0;
    if (signals.read_fd() >= 0) {
      if (fds[0].revents & POLLIN) {
        unsigned char sig = 0;
        while (read(signals.read_fd(), &sig, 1) == 1) {
          // The first signal lets the workers save and stop at a step
          // boundary; the second stops them now.
          const absl::Duration wait = interrupted == 0 ? o.stop_timeout : o.grace_period;
          if (interrupted == 0) first_interrupt = sig;
          interrupted = sig;
          signal_workers(workers, sig);
          kill_at = std::min(kill_at, absl::Now() + wait);
        }
      }
      k = 1;
    }
    for (size_t j = 0; j < owner.size(); ++j) {
      if (!(fds[k + j].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      Worker& w = workers[owner[j].first];
      Stream& s = w.streams[owner[j].second];
      const std::string prefix = o.prefix_output ? absl::StrCat("[rank ", w.rank, "] ") : "";
      const ssize_t n = read(s.fd, buf, sizeof(buf));
      if (n > 0) {
        emit(s, prefix, buf, static_cast<size_t>(n), false);
      } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
        emit(s, prefix, buf, 0, true);
        close(s.fd);
        s.fd = -1;
      }
    }
    for (int i = 0; i < o.nproc_per_node; ++i) {
      Worker& w = workers[i];
      if (!w.running) continue;
      int status = 0;
      if (waitpid(w.pid, &status, WNOHANG) != w.pid) continue;
      w.running = false;
      --running;
      w.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      // A worker that stops on a forwarded signal exits with 128 + it (after
      // saving); any other failure stops the rest (a SIGTERM: at once, for
      // workers already stopping), so none waits on it in a collective.
      const bool stopped_as_asked =
          interrupted != 0 && (w.exit_code == 128 + interrupted || w.exit_code == 128 + first_interrupt);
      if (w.exit_code != 0 && failed < 0 && !stopped_as_asked) {
        failed = i;
        failure = WIFEXITED(status)
                      ? absl::StrCat("exited with code ", w.exit_code)
                      : absl::StrCat("was killed by ", signal_name(WTERMSIG(status)));
        signal_workers(workers, SIGTERM);
        kill_at = std::min(kill_at, absl::Now() + o.grace_period);
      }
      if (running == 0) drain_until = absl::Now() + absl::Seconds(1);
    }
    if (running > 0 && absl::Now() >= kill_at) {
      signal_workers(workers, SIGKILL);
      kill_at = absl::InfiniteFuture();
    }
  }
  for (Worker& w : workers) {
    for (Stream& s : w.streams) {
      if (s.fd >= 0) close(s.fd);  // grandchildren still holding the pipe
    }
  }

  LaunchResult result;
  if (failed >= 0) {
    const Worker& w = workers[failed];
    result.exit_code = w.exit_code;
    result.failed_rank = w.rank;
    int stopped = 0;
    for (const Worker& other : workers) stopped += (&other != &w && other.exit_code != 0) ? 1 : 0;
    result.message = absl::StrCat("worker rank ", w.rank, " (local rank ", w.local_rank, ", pid ",
                                  w.pid, ", '", o.command[0], "') ", failure,
                                  stopped > 0 ? absl::StrCat("; stopped ", stopped, " other worker(s)")
                                              : "");
  } else if (interrupted != 0) {
    result.exit_code = 128 + interrupted;
    result.message = absl::StrCat("interrupted by ", signal_name(interrupted), "; forwarded to ",
                                  o.nproc_per_node, " worker(s)");
  } else {
    result.message = absl::StrCat("all ", o.nproc_per_node, " worker(s) exited successfully");
  }
  return result;
}

}  // namespace colossal::comm
