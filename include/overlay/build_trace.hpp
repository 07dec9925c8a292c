#pragma once
// The build, observed: a program run under a tracer that stops each of its processes (every fork,
// thread and exec of it) at every system call that names a file, before the call runs, and tells
// a listener what it is about to do: look at a path (stat, access, open to read, exec, list a
// directory) or change one (open to write, create, rename, delete, chmod, utimes, xattrs).
//
// The mechanism is a seccomp filter that returns SECCOMP_RET_TRACE for those calls only, and
// ptrace (PTRACE_SEIZE with TRACESECCOMP, TRACEFORK/VFORK/CLONE, TRACEEXEC, EXITKILL): the other
// system calls (read, write, mmap …) never stop, which keeps the cost to a few microseconds per
// file a compile names. Being the kernel's own account, it sees static programs, direct system
// calls and every exec a libc-level interposer would miss. What it cannot see is said
// (docs/design.md, "The build, observed"): io_uring is refused to the build (ENOSYS: programs fall
// back to plain calls), and a process of another architecture (i386 on x86-64), a mount, a chroot,
// a namespace change, an open by handle or a connection to a process outside the build makes the
// observation incomplete, which the listener is told as such.
//
// Where tracing is impossible (no ptrace in a locked-down container: Yama ptrace_scope 3, a
// seccomp profile that refuses it; no seccomp filters) the program runs untraced and the outcome
// says why: nothing is claimed from it.
#include <sys/types.h>

#include <string>
#include <vector>

#include "overlay/disk.hpp"

namespace overlay {

// How a process looked at a path, as bits: its metadata (stat, access, open O_PATH), its bytes
// (opened to read), its entries (a directory listed), where it points (a symlink looked at), run as
// a program.
enum Looked : unsigned { kLookedMeta = 1, kLookedContent = 2, kLookedListing = 4, kLookedTarget = 8, kLookedExec = 16 };

// What a process is about to do to a path.
enum class Change {
  content,      // opened to write with O_TRUNC (or creat): its bytes are replaced (or it is created)
  rewrite,      // written in place (opened to write without O_TRUNC, truncate, exchanged): its bytes
                // after may depend on its bytes before
  append,       // opened to append only (O_APPEND, no O_TRUNC): bytes may be added at its end
  create,       // made anew where nothing is: mkdir, mknod, symlink, link, O_CREAT (a no-op where it exists)
  remove,       // unlink, rmdir
  rename_from,  // the old name of a rename: it goes away (its bytes live on at the new name)
  rename_to,    // the new name of a rename: whatever was there is replaced
  meta,         // chmod, chown, utimes, xattrs: the bytes stay
};

// Told, in the order the build's processes make them, what they are about to do. Each call comes
// while the process that makes it is stopped before the system call runs, so what the listener
// reads of the path is what was there before the call.
class TraceListener {
 public:
  virtual ~TraceListener() = default;
  // `path` is absolute: a relative name joined to the process's working directory or to its
  // directory descriptor (no symlink resolved, no ".." removed: the kernel resolves it so too).
  virtual void looked(const std::string& path, Follow follow, unsigned how) = 0;
  virtual void changing(const std::string& path, Change how, Follow follow) = 0;
  // A rename of `from` to `to` (both names swapped where `exchange`: RENAME_EXCHANGE). Told as the
  // changes of its two names; a listener that keeps what a directory held overrides it.
  virtual void renaming(const std::string& from, const std::string& to, bool exchange) {
    changing(from, exchange ? Change::rewrite : Change::rename_from, Follow::no);
    changing(to, exchange ? Change::rewrite : Change::rename_to, Follow::no);
  }
  // A process started running `path` (the kernel's real path of the executed file).
  virtual void executed(const std::string& path) = 0;
  // Something the build did that this observation cannot account for (once per reason).
  virtual void unobservable(const std::string& why) = 0;
};

struct TraceOutcome {
  std::string untraced;    // why the program ran untraced ("" when it was traced)
  int exit_code = -1;      // the program's, when it exited
  int term_signal = 0;     // the signal that ended it
  std::string exec_error;  // the program could not be started (nothing ran)
  int left_running = 0;    // processes still running when it ended: killed (they could not be traced on)
};

// Runs argv (argv[0] looked up on PATH) in this process's child, traced, and waits for it; each
// event goes to `listener`. Its stdin, stdout, stderr, working directory and environment are this
// process's. When the program ends, every process it left running is killed: a traced process
// cannot be left to run on untraced. Call from a process with no other children (the tracer
// reaps every child it has).
TraceOutcome trace_program(const std::vector<std::string>& argv, TraceListener& listener);

// Why a program cannot be traced here ("" when it can): a child is attached and given the filter
// once per process, and the answer kept.
std::string why_untraceable();

}  // namespace overlay
