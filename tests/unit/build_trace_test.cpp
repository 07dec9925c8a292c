// The tracer, the recorder, the inputs key and the way back, each on its own: real processes
// traced by this test process, real files.
#include "overlay/build_trace.hpp"

#include <unistd.h>

#include <fstream>
#include <map>
#include <optional>
#include <set>

#include <gtest/gtest.h>

#include "overlay/build_changes.hpp"
#include "overlay/build_inputs.hpp"
#include "overlay/error.hpp"
#include "overlay/file_ops.hpp"
#include "overlay/store.hpp"
#include "overlay/traced_build.hpp"

#include "test_util.hpp"

using namespace overlay;
using namespace overlay::test;

namespace {

// Every event, one line each: "look PATH BITS", "change PATH KIND", "exec PATH", "unobservable WHY".
struct Events final : TraceListener {
  std::vector<std::string> lines;
  void looked(const std::string& path, Follow, unsigned how) override {
    lines.push_back("look " + path + " " + std::to_string(how));
  }
  void changing(const std::string& path, Change how, Follow) override {
    lines.push_back("change " + path + " " + std::to_string(static_cast<int>(how)));
  }
  void executed(const std::string& path) override { lines.push_back("exec " + path); }
  void unobservable(const std::string& why) override { lines.push_back("unobservable " + why); }
  bool has(const std::string& prefix) const {
    for (const auto& l : lines)
      if (l.rfind(prefix, 0) == 0) return true;
    return false;
  }
};

#define SKIP_UNLESS_TRACEABLE()                                                    \
  do {                                                                             \
    if (std::string why_ = why_untraceable(); !why_.empty()) GTEST_SKIP() << why_; \
  } while (0)

std::string kind(Change c) { return std::to_string(static_cast<int>(c)); }

}  // namespace

TEST(BuildTrace, SeesEveryLookAndChangeOfEveryProcessBeforeItHappens) {
  SKIP_UNLESS_TRACEABLE();
  TempDir t;
  write_file(t / "in.txt", "x");
  write_file(t / "gone.txt", "x");
  write_file(t / "a", "x");
  write_file(t / "d/e", "x");
  std::string script = "cd " + t.path().string() +
                       " && cat in.txt > out.txt && ls d > /dev/null && rm gone.txt && mv a b && test -e absent;"
                       " echo more >> out.txt; touch -d 2000-01-01 in.txt; mkdir nd && rmdir nd; exit 3";
  Events ev;
  TraceOutcome o = trace_program({"sh", "-c", script}, ev);
  EXPECT_EQ(o.untraced, "");
  EXPECT_EQ(o.exit_code, 3);
  std::string d = t.path().string();
  EXPECT_TRUE(ev.has("look " + d + "/in.txt " + std::to_string(kLookedContent)));
  EXPECT_TRUE(ev.has("change " + d + "/out.txt " + kind(Change::content)));
  EXPECT_TRUE(ev.has("change " + d + "/out.txt " + kind(Change::append)));
  EXPECT_TRUE(ev.has("look " + d + "/d " + std::to_string(kLookedListing)));
  EXPECT_TRUE(ev.has("change " + d + "/gone.txt " + kind(Change::remove)));
  EXPECT_TRUE(ev.has("change " + d + "/a " + kind(Change::rename_from)));
  EXPECT_TRUE(ev.has("change " + d + "/b " + kind(Change::rename_to)));
  EXPECT_TRUE(ev.has("look " + d + "/absent"));
  EXPECT_TRUE(ev.has("change " + d + "/in.txt " + kind(Change::meta)));
  EXPECT_TRUE(ev.has("change " + d + "/nd " + kind(Change::create)));
  EXPECT_TRUE(ev.has("change " + d + "/nd " + kind(Change::remove)));
  EXPECT_TRUE(ev.has("exec "));  // sh, cat, ls, rm, mv, test or touch by their real paths
  EXPECT_FALSE(ev.has("unobservable")) << ::testing::PrintToString(ev.lines);
}

TEST(BuildTrace, AProgramThatCannotStartIsSaidAndRunsNothing) {
  SKIP_UNLESS_TRACEABLE();
  Events ev;
  TraceOutcome o = trace_program({"/nonexistent/prog"}, ev);
  EXPECT_NE(o.exec_error.find("cannot run /nonexistent/prog"), std::string::npos) << o.exec_error;
}

TEST(BuildTrace, ProcessesLeftRunningAreKilledNotLeftUntraced) {
  SKIP_UNLESS_TRACEABLE();
  TempDir t;
  Events ev;
  std::string pidfile = (t / "pid").string();
  TraceOutcome o = trace_program({"sh", "-c", "sleep 100 & echo $! > " + pidfile + "; exit 0"}, ev);
  EXPECT_EQ(o.exit_code, 0);
  EXPECT_EQ(o.left_running, 1);
  pid_t left = std::stoi(read_file(t / "pid"));
  EXPECT_FALSE(process_alive(left));
}

TEST(BuildTrace, AConnectionOutOfTheBuildIsUnobservable) {
  SKIP_UNLESS_TRACEABLE();
  if (!have({"/usr/bin/python3", "-c", "pass"})) GTEST_SKIP() << "needs python3";
  Events ev;
  trace_program({"/usr/bin/python3", "-c",
                 "import socket\ns=socket.socket()\ntry: s.connect(('127.0.0.1', 9))\nexcept OSError: pass"},
                ev);
  EXPECT_TRUE(ev.has("unobservable a process connected to the network"));
}

TEST(TraceRecorder, KeepsWhatEachChangeReplacedBeforeItHappens) {
  SKIP_UNLESS_TRACEABLE();
  TempDir t;
  write_file(t / "b/changed.o", "old bytes");
  write_file(t / "b/removed.o", "removed bytes");
  write_file(t / "b/log", "line1\n");
  write_file(t / "b/tracked.so", "tracked");
  write_file(t / "b/in.h", "header");
  write_file(t / "skip/x", "x");
  TraceRequest req;
  req.backups = t / "bk";
  req.backup_prefix = "c0-";
  req.skipped = {t / "skip"};
  req.tracked = {t / "b/tracked.so"};
  make_dirs(real_disk(), req.backups);
  TraceRecorder rec(real_disk(), req, nullptr);
  std::string b = (t / "b").string();
  TraceOutcome o =
      trace_program({"sh", "-c",
                     "cd " + b +
                         " && cat in.h > /dev/null && echo new > changed.o && rm removed.o && echo l2 >> log && "
                         "echo t > tracked.so && echo n > made.o && echo s > ../skip/x && cat made.o > /dev/null"},
                    rec);
  ASSERT_EQ(o.exit_code, 0);
  BuildTrace tr = rec.take();
  EXPECT_TRUE(tr.complete()) << ::testing::PrintToString(tr.unobservable);
  std::map<std::string, TracedChange> ch;
  for (const auto& c : tr.changes) ch[c.path] = c;
  ASSERT_EQ(ch.count(b + "/changed.o"), 1u);
  EXPECT_EQ(read_file(req.backups / ch[b + "/changed.o"].backup), "old bytes");
  EXPECT_EQ(read_file(req.backups / ch[b + "/removed.o"].backup), "removed bytes");  // a link: the name went
  EXPECT_TRUE(ch[b + "/log"].appended);
  EXPECT_FALSE(ch[b + "/changed.o"].appended);
  EXPECT_TRUE(ch[b + "/tracked.so"].tracked);
  EXPECT_EQ(ch[b + "/tracked.so"].backup, "");
  EXPECT_EQ(ch[b + "/made.o"].before.type, FileType::none);
  EXPECT_EQ(ch.count((t / "skip/x").string()), 0u);
  std::set<std::string> inputs;
  for (const auto& i : tr.inputs) inputs.insert(i.path);
  EXPECT_EQ(inputs.count(b + "/in.h"), 1u);
  EXPECT_EQ(inputs.count(b + "/made.o"), 0u) << "the build's own output is no input";
}

TEST(BuildInputs, BytesNotStampsModeListingAndLinkTargetsDecide) {
  TempDir t;
  Disk& disk = real_disk();
  write_file(t / "h.h", "#define A 1\n");
  write_file(t / "tool", "#!/bin/sh\n", 0755);
  write_file(t / "d/one", "1");
  fs::create_symlink("h.h", t / "link");
  DigestCache cache(disk, {});
  auto input = [&](const std::string& name, unsigned looked, Follow follow = Follow::yes) {
    FileInfo fi = disk.info(t / name, follow);
    BuildInput i;
    i.path = (t / name).string(), i.follow = follow, i.looked = looked, i.type = fi.type, i.size = fi.size;
    i.mtime_ns = fi.mtime.tv_sec * 1000000000LL + fi.mtime.tv_nsec, i.mode = fi.mode;
    if (fi.type == FileType::regular && (looked & (kLookedContent | kLookedExec))) i.sha256 = hash_file(disk, t / name);
    if (fi.type == FileType::directory) i.listing = listing_digest(disk, t / name, {});
    if (fi.type == FileType::symlink) i.target = disk.read_link(t / name);
    return i;
  };
  std::vector<BuildInput> in = {input("h.h", kLookedContent), input("tool", kLookedExec | kLookedContent),
                                input("d", kLookedListing), input("link", kLookedTarget, Follow::no),
                                input("absent", kLookedMeta)};
  EXPECT_EQ(first_difference(disk, in, cache, {}), "");
  ASSERT_EQ(run({"cp", "-p", (t / "h.h").string(), (t / "h.old").string()}).rc, 0);
  write_file(t / "h.h", "#define A 2\n");
  ASSERT_EQ(run({"touch", "-r", (t / "h.old").string(), (t / "h.h").string()}).rc, 0);
  EXPECT_EQ(first_difference(disk, in, cache, {}), (t / "h.h").string() + ": its bytes changed");
  in[0] = input("h.h", kLookedContent);
  fs::permissions(t / "tool", fs::perms::owner_read | fs::perms::owner_write);
  EXPECT_EQ(first_difference(disk, in, cache, {}), (t / "tool").string() + ": its mode changed");
  fs::permissions(t / "tool", fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                                  fs::perms::others_read | fs::perms::others_exec);
  write_file(t / "d/two", "2");
  EXPECT_EQ(first_difference(disk, in, cache, {}), (t / "d").string() + ": its entries changed");
  EXPECT_EQ(first_difference(disk, in, cache, {t / "d/two"}), "") << "a name below a skipped root is no entry";
  fs::remove(t / "d/two");
  fs::remove(t / "link");
  fs::create_symlink("h.old", t / "link");
  EXPECT_EQ(first_difference(disk, in, cache, {}), (t / "link").string() + ": it points elsewhere now");
  fs::remove(t / "link");
  fs::create_symlink("h.h", t / "link");
  write_file(t / "absent", "");
  EXPECT_EQ(first_difference(disk, in, cache, {}), (t / "absent").string() + " was missing, now a file");
}

TEST(DigestCache, RemembersOnlyWhatAStampCanVouchFor) {
  TempDir t;
  Disk& disk = real_disk();
  write_file(t / "old", "aged");
  timespec past{::time(nullptr) - 100, 0};
  disk.set_mtime(t / "old", past);  // the ctime stays now: too fresh to vouch for
  write_file(t / "fresh", "fresh");
  {
    DigestCache c(disk, t / "digests.json");
    EXPECT_EQ(c.sha256(t / "fresh", disk.info(t / "fresh", Follow::yes)), file_sha256(t / "fresh"));
    c.save();
  }
  // Nothing written: no entry could be vouched for (each ctime is within two seconds).
  EXPECT_FALSE(fs::exists(t / "digests.json"));
  // A file changed in place keeps no digest of its old bytes: its ctime moved.
  ::sleep(3);
  DigestCache c(disk, t / "digests.json");
  EXPECT_EQ(c.sha256(t / "fresh", disk.info(t / "fresh", Follow::yes)), file_sha256(t / "fresh"));
  c.save();
  ASSERT_TRUE(fs::exists(t / "digests.json"));
  write_file(t / "fresh", "FRESH");  // same size
  DigestCache again(disk, t / "digests.json");
  EXPECT_EQ(again.sha256(t / "fresh", disk.info(t / "fresh", Follow::yes)), file_sha256(t / "fresh"));
}

TEST(BuildChanges, PutEveryPathBackAsItWasAndLeaveWhatOthersChanged) {
  SKIP_UNLESS_TRACEABLE();
  TempDir t;
  Disk& disk = real_disk();
  fs::path ov = t / "ov", b = t / "b";
  write_file(b / "changed.o", "old");
  write_file(b / "removed.o", "removed");
  write_file(b / "other.o", "other");
  write_file(b / "olddir/f", "f");
  fs::create_symlink("changed.o", b / "link");
  timespec past{1000000000, 5};
  for (auto n : {"changed.o", "removed.o", "other.o", "olddir/f"}) disk.set_mtime(b / n, past);
  std::string before = tree_digest(b);
  TraceRequest req;
  req.backups = ov / "_native_backup/e/build";
  make_dirs(disk, req.backups);
  TraceRecorder rec(disk, req, nullptr);
  TraceOutcome o =
      trace_program({"sh", "-c",
                     "cd " + b.string() +
                         " && echo new > changed.o && rm removed.o && mkdir -p newdir && echo n > newdir/made.o && "
                         "rm olddir/f && rmdir olddir && rm link && ln -s other.o link && echo x > other.o"},
                    rec);
  ASSERT_EQ(o.exit_code, 0);
  BuildTrace tr = rec.take();
  auto changes = build_changes_of(disk, tr.changes, req.backups, "_native_backup/e/build");
  BackupStore store(disk, ov);
  EXPECT_EQ(why_not_restorable(disk, store.paths(), changes), "");
  write_file(b / "other.o", "someone else's");  // changed since the build: left, named
  EXPECT_EQ(why_not_restorable(disk, store.paths(), changes),
            (b / "other.o").string() + " changed since the build, by another build or by hand");
  std::vector<std::string> left;
  for (const auto& r : restore_build_changes(disk, store, changes, false)) {
    EXPECT_TRUE(r.problem.empty() || r.left) << r.path << ": " << r.problem;
    if (r.left) left.push_back(r.path);
  }
  EXPECT_EQ(left, std::vector<std::string>{(b / "other.o").string()});
  write_file(b / "other.o", "other");
  disk.set_mtime(b / "other.o", past);
  EXPECT_EQ(tree_digest(b), before);
  EXPECT_EQ(disk.info(b / "changed.o", Follow::no).mtime.tv_nsec, 5) << "its mtime came back too";
  EXPECT_FALSE(fs::exists(b / "newdir"));
  // Once back, nothing more to do: a second pass changes nothing.
  for (const auto& r : restore_build_changes(disk, store, changes, false))
    EXPECT_TRUE(r.action == "unchanged" || r.action == "restore") << r.path << " " << r.action << " " << r.problem;
  EXPECT_EQ(tree_digest(b), before);
}

// What the build read of a path it had changed in place (touch, a write without O_TRUNC, chmod, a
// mkdir where the directory is) is still an input, by what it was before: only a path the build
// made or replaced whole is its own output.
TEST(TraceRecorder, APathChangedInPlaceIsStillAnInputByWhatItWasBefore) {
  SKIP_UNLESS_TRACEABLE();
  TempDir t;
  write_file(t / "b/cfg.h", "#define C 1\n");
  write_file(t / "b/out/x", "x");
  TraceRequest req;
  req.backups = t / "bk";
  make_dirs(real_disk(), req.backups);
  TraceRecorder rec(real_disk(), req, nullptr);
  std::string b = (t / "b").string();
  ASSERT_EQ(trace_program({"sh", "-c",
                           "cd " + b +
                               " && touch cfg.h && cat cfg.h > /dev/null && mkdir -p out && ls out > /dev/null"
                               " && echo o > made.o && cat made.o > /dev/null"},
                          rec)
                .exit_code,
            0);
  BuildTrace tr = rec.take();
  std::map<std::string, TracedInput> in;
  for (const auto& i : tr.inputs) in[i.path] = i;
  ASSERT_EQ(in.count(b + "/cfg.h"), 1u) << "a touched file's bytes were read: an input";
  EXPECT_EQ(in[b + "/cfg.h"].sha256, file_sha256(t / "b/cfg.h"));
  ASSERT_EQ(in.count(b + "/out"), 1u);
  EXPECT_NE(in[b + "/out"].listing, "") << "a directory mkdir -p found there, then listed: an input";
  EXPECT_EQ(in.count(b + "/made.o"), 0u) << "what the build made is no input";
}

// A hard-linked name removed: its bytes are kept by a copy, for the inode lives on at its other
// name, where the build then writes.
TEST(TraceRecorder, ARemovedNameWithOtherNamesIsCopiedNotLinked) {
  SKIP_UNLESS_TRACEABLE();
  TempDir t;
  write_file(t / "b/k.txt", "original");
  TraceRequest req;
  req.backups = t / "bk";
  make_dirs(real_disk(), req.backups);
  TraceRecorder rec(real_disk(), req, nullptr);
  std::string b = (t / "b").string();
  ASSERT_EQ(trace_program({"sh", "-c", "cd " + b + " && ln k.txt k2.txt && rm k.txt && echo changed > k2.txt"}, rec)
                .exit_code,
            0);
  std::string kept;
  for (const auto& c : rec.take().changes)
    if (c.path == b + "/k.txt") kept = read_file(req.backups / c.backup);
  EXPECT_EQ(kept, "original");
}

// A write through the process's own descriptors (/proc/self/fd/N, /dev/fd/N) lands on the file the
// descriptor is open on: that file's change is recorded, its bytes kept.
TEST(TraceRecorder, AWriteThroughProcSelfFdIsTheFilesChange) {
  SKIP_UNLESS_TRACEABLE();
  TempDir t;
  write_file(t / "ro.txt", "before");
  TraceRequest req;
  req.backups = t / "bk";
  req.skipped = {"/proc", "/dev"};
  make_dirs(real_disk(), req.backups);
  TraceRecorder rec(real_disk(), req, nullptr);
  ASSERT_EQ(trace_program({"bash", "-c", "exec 3<" + (t / "ro.txt").string() + "; echo hacked > /proc/self/fd/3"}, rec)
                .exit_code,
            0);
  bool kept = false;
  for (const auto& c : rec.take().changes)
    if (c.path == (t / "ro.txt").string()) kept = read_file(req.backups / c.backup) == "before";
  EXPECT_TRUE(kept) << "the write through /proc/self/fd went unrecorded";
}

// Many short-lived processes: none is counted left running, and no pid the build's processes had
// is killed once they are gone (the kernel may have given it to another process).
TEST(BuildTrace, ProcessesThatEndedAreNeverCountedLeftRunning) {
  SKIP_UNLESS_TRACEABLE();
  Events ev;
  TraceOutcome o = trace_program({"sh", "-c", "for i in $(seq 300); do /bin/true & done; wait"}, ev);
  EXPECT_EQ(o.exit_code, 0);
  EXPECT_EQ(o.left_running, 0);
}

// A file the build replaced by a directory, a chmod, and a same-size rewrite with its mtime put
// back: each goes back as it was.
TEST(BuildChanges, AFileMadeADirectoryAModeAndASameStampRewriteGoBack) {
  SKIP_UNLESS_TRACEABLE();
  TempDir t;
  Disk& disk = real_disk();
  fs::path ov = t / "ov", b = t / "b";
  write_file(b / "lib", "a file");
  write_file(b / "script", "#!/bin/sh\n", 0644);
  write_file(b / "same", "AAAA");
  std::string before = tree_digest(b);
  TraceRequest req;
  req.backups = ov / "_native_backup/e/build";
  make_dirs(disk, req.backups);
  TraceRecorder rec(disk, req, nullptr);
  ASSERT_EQ(trace_program({"sh", "-c",
                           "cd " + b.string() +
                               " && rm lib && mkdir lib && chmod 0755 script && touch -r same same.ref && "
                               "printf BBBB > same && touch -r same.ref same && rm same.ref"},
                          rec)
                .exit_code,
            0);
  BuildTrace tr = rec.take();
  auto changes = build_changes_of(disk, tr.changes, req.backups, "_native_backup/e/build");
  BackupStore store(disk, ov);
  for (const auto& r : restore_build_changes(disk, store, changes, false))
    EXPECT_TRUE(r.problem.empty()) << r.path << ": " << r.problem;
  EXPECT_EQ(tree_digest(b), before);
}

namespace {

// Ninja's log after a traced build wrote gen.h and its records (one relative, one absolute, as
// CMake names a custom command's output) and another build then appended one of its own, once the
// revert put gen.h back; `header` opens the log, `with_build_ninja` says whether build.ninja
// stands beside it (else the log was kept apart from it: `builddir`). nullopt: the log is gone.
std::optional<std::string> ninja_log_after_revert(const std::string& header, bool with_build_ninja,
                                                  const std::string& artifact = "") {
  TempDir t;
  Disk& disk = real_disk();
  fs::path ov = t / "ov", b = t / "b";
  if (with_build_ninja) write_file(b / "build.ninja", "# a graph\n");
  write_file(b / "gen.h", "#define G 1\n");
  write_file(b / ".ninja_log", header + "1\t2\t100\tother.o\tbeef\n");
  TraceRequest req;
  req.backups = ov / "_native_backup/e/build";
  make_dirs(disk, req.backups);
  TraceRecorder rec(disk, req, nullptr);
  const std::string records = "3\t4\t200\tgen.h\tcafe\n3\t4\t200\t" + (b / "gen.h").string() + "\tcafe\n";
  EXPECT_EQ(
      trace_program(
          {"sh", "-c", "cd " + b.string() + " && echo '#define G 2' > gen.h && printf '" + records + "' >> .ninja_log"},
          rec)
          .exit_code,
      0);
  BuildTrace tr = rec.take();
  auto changes = build_changes_of(disk, tr.changes, req.backups, "_native_backup/e/build");
  std::ofstream(b / ".ninja_log", std::ios::app) << "5\t6\t300\tkb.o\tf00d\n";  // another build's, since
  BackupStore store(disk, ov);
  std::set<std::string> actions;
  std::vector<fs::path> items;
  if (!artifact.empty()) items.push_back(b / artifact);
  for (const auto& r : restore_build_changes(disk, store, changes, false, items)) {
    EXPECT_TRUE(r.problem.empty() || r.left) << r.path << ": " << r.problem;
    if (fs::path(r.path).filename() == ".ninja_log") actions.insert(r.left ? "left" : r.action);
  }
  EXPECT_EQ(read_file(b / "gen.h"), "#define G 1\n");
  if (!fs::exists(b / ".ninja_log")) {
    EXPECT_EQ(actions, (std::set<std::string>{"left", "discard"}));
    return std::nullopt;
  }
  EXPECT_EQ(actions, (std::set<std::string>{"left", "forget"}));
  return read_file(b / ".ninja_log");
}

}  // namespace

// A restat rule's output is judged by the mtime Ninja's log recorded: gen.h put back while the log
// (another build wrote it since: left) kept the record of the build that made it would never be
// remade. Its records go, both spellings; every other line stays.
TEST(BuildChanges, AnOutputPutBackLosesItsRecordsInANinjaLogLeftAsItIs) {
  SKIP_UNLESS_TRACEABLE();
  EXPECT_EQ(ninja_log_after_revert("# ninja log v5\n", true),
            "# ninja log v5\n1\t2\t100\tother.o\tbeef\n5\t6\t300\tkb.o\tf00d\n");
}

// The entry's own artifact (`--artifact`, put back by the revert beside the build's changes) loses
// its records too: an object named as the artifact would otherwise keep a later build's deps.
TEST(BuildChanges, AnArtifactPutBackLosesItsRecordsToo) {
  SKIP_UNLESS_TRACEABLE();
  EXPECT_EQ(ninja_log_after_revert("# ninja log v5\n", true, "other.o"), "# ninja log v5\n5\t6\t300\tkb.o\tf00d\n");
}

// A log this cannot read record by record (an unknown header), or one apart from build.ninja (its
// relative names are not relative to it), goes whole: Ninja starts over rather than trust it.
TEST(BuildChanges, ANinjaLogNotReadRecordByRecordGoesWhole) {
  SKIP_UNLESS_TRACEABLE();
  EXPECT_EQ(ninja_log_after_revert("# some other log v1\n", true), std::nullopt);
  EXPECT_EQ(ninja_log_after_revert("# ninja log v5\n", false), std::nullopt);
}
