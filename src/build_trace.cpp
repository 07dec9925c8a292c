#include "overlay/build_trace.hpp"

#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <optional>
#include <set>

#include "overlay/error.hpp"

extern char** environ;

// System calls newer than some C libraries' headers: one number on every architecture since 5.1.
#ifndef SYS_openat2
#define SYS_openat2 437
#endif
#ifndef SYS_faccessat2
#define SYS_faccessat2 439
#endif
#ifndef SYS_fchmodat2
#define SYS_fchmodat2 452
#endif
#ifndef SYS_io_uring_setup
#define SYS_io_uring_setup 425
#endif
#ifndef SYS_open_tree
#define SYS_open_tree 428
#endif
#ifndef SYS_move_mount
#define SYS_move_mount 429
#endif
#ifndef SYS_fsopen
#define SYS_fsopen 430
#endif
#ifndef SYS_fsmount
#define SYS_fsmount 432
#endif
#ifndef SYS_fspick
#define SYS_fspick 433
#endif
#ifndef SYS_mount_setattr
#define SYS_mount_setattr 442
#endif

#if defined(__x86_64__)
#define OVERLAY_AUDIT_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define OVERLAY_AUDIT_ARCH AUDIT_ARCH_AARCH64
#else
#error "the build tracer knows the system calls of x86-64 and aarch64 only"
#endif

namespace overlay {
namespace {

// What a traced system call does, and where its arguments are. A path argument comes with the
// directory descriptor it is relative to (kCwd: the working directory).
constexpr int kCwd = -1, kNone = -2;
enum class Kind {
  open,      // dirfd, path, flags (flags_arg kNone: creat's)
  openat2,   // dirfd, path, struct open_how* (its flags first)
  stat,      // dirfd, path, flags (AT_SYMLINK_NOFOLLOW, AT_EMPTY_PATH) or fixed follow
  exec,      // dirfd, path
  listing,   // fd
  rename,    // olddirfd, old, newdirfd, new
  remove,    // dirfd, path
  create,    // dirfd, path
  link,      // olddirfd, old, newdirfd, new
  truncate,  // path
  meta,      // dirfd, path (null path: the fd itself, as utimensat allows)
  meta_fd,   // fd
  connect,   // fd, sockaddr*, len
  opaque,    // what the observation cannot account for
};

struct Call {
  Kind kind;
  const char* name;
  int dirfd = kCwd;  // argument index of the dir fd, or kCwd
  int path = 0;      // argument index of the path
  int flags = kNone;
  bool follow = true;     // when no flag says otherwise
  int dirfd2 = kNone;     // rename/link: the new name's dir fd (kCwd for rename/link)
  int path2 = kNone;      // rename/link: the new name
  bool at_flags = false;  // `flags` holds AT_* flags (stat family, unlinkat), not O_* flags
};

const std::map<long, Call>& calls() {
  static const std::map<long, Call> table = [] {
    std::map<long, Call> t;
    auto add = [&](long nr, Call c) { t.emplace(nr, c); };
#ifdef SYS_open
    add(SYS_open, {Kind::open, "open", kCwd, 0, 1});
#endif
#ifdef SYS_creat
    add(SYS_creat, {Kind::open, "creat", kCwd, 0, kNone});
#endif
    add(SYS_openat, {Kind::open, "openat", 0, 1, 2});
    add(SYS_openat2, {Kind::openat2, "openat2", 0, 1, 2});
#ifdef SYS_stat
    add(SYS_stat, {Kind::stat, "stat", kCwd, 0});
#endif
#ifdef SYS_lstat
    add(SYS_lstat, {Kind::stat, "lstat", kCwd, 0, kNone, false});
#endif
    add(SYS_newfstatat, {Kind::stat, "newfstatat", 0, 1, 3, true, kNone, kNone, true});
    add(SYS_statx, {Kind::stat, "statx", 0, 1, 2, true, kNone, kNone, true});
#ifdef SYS_access
    add(SYS_access, {Kind::stat, "access", kCwd, 0});
#endif
    add(SYS_faccessat, {Kind::stat, "faccessat", 0, 1});
    add(SYS_faccessat2, {Kind::stat, "faccessat2", 0, 1, 3, true, kNone, kNone, true});
    // readlink is not stopped at: glibc's realpath() calls it on every component of every path a
    // compiler resolves (70% of a C++ compile's stops). Where a link points is keyed where the build
    // looks at the link (lstat) or reads through it.
    add(SYS_execve, {Kind::exec, "execve", kCwd, 0});
    add(SYS_execveat, {Kind::exec, "execveat", 0, 1, 4, true, kNone, kNone, true});
#ifdef SYS_getdents
    add(SYS_getdents, {Kind::listing, "getdents", kNone, 0});
#endif
    add(SYS_getdents64, {Kind::listing, "getdents64", kNone, 0});
#ifdef SYS_rename
    add(SYS_rename, {Kind::rename, "rename", kCwd, 0, kNone, false, kCwd, 1});
#endif
    add(SYS_renameat, {Kind::rename, "renameat", 0, 1, kNone, false, 2, 3});
    add(SYS_renameat2, {Kind::rename, "renameat2", 0, 1, 4, false, 2, 3});
#ifdef SYS_unlink
    add(SYS_unlink, {Kind::remove, "unlink", kCwd, 0, kNone, false});
#endif
#ifdef SYS_rmdir
    add(SYS_rmdir, {Kind::remove, "rmdir", kCwd, 0, kNone, false});
#endif
    add(SYS_unlinkat, {Kind::remove, "unlinkat", 0, 1, kNone, false});
#ifdef SYS_mkdir
    add(SYS_mkdir, {Kind::create, "mkdir", kCwd, 0, kNone, false});
#endif
    add(SYS_mkdirat, {Kind::create, "mkdirat", 0, 1, kNone, false});
#ifdef SYS_mknod
    add(SYS_mknod, {Kind::create, "mknod", kCwd, 0, kNone, false});
#endif
    add(SYS_mknodat, {Kind::create, "mknodat", 0, 1, kNone, false});
#ifdef SYS_symlink
    add(SYS_symlink, {Kind::create, "symlink", kCwd, 1, kNone, false});
#endif
    add(SYS_symlinkat, {Kind::create, "symlinkat", 1, 2, kNone, false});
#ifdef SYS_link
    add(SYS_link, {Kind::link, "link", kCwd, 0, kNone, false, kCwd, 1});
#endif
    add(SYS_linkat, {Kind::link, "linkat", 0, 1, 4, false, 2, 3, true});
    add(SYS_truncate, {Kind::truncate, "truncate", kCwd, 0});
#ifdef SYS_chmod
    add(SYS_chmod, {Kind::meta, "chmod", kCwd, 0});
#endif
#ifdef SYS_chown
    add(SYS_chown, {Kind::meta, "chown", kCwd, 0});
#endif
#ifdef SYS_lchown
    add(SYS_lchown, {Kind::meta, "lchown", kCwd, 0, kNone, false});
#endif
    add(SYS_fchmodat, {Kind::meta, "fchmodat", 0, 1});
    add(SYS_fchmodat2, {Kind::meta, "fchmodat2", 0, 1, 3, true, kNone, kNone, true});
    add(SYS_fchownat, {Kind::meta, "fchownat", 0, 1, 4, true, kNone, kNone, true});
#ifdef SYS_utime
    add(SYS_utime, {Kind::meta, "utime", kCwd, 0});
#endif
#ifdef SYS_utimes
    add(SYS_utimes, {Kind::meta, "utimes", kCwd, 0});
#endif
#ifdef SYS_futimesat
    add(SYS_futimesat, {Kind::meta, "futimesat", 0, 1});
#endif
    add(SYS_utimensat, {Kind::meta, "utimensat", 0, 1, 3, true, kNone, kNone, true});
    add(SYS_setxattr, {Kind::meta, "setxattr", kCwd, 0});
    add(SYS_lsetxattr, {Kind::meta, "lsetxattr", kCwd, 0, kNone, false});
    add(SYS_removexattr, {Kind::meta, "removexattr", kCwd, 0});
    add(SYS_lremovexattr, {Kind::meta, "lremovexattr", kCwd, 0, kNone, false});
    add(SYS_fchmod, {Kind::meta_fd, "fchmod", kNone, 0});
    add(SYS_fchown, {Kind::meta_fd, "fchown", kNone, 0});
    add(SYS_fsetxattr, {Kind::meta_fd, "fsetxattr", kNone, 0});
    add(SYS_fremovexattr, {Kind::meta_fd, "fremovexattr", kNone, 0});
    add(SYS_connect, {Kind::connect, "connect", kNone, 0});
    for (auto [nr, name] :
         std::initializer_list<std::pair<long, const char*>>{{SYS_open_by_handle_at, "open_by_handle_at"},
                                                             {SYS_mount, "mount"},
                                                             {SYS_umount2, "umount2"},
                                                             {SYS_chroot, "chroot"},
                                                             {SYS_pivot_root, "pivot_root"},
                                                             {SYS_unshare, "unshare"},
                                                             {SYS_setns, "setns"},
                                                             {SYS_open_tree, "open_tree"},
                                                             {SYS_move_mount, "move_mount"},
                                                             {SYS_fsopen, "fsopen"},
                                                             {SYS_fsmount, "fsmount"},
                                                             {SYS_fspick, "fspick"},
                                                             {SYS_mount_setattr, "mount_setattr"}})
      add(nr, {Kind::opaque, name, kNone, kNone});
    return t;
  }();
  return table;
}

// The seccomp filter: the calls above stop for the tracer, io_uring is refused (its submissions
// would name files no stop shows), a call of another architecture stops marked 0xffff (its
// numbers are not these), everything else runs.
constexpr std::uint16_t kForeign = 0xffff;

std::vector<sock_filter> seccomp_program() {
  std::vector<sock_filter> f;
  f.push_back(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)));
  f.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, OVERLAY_AUDIT_ARCH, 1, 0));
  f.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_TRACE | kForeign));
  f.push_back(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)));
#if defined(__x86_64__)
  // x32's numbers carry bit 30; its calls are not these.
  f.push_back(BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000u, 0, 1));
  f.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_TRACE | kForeign));
#endif
  f.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_io_uring_setup, 0, 1));
  f.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS));
  for (const auto& [nr, call] : calls()) {
    if (nr == SYS_newfstatat || nr == SYS_statx) {
      // fstat() is newfstatat(fd, "", AT_EMPTY_PATH): on a descriptor whose open was seen, and
      // called for nearly every file opened. Not stopped at: a third of a build's stops.
      auto flags = static_cast<std::uint32_t>(offsetof(seccomp_data, args) + 8 * static_cast<std::size_t>(call.flags));
      f.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, static_cast<std::uint32_t>(nr), 0, 4));
      f.push_back(BPF_STMT(BPF_LD | BPF_W | BPF_ABS, flags));  // the low word (x86-64, aarch64: little-endian)
      f.push_back(BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, AT_EMPTY_PATH, 1, 0));
      f.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_TRACE));
      f.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
      continue;
    }
    f.push_back(BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, static_cast<std::uint32_t>(nr), 0, 1));
    f.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_TRACE));
  }
  f.push_back(BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW));
  return f;
}

// One stopped system call: its number and arguments.
struct Stopped {
  long nr = -1;
  std::uint64_t args[6] = {};
  bool foreign = false;
};

bool read_stopped(pid_t pid, Stopped& s) {
  __ptrace_syscall_info info{};
  long n = ::ptrace(PTRACE_GET_SYSCALL_INFO, pid, sizeof info, &info);
  if (n <= 0 || info.op != PTRACE_SYSCALL_INFO_SECCOMP) return false;
  s.nr = static_cast<long>(info.seccomp.nr);
  for (int i = 0; i < 6; ++i) s.args[i] = info.seccomp.args[i];
  s.foreign = info.arch != OVERLAY_AUDIT_ARCH || (info.seccomp.ret_data & 0xffff) == kForeign;
  return true;
}

// Reads up to `max` bytes of the tracee's memory at `addr`, stopping at a NUL when `string`.
std::optional<std::string> read_memory(pid_t pid, std::uint64_t addr, std::size_t max, bool string) {
  if (addr == 0) return std::nullopt;
  std::string out;
  char buf[4096];
  while (out.size() < max) {
    std::size_t page_left = 4096 - (addr % 4096);
    std::size_t want = std::min({page_left, sizeof buf, max - out.size()});
    iovec local{buf, want}, remote{reinterpret_cast<void*>(addr), want};
    ssize_t n = ::process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (n <= 0) {
      if (errno == EFAULT) return std::nullopt;  // not mapped: the call itself fails with EFAULT
      // Where process_vm_readv is refused (some sandboxes), the tracer may still read /proc's view.
      std::string mem = "/proc/" + std::to_string(pid) + "/mem";
      int fd = ::open(mem.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) return std::nullopt;
      n = ::pread(fd, buf, want, static_cast<off_t>(addr));
      int err = errno;
      ::close(fd);
      if (n <= 0) {
        errno = n == 0 ? EIO : err;
        return std::nullopt;
      }
    }
    if (string) {
      const void* nul = std::memchr(buf, '\0', static_cast<std::size_t>(n));
      if (nul != nullptr) return out.append(buf, static_cast<const char*>(nul) - buf);
    }
    out.append(buf, static_cast<std::size_t>(n));
    addr += static_cast<std::uint64_t>(n);
  }
  return string ? std::nullopt : std::optional<std::string>(out);  // a path longer than PATH_MAX
}

std::optional<std::string> proc_link(pid_t pid, const std::string& what) {
  std::string link = "/proc/" + std::to_string(pid) + "/" + what;
  char buf[8192];
  ssize_t n = ::readlink(link.c_str(), buf, sizeof buf);
  if (n <= 0 || static_cast<std::size_t>(n) >= sizeof buf || buf[0] != '/') return std::nullopt;
  return std::string(buf, static_cast<std::size_t>(n));
}

// `path` with "//", "/./" and a trailing "/." or "/" folded (".." kept: a symlink before it
// decides where it leads, as it does for the kernel).
std::string tidy(std::string path) {
  std::string out;
  out.reserve(path.size());
  for (std::size_t i = 0; i < path.size();) {
    if (path[i] == '/') {
      std::size_t j = i;
      while (j < path.size() && path[j] == '/') ++j;
      if (j < path.size() && path[j] == '.' && (j + 1 == path.size() || path[j + 1] == '/')) {
        i = j + 1;
        continue;
      }
      out += '/';
      i = j;
      continue;
    }
    out += path[i++];
  }
  if (out.size() > 1 && out.back() == '/') out.pop_back();
  return out.empty() ? "/" : out;
}

class Tracer {
 public:
  explicit Tracer(TraceListener& l) : listener_(l) {}
  TraceOutcome run(const std::vector<std::string>& argv);

 private:
  TraceListener& listener_;
  TraceOutcome out_;
  pid_t root_ = -1;
  int report_ = -1;
  bool root_gone_ = false;
  std::set<pid_t> live_;
  std::set<pid_t> left_;  // the processes the program left running when it ended (each killed)
  std::set<std::string> said_;

  void unobservable(const std::string& why) {
    if (said_.insert(why).second) listener_.unobservable(why);
  }
  pid_t start(const std::vector<std::string>& argv);
  void read_report(const std::string& program);
  void loop();
  void on_stop(pid_t pid, int status);
  void on_syscall(pid_t pid);
  std::optional<std::string> path_arg(pid_t pid, const Stopped& s, int dirfd_arg, int path_arg, bool empty_ok);
  void on_connect(pid_t pid, const Stopped& s);
};

// The child: waits for the tracer to attach (`go` says whether it did), installs the filter where
// it is traced, and runs the program. Reports a failure to start through `report` (errno).
[[noreturn]] void child(const std::vector<std::string>& argv, int go, int report, pid_t parent) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(127);
  // The build gets every signal as its own process would (the tracer ignores those its group gets).
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGCHLD}) ::signal(sig, SIG_DFL);
  char traced = 0;
  while (::read(go, &traced, 1) < 0 && errno == EINTR) {
  }
  if (traced == 'T') {
    auto prog = seccomp_program();
    sock_fprog fprog{static_cast<unsigned short>(prog.size()), prog.data()};
    // Without CAP_SYS_ADMIN a filter needs no_new_privs (a setuid program then runs unelevated).
    if (::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &fprog) != 0 &&
        (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &fprog) != 0)) {
      int err = -errno;  // negative: the filter, not the exec
      (void)!::write(report, &err, sizeof err);
      ::_exit(127);
    }
  }
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  ::execvp(args[0], args.data());
  int err = errno;
  (void)!::write(report, &err, sizeof err);
  ::_exit(127);
}

pid_t Tracer::start(const std::vector<std::string>& argv) {
  int go[2], report[2];
  if (::pipe2(go, O_CLOEXEC) != 0 || ::pipe2(report, O_CLOEXEC) != 0) throw DiskError("pipe", "", errno);
  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid < 0) throw DiskError("fork", argv[0], errno);
  if (pid == 0) {
    ::close(go[1]);
    ::close(report[0]);
    child(argv, go[0], report[1], parent);
  }
  ::close(go[0]);
  ::close(report[1]);
  long opts = PTRACE_O_TRACESECCOMP | PTRACE_O_TRACEFORK | PTRACE_O_TRACEVFORK | PTRACE_O_TRACECLONE |
              PTRACE_O_TRACEEXEC | PTRACE_O_EXITKILL;
  char traced = 'T';
  if (::ptrace(PTRACE_SEIZE, pid, 0, opts) != 0) {
    out_.untraced = std::string("ptrace is not permitted here (") + std::strerror(errno) + ")";
    traced = 'U';
  }
  (void)!::write(go[1], &traced, 1);
  ::close(go[1]);
  report_ = report[0];  // read once the child is gone: its exec stops for us before it closes
  return pid;
}

// What the child reported through its pipe: a filter it could not install, a program it could
// not start (nothing when the program ran: the pipe closed on exec).
void Tracer::read_report(const std::string& program) {
  int err = 0;
  ssize_t n = ::read(report_, &err, sizeof err);
  while (n < 0 && errno == EINTR) n = ::read(report_, &err, sizeof err);
  ::close(report_);
  if (n == sizeof err && err < 0) {
    out_.untraced = std::string("no seccomp filter could be installed (") + std::strerror(-err) + ")";
    out_.exec_error = "the build could not be started under the tracer: " + out_.untraced;
  } else if (n == sizeof err) {
    out_.exec_error = "cannot run " + program + ": " + std::strerror(err);
  }
}

// A path through the process's own descriptors (/proc/self/fd/N, /dev/fd/N, /proc/PID/fd/N) names
// what the descriptor is open on: that file's path, then what follows N. Other /proc/self paths
// are the process's, not the tracer's.
std::string through_fds(pid_t pid, std::string path) {
  const std::string me = "/proc/" + std::to_string(pid);
  for (const char* self : {"/proc/self", "/proc/thread-self"})
    if (path.rfind(self, 0) == 0 && (path.size() == std::strlen(self) || path[std::strlen(self)] == '/'))
      path = me + path.substr(std::strlen(self));
  if (path.rfind("/dev/fd/", 0) == 0) path = me + "/fd/" + path.substr(8);
  const std::string fds = me + "/fd/";
  if (path.rfind(fds, 0) != 0) return path;
  std::size_t end = path.find('/', fds.size());
  std::string n = path.substr(fds.size(), end == std::string::npos ? std::string::npos : end - fds.size());
  auto target = proc_link(pid, "fd/" + n);
  if (!target) return path;
  return end == std::string::npos ? *target : tidy(*target + path.substr(end));
}

std::optional<std::string> Tracer::path_arg(pid_t pid, const Stopped& s, int dirfd_arg, int path_arg, bool empty_ok) {
  std::optional<std::string> name = read_memory(pid, s.args[path_arg], 4096, true);
  if (!name) {
    if (s.args[path_arg] == 0 && empty_ok && dirfd_arg >= 0)  // utimensat(fd, NULL): the fd itself
      return proc_link(pid, "fd/" + std::to_string(static_cast<int>(s.args[dirfd_arg])));
    // A bad pointer fails the call with EFAULT, touching nothing; one we cannot read is unknown.
    if (s.args[path_arg] != 0 && errno != EFAULT && errno != EIO)
      unobservable(std::string("a path the build named could not be read (") + std::strerror(errno) + ")");
    return std::nullopt;
  }
  if (!name->empty() && (*name)[0] == '/') return through_fds(pid, tidy(*name));
  int dirfd = dirfd_arg == kCwd ? AT_FDCWD : static_cast<int>(s.args[dirfd_arg]);
  std::optional<std::string> base =
      dirfd == AT_FDCWD ? proc_link(pid, "cwd") : proc_link(pid, "fd/" + std::to_string(dirfd));
  if (!base) return std::nullopt;  // a closed fd: EBADF, nothing touched
  if (name->empty()) return empty_ok ? std::optional<std::string>(tidy(*base)) : std::nullopt;
  return through_fds(pid, tidy(*base + "/" + *name));
}

// A connection to a process outside the build (a compile server, a remote cache, the network)
// reads what no stop shows. A Unix socket path that is not there fails the call: nothing read.
void Tracer::on_connect(pid_t pid, const Stopped& s) {
  std::size_t len = std::min<std::uint64_t>(s.args[2], sizeof(sockaddr_un));
  auto addr = read_memory(pid, s.args[1], len, false);
  if (!addr || addr->size() < sizeof(sa_family_t)) return;
  sa_family_t family = 0;
  std::memcpy(&family, addr->data(), sizeof family);
  if (family == AF_UNIX) {
    std::string path = addr->substr(offsetof(sockaddr_un, sun_path));
    path = path.substr(0, path.find('\0'));
    if (path.empty()) {
      unobservable("a process connected to an abstract Unix socket (a process outside the build)");
      return;
    }
    struct stat st {};
    if (path[0] == '/' && ::stat(path.c_str(), &st) != 0) return;
    unobservable("a process connected to the Unix socket " + path + " (a process outside the build)");
  } else if (family == AF_INET || family == AF_INET6) {
    unobservable("a process connected to the network");
  }
}

void Tracer::on_syscall(pid_t pid) {
  Stopped s;
  if (!read_stopped(pid, s)) {
    unobservable("the kernel did not say which system call stopped (PTRACE_GET_SYSCALL_INFO)");
    return;
  }
  if (s.foreign) {
    unobservable("a process of another architecture ran (its system calls are not decoded)");
    return;
  }
  auto it = calls().find(s.nr);
  if (it == calls().end()) return;
  const Call& c = it->second;
  auto follow_of = [&](std::uint64_t flags) {
    bool nofollow = c.at_flags ? (flags & AT_SYMLINK_NOFOLLOW) != 0 : (flags & O_NOFOLLOW) != 0;
    if (c.kind == Kind::link) nofollow = (flags & AT_SYMLINK_FOLLOW) == 0;
    return nofollow ? Follow::no : Follow::yes;
  };
  std::uint64_t flags = c.flags >= 0 ? s.args[c.flags] : 0;
  Follow follow = c.flags >= 0 ? follow_of(flags) : (c.follow ? Follow::yes : Follow::no);
  bool empty_ok = c.at_flags && (flags & AT_EMPTY_PATH) != 0;
  switch (c.kind) {
    case Kind::open:
    case Kind::openat2: {
      auto path = path_arg(pid, s, c.dirfd, c.path, false);
      if (!path) return;
      if (c.kind == Kind::openat2) {
        auto how = read_memory(pid, s.args[2], 3 * sizeof(std::uint64_t), false);
        flags = 0;
        std::uint64_t resolve = 0;
        if (how && how->size() == 3 * sizeof flags) {
          std::memcpy(&flags, how->data(), sizeof flags);
          std::memcpy(&resolve, how->data() + 2 * sizeof flags, sizeof resolve);
        }
        constexpr std::uint64_t kResolveInRoot = 0x10;  // absolute names start at dirfd, not at "/"
        if ((resolve & kResolveInRoot) != 0) unobservable("a process opened a file with RESOLVE_IN_ROOT");
      } else if (c.flags == kNone) {
        flags = O_CREAT | O_WRONLY | O_TRUNC;  // creat()
      }
      follow = (flags & O_NOFOLLOW) != 0 ? Follow::no : Follow::yes;
      if ((flags & O_PATH) != 0) return listener_.looked(*path, follow, kLookedMeta);
      bool writes = (flags & O_ACCMODE) != O_RDONLY || (flags & (O_TRUNC | O_CREAT)) != 0;
      if (!writes) return listener_.looked(*path, follow, kLookedContent);
      if ((flags & (O_CREAT | O_EXCL)) == (O_CREAT | O_EXCL))
        return listener_.changing(*path, Change::create, Follow::no);
      Change how = (flags & O_TRUNC) != 0            ? Change::content
                   : (flags & O_APPEND) != 0         ? Change::append
                   : (flags & O_ACCMODE) != O_RDONLY ? Change::rewrite
                                                     : Change::create;  // O_CREAT, read-only
      // What a read-write open (`r+`, `a+`, numpy's memmap) reads, and what a write in place keeps
      // of the bytes it does not write over, are the build's input as they are now.
      if ((how == Change::rewrite || (how == Change::append && (flags & O_ACCMODE) == O_RDWR)))
        listener_.looked(*path, follow, kLookedContent);
      return listener_.changing(*path, how, follow);
    }
    case Kind::stat:
    case Kind::exec: {
      auto path = path_arg(pid, s, c.dirfd, c.path, empty_ok);
      if (!path) return;
      return listener_.looked(*path, follow, kLookedMeta);
    }
    case Kind::listing: {
      auto path = proc_link(pid, "fd/" + std::to_string(static_cast<int>(s.args[0])));
      if (path) listener_.looked(*path, Follow::yes, kLookedListing);
      return;
    }
    case Kind::rename: {
      auto from = path_arg(pid, s, c.dirfd, c.path, false);
      auto to = path_arg(pid, s, c.dirfd2, c.path2, false);
      if (!from || !to) return;
      constexpr std::uint64_t kExchange = 2;  // RENAME_EXCHANGE: both names get the other's, both inodes live on
      return listener_.renaming(*from, *to, (flags & kExchange) != 0);
    }
    case Kind::remove: {
      auto path = path_arg(pid, s, c.dirfd, c.path, false);
      if (path) listener_.changing(*path, Change::remove, Follow::no);
      return;
    }
    case Kind::create: {
      auto path = path_arg(pid, s, c.dirfd, c.path, false);
      if (path) listener_.changing(*path, Change::create, Follow::no);
      return;
    }
    case Kind::link: {
      auto from = path_arg(pid, s, c.dirfd, c.path, empty_ok);
      auto to = path_arg(pid, s, c.dirfd2, c.path2, false);
      if (from) listener_.looked(*from, follow, kLookedMeta);
      if (to) listener_.changing(*to, Change::create, Follow::no);
      return;
    }
    case Kind::truncate: {
      auto path = path_arg(pid, s, c.dirfd, c.path, false);
      if (path) listener_.changing(*path, Change::rewrite, Follow::yes);  // truncate(): the rest stays
      return;
    }
    case Kind::meta: {
      auto path = path_arg(pid, s, c.dirfd, c.path, true);
      if (path) listener_.changing(*path, Change::meta, follow);
      return;
    }
    case Kind::meta_fd: {
      auto path = proc_link(pid, "fd/" + std::to_string(static_cast<int>(s.args[0])));
      if (path) listener_.changing(*path, Change::meta, Follow::yes);
      return;
    }
    case Kind::connect:
      return on_connect(pid, s);
    case Kind::opaque:
      return unobservable(std::string("a process called ") + c.name +
                          " (where names lead then is not what the tracer resolves)");
  }
}

bool is_stop_signal(int sig) { return sig == SIGSTOP || sig == SIGTSTP || sig == SIGTTIN || sig == SIGTTOU; }

void Tracer::on_stop(pid_t pid, int status) {
  int sig = WSTOPSIG(status);
  int event = status >> 16;
  __ptrace_request resume = PTRACE_CONT;
  int inject = 0;
  if (sig == SIGTRAP && event == PTRACE_EVENT_SECCOMP) {
    on_syscall(pid);
  } else if (sig == SIGTRAP &&
             (event == PTRACE_EVENT_FORK || event == PTRACE_EVENT_VFORK || event == PTRACE_EVENT_CLONE)) {
    // The new process is counted live at its own first stop: it may have run and been reaped
    // already (the kernel reports the newest tracees first), and a dead pid must never be killed.
  } else if (sig == SIGTRAP && event == PTRACE_EVENT_EXEC) {
    unsigned long former = 0;  // a thread that exec'd takes the thread group's id
    if (::ptrace(PTRACE_GETEVENTMSG, pid, 0, &former) == 0 && static_cast<pid_t>(former) != pid)
      live_.erase(static_cast<pid_t>(former));
    auto exe = proc_link(pid, "exe");
    if (exe && exe->size() > 10 && exe->compare(exe->size() - 10, 10, " (deleted)") == 0)
      unobservable("a process ran a program no path names (a deleted file, a memfd): " + *exe);
    else if (exe)
      listener_.executed(*exe);
  } else if (event == PTRACE_EVENT_STOP) {
    if (is_stop_signal(sig)) resume = PTRACE_LISTEN;  // a group-stop: stays stopped until SIGCONT
  } else {
    inject = sig;  // a signal for the tracee: delivered as it would be untraced
  }
  if (::ptrace(resume, pid, 0, inject) != 0 && errno != ESRCH)
    unobservable(std::string("ptrace could not resume a process (") + std::strerror(errno) + ")");
}

void Tracer::loop() {
  for (;;) {
    int status = 0;
    pid_t pid = ::waitpid(-1, &status, __WALL);
    if (pid < 0) {
      if (errno == EINTR) continue;
      break;  // ECHILD: nothing left
    }
    if (WIFEXITED(status) || WIFSIGNALED(status)) {
      live_.erase(pid);
      if (pid != root_) continue;
      if (WIFEXITED(status)) out_.exit_code = WEXITSTATUS(status);
      if (WIFSIGNALED(status)) out_.term_signal = WTERMSIG(status);
      left_ = live_;
      out_.left_running = static_cast<int>(left_.size());
      for (pid_t p : live_) ::kill(p, SIGKILL);
      root_gone_ = true;
      continue;
    }
    if (!WIFSTOPPED(status)) continue;
    if (root_gone_) {  // one that was being born as the program ended: it cannot run on untraced
      // Its first stop may be reported after the program's exit: it was left running too.
      if (left_.insert(pid).second) ++out_.left_running;
      ::kill(pid, SIGKILL);
      continue;
    }
    live_.insert(pid);
    on_stop(pid, status);
  }
}

TraceOutcome Tracer::run(const std::vector<std::string>& argv) {
  if (argv.empty()) throw Error("empty command");
  root_ = start(argv);
  live_.insert(root_);
  loop();
  read_report(argv[0]);
  if (!out_.untraced.empty()) out_.left_running = 0;
  return out_;
}

}  // namespace

TraceOutcome trace_program(const std::vector<std::string>& argv, TraceListener& listener) {
  Tracer t(listener);
  return t.run(argv);
}

namespace {

// A child that waits to be attached, installs the filter, makes one call it stops at and exits:
// what a build's first process does, without the program. Returns why that could not be done, or
// why the stop could not be read ("" when all of it could).
std::string probe_tracing() {
  int go[2], report[2];
  if (::pipe2(go, O_CLOEXEC) != 0) return std::string("no pipe (") + std::strerror(errno) + ")";
  if (::pipe2(report, O_CLOEXEC) != 0) {
    ::close(go[0]), ::close(go[1]);
    return std::string("no pipe (") + std::strerror(errno) + ")";
  }
  auto prog = seccomp_program();
  sock_fprog fprog{static_cast<unsigned short>(prog.size()), prog.data()};
  pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid == 0) {
    // Never outlive a parent killed before it wrote `go`: this child execs nothing, so it holds
    // every descriptor of the parent's (an in-flight mark's flock among them) until it ends.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    ::close(go[1]), ::close(report[0]);
    char traced = 0;
    while (::read(go[0], &traced, 1) < 0 && errno == EINTR) {
    }
    if (traced != 'T') ::_exit(127);  // the parent died first: the pipe ended unwritten
    int err = 0;
    if (::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &fprog) != 0 &&
        (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &fprog) != 0))
      err = errno;
    (void)!::write(report[1], &err, sizeof err);
    if (err == 0) (void)!::access("/", F_OK);  // one call the filter stops at
    ::_exit(0);
  }
  ::close(go[0]), ::close(report[1]);
  std::string why;
  if (pid < 0) why = std::string("fork failed (") + std::strerror(errno) + ")";
  if (pid > 0 && ::ptrace(PTRACE_SEIZE, pid, 0, PTRACE_O_TRACESECCOMP | PTRACE_O_EXITKILL) != 0)
    why = std::string("ptrace is not permitted here (") + std::strerror(errno) + ")";
  (void)!::write(go[1], "T", 1);
  ::close(go[1]);
  int err = 0;
  if (pid > 0 && ::read(report[0], &err, sizeof err) == sizeof err && err != 0 && why.empty())
    why = std::string("no seccomp filter can be installed (") + std::strerror(err) + ")";
  ::close(report[0]);
  for (int status = 0; pid > 0;) {
    if (::waitpid(pid, &status, __WALL) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (!WIFSTOPPED(status)) break;
    Stopped st;
    if ((status >> 16) == PTRACE_EVENT_SECCOMP && !read_stopped(pid, st) && why.empty())
      why = "the kernel does not say which system call stopped (PTRACE_GET_SYSCALL_INFO needs Linux 5.3)";
    ::ptrace(PTRACE_CONT, pid, 0, 0);
  }
  return why;
}

}  // namespace

std::string why_untraceable() {
  static const std::string why = probe_tracing();
  return why;
}

}  // namespace overlay
