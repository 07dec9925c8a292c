// The crash-state model itself: which trees a power cut may leave, per persistence model.
#include "crash_state.hpp"

#include <set>

#include <gtest/gtest.h>

#include "overlay/file_ops.hpp"
#include "overlay/recording_disk.hpp"

#include "test_util.hpp"

using namespace overlay::test;
using namespace overlay::test::crash;

namespace {

const fs::path kRoot = "/w";

Tree empty_root() { return Tree{{"", Node{'d', 0755, ""}}}; }

TraceOp op(std::string o, std::string path, std::string path2 = "", std::string data = "", std::uint64_t offset = 0) {
  TraceOp t;
  t.op = std::move(o);
  t.path = kRoot.string() + path;
  t.path2 = path2.empty() || path2[0] != '/' ? path2 : kRoot.string() + path2;
  t.data = std::move(data);
  t.size = t.data.size();
  t.offset = offset;
  t.mode = 0644;
  return t;
}

// Every distinct tree a cut after `prefix` ops may leave, as "path=content" sets.
std::set<std::string> states(const Trace& tr, std::size_t prefix, Model m) {
  std::set<std::string> out;
  auto p = tr.at(prefix, m);
  for (std::uint64_t n = 0; n < p.combinations(); ++n) {
    std::string s;
    for (const auto& [rel, node] : p.materialize(p.nth(n)))
      if (!rel.empty()) s += rel + "=" + (node.type == 'd' ? "<dir>" : node.data) + ";";
    out.insert(s);
  }
  return out;
}

std::vector<TraceOp> lockfile_write(const std::string& data, bool sync_data, bool sync_dir) {
  std::vector<TraceOp> ops = {op("create", "/m.lock", "truncate"), op("write", "/m.lock", "", data)};
  if (sync_data) ops.push_back(op("fsync", "/m.lock"));
  ops.push_back(op("close", "/m.lock"));
  ops.push_back(op("rename", "/m.lock", "/m"));
  if (sync_dir) ops.push_back(op("fsync", "", "dir"));
  return ops;
}

}  // namespace

TEST(CrashModel, DurableLockfileWriteLeavesOneStateAfterItsDirectoryFsync) {
  Trace tr(kRoot, empty_root(), lockfile_write("new", true, true));
  EXPECT_EQ(states(tr, tr.size(), Model::writeback), (std::set<std::string>{"m=new;"}));
  // Before the directory fsync, the rename (and the lock file's create) may each be lost.
  EXPECT_EQ(states(tr, tr.size() - 1, Model::writeback), (std::set<std::string>{"m=new;", "m.lock=new;", ""}));
  EXPECT_EQ(states(tr, 0, Model::ordered), (std::set<std::string>{""}));
}

TEST(CrashModel, UnsyncedDataIsLostOrCutAtFourKiBOrZeroedUnderWriteback) {
  std::string data(10000, 'x');
  std::vector<TraceOp> ops = {op("create", "/f", "exclusive"), op("write", "/f", "", data), op("close", "/f"),
                              op("fsync", "", "dir")};
  Trace tr(kRoot, empty_root(), ops);
  std::set<std::string> want = {"f=" + data + ";", "f=;", "f=" + data.substr(0, 4096) + ";",
                                "f=" + data.substr(0, 8192) + ";"};
  EXPECT_EQ(states(tr, tr.size(), Model::ordered), want);
  want.insert("f=" + std::string(10000, '\0') + ";");
  EXPECT_EQ(states(tr, tr.size(), Model::writeback), want);
}

TEST(CrashModel, OrderedModeBringsDataWithASurvivingRenameWritebackDoesNot) {
  // Written, not fsynced, renamed over an old file, the directory fsynced.
  Tree t = empty_root();
  t["m"] = Node{'f', 0644, "old"};
  Trace tr(kRoot, t, lockfile_write("new", false, true));
  EXPECT_EQ(states(tr, tr.size(), Model::ordered), (std::set<std::string>{"m=new;"}));
  EXPECT_EQ(states(tr, tr.size(), Model::writeback),
            (std::set<std::string>{"m=new;", "m=;", std::string("m=\0\0\0;", 6)}));
}

TEST(CrashModel, SyncfsMakesEverythingDurableAndAChmodMayBeLostBeforeIt) {
  Tree t = empty_root();
  t["d"] = Node{'d', 0700, ""};
  std::vector<TraceOp> ops = {op("mkdir", "/d/e"), op("chmod", "/d"), op("syncfs", "/d")};
  ops[1].mode = 0755;
  Trace tr(kRoot, t, ops);
  auto before = tr.at(2, Model::ordered);
  std::set<unsigned> modes;
  for (std::uint64_t n = 0; n < before.combinations(); ++n)
    modes.insert(before.materialize(before.nth(n)).at("d").mode);
  EXPECT_EQ(modes, (std::set<unsigned>{0700, 0755}));
  EXPECT_EQ(before.combinations(), 4u);  // the mkdir and the chmod, each kept or lost
  EXPECT_EQ(tr.at(3, Model::ordered).combinations(), 1u);
}

TEST(CrashModel, OperationsInsideARenamedDirectoryFollowItsInode) {
  Tree t = empty_root();
  t["c"] = Node{'d', 0755, ""};
  t["c/1"] = Node{'f', 0644, "one"};
  // As add-native moves a cache aside and deletes it: rename, fsync of the parent, unlinks.
  std::vector<TraceOp> ops = {op("rename", "/c", "/.trash"), op("fsync", "", "dir"), op("remove", "/.trash/1"),
                              op("remove", "/.trash")};
  Trace tr(kRoot, t, ops);
  EXPECT_EQ(states(tr, tr.size(), Model::ordered),
            (std::set<std::string>{"", ".trash=<dir>;", ".trash=<dir>;.trash/1=one;"}));
}

// The model replays a real RecordingDisk trace to exactly the tree the real disk has.
TEST(CrashModel, ReplayOfARealTraceEqualsTheRealTree) {
  TempDir t;
  fs::create_directory(t / "w");
  write_file(t / "w/old", "old bytes");
  Tree before = read_tree(t / "w");
  std::string trace;
  overlay::RecordingDisk rec(overlay::real_disk(), overlay::RecordData::bytes,
                             [&](const overlay::DiskOp& o) { trace += overlay::to_line(o) + "\n"; });
  overlay::make_dirs(rec, t / "w/a/b");
  overlay::write_file_atomically(rec, t / "w/a/b/f", std::string(9000, 'q'), 0600);
  rec.rename(t / "w/old", t / "w/a/old");
  rec.set_mode(t / "w/a", 0711);
  rec.remove(t / "w/a/old");
  Trace tr(t / "w", before, parse_trace(trace));
  EXPECT_EQ(tree_diff(read_tree(t / "w"), tr.final_tree()), "");
  EXPECT_GT(tr.at(tr.size() - 1, Model::ordered).combinations(), 1u);  // the chmod and the unlink are unsynced
}

// An exchange (renameat2 RENAME_EXCHANGE) is one unit: both names swapped, or neither — never
// one name holding both inodes or one name lost.
TEST(CrashModel, ExchangeSwapsBothNamesOrNeither) {
  Tree initial = empty_root();
  initial["a"] = Node{'d', 0755, ""};
  initial["a/x"] = Node{'f', 0644, "one"};
  initial["b"] = Node{'f', 0644, "two"};
  std::vector<TraceOp> ops = {op("exchange", "/a/x", "/b"), op("fsync", "", "dir")};
  Trace tr(kRoot, initial, ops);
  EXPECT_EQ(states(tr, 1, Model::writeback),
            (std::set<std::string>{"a=<dir>;a/x=one;b=two;", "a=<dir>;a/x=two;b=one;"}));
  // Durable once the second name's directory is fsynced.
  EXPECT_EQ(states(tr, 2, Model::ordered), (std::set<std::string>{"a=<dir>;a/x=two;b=one;"}));
}
