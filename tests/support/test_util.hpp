#pragma once
// Helpers shared by the tests: temporary trees, file I/O, a digest of a whole tree, running
// the real binary.
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace overlay::test {

namespace fs = std::filesystem;

// A private temporary directory, removed (recursively) when the object dies.
class TempDir {
 public:
  TempDir();
  explicit TempDir(const fs::path& base);  // below `base` rather than the temp dir
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }
  fs::path operator/(const std::string& rel) const { return path_ / rel; }

 private:
  fs::path path_;
};

// A filesystem mounted on an existing directory for the object's lifetime (needs root): a fresh
// tmpfs, or the directory bound onto itself read-only. ok() false, with why(), where mounting is
// refused. Declare it after the TempDir holding `at`, so it is unmounted first.
class ScopedMount {
 public:
  static std::unique_ptr<ScopedMount> tmpfs(const fs::path& at);
  static std::unique_ptr<ScopedMount> read_only(const fs::path& at);
  // `src` bound onto `at` (mount --bind): one filesystem, another mount (a container's volume).
  static std::unique_ptr<ScopedMount> bind(const fs::path& src, const fs::path& at);
  // An overlayfs of `lower` with `upper` (and `work`, on upper's filesystem) mounted on `at`.
  static std::unique_ptr<ScopedMount> overlayfs(const fs::path& lower, const fs::path& upper, const fs::path& work,
                                                const fs::path& at);
  ~ScopedMount();
  bool ok() const { return ok_; }
  const std::string& why() const { return why_; }

 private:
  fs::path at_;
  bool ok_ = false;
  std::string why_;
};

void write_file(const fs::path& p, const std::string& data, mode_t mode = 0644);
std::string read_file(const fs::path& p);
std::string file_sha256(const fs::path& p);

// A digest of everything below root: each path with its type, permission bits, symlink target
// and content hash, one line each, sorted. Equal digests mean byte-for-byte equal trees. Taken
// once the trees a command left to its detached deleter are gone (settle_litter).
std::string tree_digest(const fs::path& root);

// Rewrites overlay's record as versions before issue 62 wrote `--cache-snapshot move`: each cache
// kept aside is renamed into the overlay as _native_backup/<entry>/cache_<k>.dir and recorded as
// that `backup_dir`. Revert, fold and status still take such records back; this keeps them tested.
void record_caches_as_moved_in(const fs::path& overlay);
// Saves a record in `ov` (made if missing) whose one entry changes `path` (what makes a hold live).
void record_native_change(const fs::path& ov, const fs::path& path);

// Whether files in `dir` can share blocks (ioctl FICLONE works there: XFS with reflink, btrfs).
bool can_clone_in(const fs::path& dir);
// Whether any extent of the file is shared with another file (FIEMAP_EXTENT_SHARED).
bool shares_blocks(const fs::path& p);
// The inode number of `p` (lstat); throws when missing.
ino_t inode_of(const fs::path& p);
// Waits until `done()` holds, for as long as `left()` (what a running process still has to do:
// entries to delete, files to write) keeps changing. Gives up (false) only once `left()` has
// stood still for `stall`: a worker that stopped, never a machine that is merely slow.
bool wait_while_progressing(const std::function<bool()>& done, const std::function<std::uintmax_t()>& left,
                            std::chrono::seconds stall = std::chrono::seconds(60));
// Entries at and below `p` (0 when nothing stands there), as far as a walk of a changing tree gets.
std::uintmax_t count_entries(const fs::path& p);
// Waits until nothing stands at `p` (a tree a detached process deletes), while its entries keep
// going; true if so.
bool wait_until_gone(const fs::path& p);
// Waits until no tree a revert or add-native left to its detached deleter remains under `root`
// (".<name>.overlay-trash-*", ".<name>.overlay-restore-*", a non-empty "_trash"), while those trees
// keep shrinking; true if so. What a test compares after a command is the state once that deleter
// is done.
bool settle_litter(const fs::path& root);
// Waits until `ready()` holds or process `pid` (a child of ours) has ended, whichever comes first,
// without reaping it: true if `ready()` held. A step that cannot come any more ends the wait.
bool until_ready_or_exited(pid_t pid, const std::function<bool()>& ready);
// Whether `pid` runs (not gone, not a zombie waiting for a reaper).
bool process_alive(pid_t pid);
// Waits until `pid` has ended, however long that takes. For a process that ends by itself within
// seconds, leaving a file behind if it ran to its end: what it did is read once it is gone, never
// after a guessed delay.
void wait_until_dead(pid_t pid);

// Sends SIGKILL to process group `pgid` (led by a child of ours), reaps the leader and waits (up
// to 10 s) until no member runs any more (a zombie does not): SIGKILL reaches each member when it
// is delivered, so a grandchild can still be tearing down, mapping its files, after the leader is
// reaped. True once the whole group is gone.
bool kill_group_and_wait(pid_t pgid);

struct Cmd {
  int rc = -1;
  std::string out, err;
};

// Runs argv (no shell), capturing stdout and stderr; env entries ("NAME=value") are added.
Cmd run(const std::vector<std::string>& argv, const fs::path& cwd = {}, const std::vector<std::string>& env = {});
// Whether argv runs and exits 0 (a tool or module a test needs is there).
bool have(const std::vector<std::string>& argv);
// Runs the built overlay binary with args.
Cmd run_overlay(const std::vector<std::string>& args, const fs::path& cwd = {},
                const std::vector<std::string>& env = {});
// The binary under test and the source tree: compiled in, overridable with $OVERLAY_BIN and
// $OVERLAY_SOURCE_DIR (for running a bundled test on another machine).
const char* overlay_binary();
fs::path source_dir();

// ../shared/reference beside the checkout: upstream's overlay_setup.py and its other versions,
// which the compatibility tests run. A clone made alone has none of it.
fs::path shared_reference();
// Why a test that needs shared_reference()/rel cannot run here ("" where it can), and whether the
// environment demands it (OVERLAY_REQUIRE_SHARED=1, CI: then it is a failure, never a skip).
std::string missing_shared_reference(const std::string& rel = "");
bool shared_reference_required();
#define OVERLAY_REQUIRE_SHARED_REFERENCE(rel)                                                          \
  do {                                                                                                 \
    if (std::string why_ = ::overlay::test::missing_shared_reference(rel); !why_.empty()) {            \
      if (::overlay::test::shared_reference_required()) FAIL() << why_ << " (OVERLAY_REQUIRE_SHARED)"; \
      GTEST_SKIP() << why_;                                                                            \
    }                                                                                                  \
  } while (0)

// Starts the overlay binary in the background (stdout/stderr to /dev/null); env entries added.
pid_t spawn_overlay(const std::vector<std::string>& args, const std::vector<std::string>& env = {});
// Waits for pid: its exit status, or 128 + the signal that killed it.
int wait_rc(pid_t pid);

// Runs each invocation through `run` and expects a refusal that changes nothing: exit 1..127,
// exactly one stderr line, nothing on stdout, and the tree under `root` as it was.
void expect_refused_unchanged(const std::vector<std::vector<std::string>>& cases, const fs::path& root,
                              const std::function<Cmd(const std::vector<std::string>&)>& run);

// The C source of a CPython extension module `name` whose value() returns `value`.
std::string c_extension_source(const std::string& name, int value);

// Builds a small install for CLI tests: src/kernel.cpp, lib/libk.so, cache/ with nested dirs,
// an empty dir, an executable and a symlink.
struct Install {
  fs::path root, source, artifact, cache;
};
Install make_install(const fs::path& root);

// The argv of an `overlay add-native` call, flag by flag, in the order given:
//   run_overlay(AddNativeArgs(ov).target(in.source, patched).artifact(in.artifact).build("make"))
class AddNativeArgs {
 public:
  explicit AddNativeArgs(const fs::path& overlay) : argv_{"add-native", "--overlay", overlay.string()} {}
  AddNativeArgs& target(const fs::path& target, const fs::path& patched) {
    return flag("--target", target.string()).flag("--patched-file", patched.string());
  }
  AddNativeArgs& patch(const fs::path& diff, const fs::path& root) {
    return flag("--patch", diff.string()).flag("--patch-root", root.string());
  }
  AddNativeArgs& over(const fs::path& lower) { return flag("--over", lower.string()); }
  AddNativeArgs& artifact(const fs::path& p) { return flag("--artifact", p.string()); }
  AddNativeArgs& cache(const fs::path& p) { return flag("--invalidate-cache", p.string()); }
  AddNativeArgs& snapshot(const std::string& how) { return flag("--cache-snapshot", how); }
  AddNativeArgs& build(const std::string& cmd) { return flag("--build-cmd", cmd); }
  AddNativeArgs& build_cwd(const fs::path& p) { return flag("--build-cwd", p.string()); }
  // Any other flag (its value, when it takes one).
  AddNativeArgs& flag(const std::string& name, const std::optional<std::string>& value = std::nullopt) {
    argv_.push_back(name);
    if (value) argv_.push_back(*value);
    return *this;
  }
  operator std::vector<std::string>() const { return argv_; }  // NOLINT: passed where an argv goes

 private:
  std::vector<std::string> argv_;
};

}  // namespace overlay::test
