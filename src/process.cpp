#include "overlay/process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string_view>

#include "overlay/error.hpp"

extern char** environ;

namespace overlay {
namespace {

int g_wake_fd = -1;  // write end of the self-pipe, used by the signal handler only

void on_signal(int sig) {
  int saved = errno;
  unsigned char b = static_cast<unsigned char>(sig);
  if (g_wake_fd >= 0) (void)!::write(g_wake_fd, &b, 1);
  errno = saved;
}

struct Pipe {
  int r = -1, w = -1;
  Pipe() {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) throw DiskError("pipe", "", errno);
    r = fds[0];
    w = fds[1];
  }
  ~Pipe() { close_both(); }
  void close_r() {
    if (r >= 0) ::close(r);
    r = -1;
  }
  void close_w() {
    if (w >= 0) ::close(w);
    w = -1;
  }
  void close_both() {
    close_r();
    close_w();
  }
};

// Installs handlers for the signals we watch and restores the previous ones on destruction;
// then hands each SIGINT/SIGTERM/SIGHUP received meanwhile to the previous handler, when that was
// a function (a caller noting signals between runs learns of those during them too).
class SignalGuard {
 public:
  explicit SignalGuard(int wake_fd) {
    g_wake_fd = wake_fd;
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    for (int i = 0; i < kCount; ++i) ::sigaction(kSignals[i], &sa, &old_[i]);
  }
  ~SignalGuard() {
    for (int i = 0; i < kCount; ++i) ::sigaction(kSignals[i], &old_[i], nullptr);
    g_wake_fd = -1;
    for (int i = 0; i < kCount; ++i) {
      const struct sigaction& o = old_[i];
      bool function = (o.sa_flags & SA_SIGINFO) == 0 && o.sa_handler != SIG_DFL && o.sa_handler != SIG_IGN;
      if (received_[i] && function) o.sa_handler(kSignals[i]);
    }
  }
  void received(int sig) {
    for (int i = 0; i < kCount; ++i)
      if (kSignals[i] == sig) received_[i] = true;
  }
  SignalGuard(const SignalGuard&) = delete;
  SignalGuard& operator=(const SignalGuard&) = delete;

 private:
  static constexpr int kCount = 4;
  static constexpr int kSignals[kCount] = {SIGINT, SIGTERM, SIGHUP, SIGCHLD};
  struct sigaction old_[kCount] {};
  bool received_[kCount] = {};
};

// NAME of a "NAME=value" entry.
std::string_view env_name(std::string_view kv) { return kv.substr(0, kv.find('=')); }

// Our environment with opts.env_set's entries replacing or adding theirs.
std::vector<std::string> child_environment(const std::vector<std::string>& env_set) {
  std::vector<std::string> out;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string_view kv(*e);
    bool replaced =
        std::any_of(env_set.begin(), env_set.end(), [&](const std::string& s) { return env_name(s) == env_name(kv); });
    if (!replaced) out.emplace_back(kv);
  }
  out.insert(out.end(), env_set.begin(), env_set.end());
  return out;
}

// What execvp would run: `name` itself when it has a '/', else the first executable regular file
// of that name on PATH (the child's PATH); the name unchanged when none is, so execve reports why.
std::string find_program(const std::string& name, const std::vector<std::string>& env) {
  if (name.find('/') != std::string::npos) return name;
  std::string path = "/bin:/usr/bin";
  for (const auto& kv : env)
    if (env_name(kv) == "PATH") path = kv.substr(5);
  std::size_t from = 0;
  while (from <= path.size()) {
    std::size_t to = std::min(path.find(':', from), path.size());
    std::string dir = path.substr(from, to - from);
    std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    struct stat st {};
    if (::access(candidate.c_str(), X_OK) == 0 && ::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode))
      return candidate;
    from = to + 1;
  }
  return name;
}

// Everything the child needs, made by the parent beforehand: from clone(CLONE_VM | CLONE_VFORK)
// to execve the child runs in our memory (we are suspended meanwhile), so it must not allocate or
// change anything of ours — only system calls on what is prepared here. Not copyable or movable:
// the pointer arrays point into it.
struct ChildSetup {
  ChildSetup(const std::vector<std::string>& args, const RunOptions& opts)
      : env_strings(child_environment(opts.env_set)), path(find_program(args[0], env_strings)) {
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    for (auto& kv : env_strings) envp.push_back(kv.data());
    envp.push_back(nullptr);
    sh_argv = {const_cast<char*>("/bin/sh"), path.data()};
    sh_argv.insert(sh_argv.end(), argv.begin() + 1, argv.end());
    if (!opts.cwd.empty()) cwd = opts.cwd.c_str();
  }
  ChildSetup(const ChildSetup&) = delete;
  ChildSetup& operator=(const ChildSetup&) = delete;

  std::vector<std::string> env_strings;
  std::string path;                        // argv[0] looked up on PATH
  std::vector<char*> argv, envp, sh_argv;  // sh_argv: execvp's fallback for a script with no #!
  const char* cwd = nullptr;               // nullptr: ours
  int out_fd = -1, err_fd = -1, report_fd = -1;
  // Ours: the child's parent while we live. Not "1": as a container's entrypoint we are pid 1
  // (every child would take itself for an orphan), and an orphan may go to a subreaper instead.
  pid_t parent = ::getpid();
};

// Not instrumented by AddressSanitizer: in the child its shadow-memory writes would land in ours.
#define OVERLAY_CHILD_CODE __attribute__((no_sanitize_address))

[[noreturn]] OVERLAY_CHILD_CODE void child_fail(const ChildSetup& c, int err) {
  (void)!::write(c.report_fd, &err, sizeof err);
  ::_exit(127);
}

// The child, between clone and execve: system calls only (see ChildSetup).
OVERLAY_CHILD_CODE int child_main(void* arg) {
  const ChildSetup& c = *static_cast<const ChildSetup*>(arg);
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);         // a build must not outlive an overlay killed with -9
  if (::getppid() != c.parent) ::_exit(127);  // the parent died before prctl took effect
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGPIPE, SIGQUIT}) ::sigaction(sig, &dfl, nullptr);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);  // the parent blocked every signal around clone
  int devnull = ::open("/dev/null", O_RDONLY);
  if (devnull > 0) {
    ::dup2(devnull, 0);
    ::close(devnull);
  }
  ::dup2(c.out_fd, 1);
  ::dup2(c.err_fd, 2);
  if (c.cwd != nullptr && ::chdir(c.cwd) != 0) child_fail(c, errno);
  ::execve(c.path.c_str(), c.argv.data(), c.envp.data());
  if (errno == ENOEXEC) ::execve(c.sh_argv[0], c.sh_argv.data(), c.envp.data());
  child_fail(c, errno);
}

// Starts the child as posix_spawn does (clone with CLONE_VM | CLONE_VFORK: no copy of our page
// tables, which a fork of this process would pay for), with every signal blocked meanwhile so no
// handler of ours runs in the child before it resets them. Returns the pid.
pid_t spawn(ChildSetup& c) {
  constexpr std::size_t kStack = 256 << 10;
  void* stack = ::mmap(nullptr, kStack, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
  if (stack == MAP_FAILED) throw DiskError("spawn: stack", c.path, errno);
  sigset_t all, old;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old);
  pid_t pid = ::clone(child_main, static_cast<char*>(stack) + kStack, CLONE_VM | CLONE_VFORK | SIGCHLD, &c);
  int err = errno;
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  ::munmap(stack, kStack);
  if (pid < 0) throw DiskError("spawn", c.path, err);
  return pid;
}

class Runner {
 public:
  Runner(const std::vector<std::string>& argv, const RunOptions& opts) : argv_(argv), opts_(opts) {}
  RunResult run();

 private:
  void pump(int fd, std::string* sink, bool* open, int copy_fd = -1, int echo_fd = -1,
            WriteHandle** copy_log = nullptr);
  void tick();
  void handle_wake();
  void check_timeout();
  void kill_group(int sig) {
    if (pid_ > 0) ::kill(-pid_, sig);
  }

  const std::vector<std::string>& argv_;
  const RunOptions& opts_;
  RunResult res_;
  pid_t pid_ = -1;
  WriteHandle* log_ = nullptr;
  Pipe wake_;
  bool exited_ = false;
  bool term_sent_ = false;
  SignalGuard* guard_ = nullptr;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point term_at_{};
  std::chrono::steady_clock::time_point next_tick_ = start_ + std::chrono::milliseconds(50);  // let it start first
};

// Writes all of buf to fd, retrying short writes; gives up quietly on an error (a full disk or a
// closed terminal ends the copy, not the run).
void write_all(int fd, const char* buf, std::size_t len) {
  while (len > 0) {
    ssize_t n = ::write(fd, buf, len);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    buf += n;
    len -= static_cast<std::size_t>(n);
  }
}

void Runner::pump(int fd, std::string* sink, bool* open, int copy_fd, int echo_fd, WriteHandle** copy_log) {
  char buf[65536];
  ssize_t n = ::read(fd, buf, sizeof buf);
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return;
  if (n <= 0) {
    *open = false;
    return;
  }
  auto len = static_cast<std::size_t>(n);
  if (sink != nullptr) {
    sink->append(buf, len);
    return;
  }
  if (opts_.output == Output::files) {
    if (copy_fd >= 0) write_all(copy_fd, buf, len);
    if (copy_log != nullptr && *copy_log != nullptr) {
      try {
        (*copy_log)->write(buf, len);
      } catch (const std::exception& e) {
        *copy_log = nullptr;  // a full disk ends the log, not the run
        if (res_.log_error.empty()) res_.log_error = e.what();
      }
    }
    if (echo_fd >= 0) write_all(echo_fd, buf, len);
    return;
  }
  (void)!::write(2, buf, len);
  if (log_ != nullptr) {
    try {
      log_->write(buf, len);
    } catch (const std::exception& e) {
      log_ = nullptr;  // a full disk ends the log, not the build: its output still reaches stderr
      res_.log_error = e.what();
    }
  }
}

void Runner::handle_wake() {
  unsigned char sigs[64];
  ssize_t n = ::read(wake_.r, sigs, sizeof sigs);
  for (ssize_t i = 0; i < n; ++i) {
    int sig = sigs[i];
    if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) {
      res_.forwarded_signal = sig;
      guard_->received(sig);
      if (opts_.on_signal) {  // the caller's to deliver (and no SIGKILL after the grace)
        opts_.on_signal(pid_, sig);
        continue;
      }
      kill_group(sig);
      if (!term_sent_) {
        term_sent_ = true;
        term_at_ = std::chrono::steady_clock::now();  // SIGKILL after the grace
      }
    }
  }
  int status = 0;
  if (!exited_ && ::waitpid(pid_, &status, WNOHANG) == pid_) {
    exited_ = true;
    if (WIFEXITED(status)) res_.exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) res_.term_signal = WTERMSIG(status);
  }
}

void Runner::tick() {
  if (!opts_.on_tick || exited_) return;
  auto now = std::chrono::steady_clock::now();
  if (now < next_tick_) return;
  next_tick_ = now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                         std::chrono::duration<double>(opts_.tick_s));
  opts_.on_tick(pid_);
}

void Runner::check_timeout() {
  if (exited_) return;
  auto now = std::chrono::steady_clock::now();
  if (opts_.timeout_s && !term_sent_ && now - start_ >= std::chrono::duration<double>(*opts_.timeout_s)) {
    res_.timed_out = true;
    term_sent_ = true;
    term_at_ = now;
    kill_group(SIGTERM);
  } else if (term_sent_ && now - term_at_ >= std::chrono::duration<double>(opts_.kill_grace_s)) {
    kill_group(SIGKILL);
  }
}

RunResult Runner::run() {
  if (argv_.empty()) throw Error("empty command");
  log_ = opts_.log;
  ::fcntl(wake_.r, F_SETFL, O_NONBLOCK);
  ::fcntl(wake_.w, F_SETFL, O_NONBLOCK);
  Pipe out, err, report;
  SignalGuard guard(wake_.w);
  guard_ = &guard;
  bool capture = opts_.output == Output::capture, files = opts_.output == Output::files;
  WriteHandle *out_log = opts_.out_log, *err_log = opts_.err_log;
  ChildSetup child(argv_, opts_);
  child.out_fd = out.w;
  child.err_fd = capture || files ? err.w : out.w;
  child.report_fd = report.w;
  pid_ = spawn(child);
  ::setpgid(pid_, pid_);  // also done by the child; whichever runs first wins the race
  out.close_w();
  err.close_w();
  report.close_w();
  int exec_errno = 0;
  if (::read(report.r, &exec_errno, sizeof exec_errno) == sizeof exec_errno)
    res_.exec_error = std::string("cannot run ") + argv_[0] + ": " + std::strerror(exec_errno);
  res_.pid = pid_;
  bool out_open = true, err_open = capture || files;
  while (!exited_ || out_open || err_open) {
    pollfd fds[3] = {{wake_.r, POLLIN, 0}, {out_open ? out.r : -1, POLLIN, 0}, {err_open ? err.r : -1, POLLIN, 0}};
    // Once the child is gone, stop waiting for pipes a background grandchild may hold open.
    int wait_ms = exited_ ? 200 : (opts_.timeout_s || term_sent_ || opts_.on_tick ? 50 : 1000);
    int n = ::poll(fds, 3, wait_ms);
    if (n == 0 && exited_) break;
    if (fds[0].revents) handle_wake();
    if (fds[1].revents)
      pump(out.r, capture ? &res_.out : nullptr, &out_open, opts_.out_fd, opts_.out_echo_fd, &out_log);
    if (fds[2].revents) pump(err.r, files ? nullptr : &res_.err, &err_open, opts_.err_fd, opts_.err_echo_fd, &err_log);
    if (n == 0 && !exited_) handle_wake();  // a missed SIGCHLD cannot hang us
    check_timeout();
    tick();
  }
  res_.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  if (res_.timed_out || (res_.forwarded_signal && !opts_.on_signal)) kill_group(SIGKILL);  // no survivors
  return res_;
}

}  // namespace

RunResult run_process(const std::vector<std::string>& argv, const RunOptions& opts) {
  Runner runner(argv, opts);
  return runner.run();
}

std::string describe(const RunResult& r) {
  if (!r.exec_error.empty()) return r.exec_error;
  std::string s;
  if (r.timed_out) s = "timed out, ";
  if (r.term_signal != 0) return s + "killed by signal " + std::to_string(r.term_signal);
  return s + "exit " + std::to_string(r.exit_code);
}

}  // namespace overlay
