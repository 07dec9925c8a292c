#pragma once
// A traced build's account of itself: every path it looked at, as it was before the build touched
// it, and every path it changed, with a copy of the bytes it replaced. Made by the tracer process
// (`overlay __trace-build`, which runs one build command under build_trace.hpp's tracer), read back
// by add-native: the inputs become the build store's key (build_inputs.hpp), the changes what
// revert and the store put back (docs/design.md, "The build, observed").
//
// Each change is noted before the system call that makes it runs: the path's state then (absent,
// a file, a directory, a symlink), and a file's bytes, copied (or, for a name about to go away,
// hard-linked: O(1)) into the backup dir. The note is appended to a journal at once, so a build
// killed midway still leaves what revert needs to undo what it had changed.
#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "overlay/build_trace.hpp"
#include "overlay/disk.hpp"

namespace overlay {

// A path's state as the build first found it (lstat, or stat where the call followed a link).
struct PathState {
  FileType type = FileType::none;  // none: it was not there
  mode_t mode = 0;
  std::uint64_t size = 0, dev = 0, ino = 0, nlink = 0;
  std::int64_t mtime_ns = 0, ctime_ns = 0;
  uid_t uid = 0;
  gid_t gid = 0;
  bool operator==(const PathState&) const = default;
};
PathState state_of(const FileInfo& fi);

// A path the build looked at and did not make itself first.
struct TracedInput {
  std::string path;  // absolute: its directory's real path and its name
  Follow follow = Follow::yes;
  unsigned looked = 0;  // Looked bits
  PathState before;
  std::string listing;   // a listed directory: SHA-256 of its names as they were before the build
  std::string target;    // a symlink read (readlink): where it pointed
  std::string sha256;    // a file read: its bytes before the build ("" until known)
  bool tracked = false;  // a target or artifact add-native backed up itself
};

// A path the build changed: how it was before.
struct TracedChange {
  std::string path;  // absolute: its directory's real path and its name
  PathState before;
  std::string backup;            // a file's bytes before: a name in the backup dir ("" where none is needed)
  std::string sha256;            // of those bytes ("" until hashed: a hard-linked backup is hashed after)
  std::string target;            // a symlink's target before
  bool tracked = false;          // a target or artifact add-native backed up itself
  bool appended = false;         // every change to it was an append (a log, made by `>>` or kept), not a rewrite
  std::optional<Xattrs> xattrs;  // a file's extended attributes (ACLs, labels) before (none: not read)
  // While recording only (not written): the build's changes left it in a state of the build's own
  // making (made, replaced whole, removed), so what it reads there afterwards is no input.
  bool defined = false;
};

struct BuildTrace {
  std::string untraced;                   // why nothing was observed ("" when traced)
  std::vector<std::string> unobservable;  // what the observation could not account for
  std::vector<TracedInput> inputs;
  std::vector<TracedChange> changes;
  int exit_code = -1;
  int term_signal = 0;
  std::string exec_error;
  int left_running = 0;
  // Whether every read and change was seen: traced, and nothing unaccounted for.
  bool complete() const { return untraced.empty() && unobservable.empty(); }
};
void to_json(nlohmann::json& j, const PathState& s);
void from_json(const nlohmann::json& j, PathState& s);
void to_json(nlohmann::json& j, const TracedInput& i);
void from_json(const nlohmann::json& j, TracedInput& i);
void to_json(nlohmann::json& j, const TracedChange& c);
void from_json(const nlohmann::json& j, TracedChange& c);
void to_json(nlohmann::json& j, const BuildTrace& t);
void from_json(const nlohmann::json& j, BuildTrace& t);

// What the tracer process is asked to do.
struct TraceRequest {
  std::vector<std::string> argv;  // the build command
  fs::path out;                   // the trace (JSON), written whole when the build ended
  fs::path backups;               // where the bytes a change replaces are kept (created)
  std::string backup_prefix;      // the start of each backup's name in it
  std::vector<fs::path> skipped;  // below these nothing is recorded (the overlay, caches, /proc …)
  std::vector<fs::path> tracked;  // backed up by add-native itself: changes noted, not copied
};

// The listener the tracer gives a traced build (and the build store's serve, which changes what a
// build would): notes each path's state before it was touched, and keeps the bytes a change
// replaces in req.backups, each noted in `journal` (may be null) as it is made. Never throws: what
// it cannot note is told as unobservable.
class TraceRecorder final : public TraceListener {
 public:
  TraceRecorder(Disk& disk, const TraceRequest& req, WriteHandle* journal);
  void looked(const std::string& path, Follow follow, unsigned how) override;
  void changing(const std::string& path, Change how, Follow follow) override;
  // A directory renamed (or exchanged) takes every name below it along: each is noted as it was
  // before, at its old name and at its new one, so revert puts the tree back where it was.
  void renaming(const std::string& from, const std::string& to, bool exchange) override;
  void executed(const std::string& path) override { looked(path, Follow::yes, kLookedExec | kLookedContent); }
  void unobservable(const std::string& why) override;
  BuildTrace take() { return std::move(trace_); }
  // How many changes went ahead without their bytes kept (a full disk): revert cannot undo those.
  std::size_t failures() const { return failures_; }

 private:
  Disk& disk_;
  const TraceRequest& req_;
  WriteHandle* journal_;
  std::vector<std::string> skipped_;
  std::set<std::string> tracked_;
  std::map<std::string, std::string> real_dirs_;  // a directory as named -> its real path (or as named)
  std::set<std::string> prefixes_seen_;           // paths as named whose symlink, if any, is noted
  std::map<std::pair<std::string, Follow>, std::size_t> input_at_;
  std::map<std::string, std::size_t> change_at_;
  BuildTrace trace_;
  int backups_ = 0;
  std::size_t failures_ = 0;
  bool copy_backups_ = false;  // while a tree moves: its inodes live on under new names, so linked
                               // backups would change with them

  std::string real_or_normal(const fs::path& p);
  std::string key(const std::string& path);
  void links_on_the_way(const std::string& named, int depth);
  bool skipped(const std::string& k) const;
  PathState state(const std::string& k, Follow follow);
  std::string listing_before(const std::string& dir);
  bool back_up(TracedChange& c, bool by_link);
  void note_moving_tree(const std::string& from, const std::string& to);
  void journal(const TracedChange& c);
};

// The argv that runs `req` under the tracer: this program's `__trace-build` entry; nullopt where
// no program with it is known (set_tracer_program was never called) or /proc is missing.
std::optional<std::vector<std::string>> tracer_argv(const TraceRequest& req);
// The program whose `__trace-build` entry runs builds traced: the overlay binary sets itself.
void set_tracer_program(const fs::path& program);

// The tracer process's main (`overlay __trace-build …`, argv as tracer_argv makes it): runs the
// build, writes the trace, and exits as the build did (its code, or its signal raised again).
int build_tracer_main(int argc, char** argv);

// The trace at `path` (journal lines of a build that did not finish are read too: see
// read_journal). Throws where it cannot be read.
BuildTrace read_trace(Disk& disk, const fs::path& path);
// The changes noted in the journal beside trace `path` (`path` + ".journal"): all a build killed
// before it ended leaves. Empty where there is none.
std::vector<TracedChange> read_journal(Disk& disk, const fs::path& path);

// The roots below which a trace records nothing whatever the build does: the kernel's own trees
// and the compiler caches (ccache's, sccache's), whose entries are named by a digest of what they
// hold and so never make a compile's result differ.
std::vector<fs::path> untraced_roots();

// The mount points below /dev of filesystems that hold files (/dev/shm's tmpfs, whatever else is
// mounted there), from /proc/self/mountinfo: traced like any other path though /dev is skipped,
// for an install, a cache or a scratch dir kept there is written by builds like any other.
const std::vector<std::string>& traced_mounts_below_dev();

// Whether nothing is recorded at `path` (absolute, its directory real): below one of `skipped`,
// and not below a traced mount below /dev.
bool is_skipped_path(const std::string& path, const std::vector<std::string>& skipped);

}  // namespace overlay
