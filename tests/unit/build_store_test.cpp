// The build store on its own (issue 64): a record kept from a trace is found while every input is
// as it was, missed with the input named once one differs, served byte-exact, and dropped when a
// copy in it no longer hashes to its digest. The binary's tests drive it through add-native.
#include "overlay/build_store.hpp"

#include <sys/utsname.h>

#include <cstdlib>

#include <gtest/gtest.h>

#include "overlay/build_trace.hpp"
#include "overlay/hash.hpp"
#include "overlay/pinned.hpp"

#include "test_util.hpp"

using namespace overlay;
using namespace overlay::test;

namespace {

// An install whose build read header.h and wrote lib.so, one patched source swapped in.
struct StoreFixture {
  TempDir t;
  fs::path inst = t / "inst", src = inst / "kernel.c", header = inst / "header.h", lib = inst / "lib.so";
  NativePlan plan;
  BuildTrace trace;

  StoreFixture() {
    write_file(src, "int k(void) { return 2; }\n");
    write_file(header, "#define K 2\n");
    write_file(lib, "built from the patched source\n");
    fs::create_directories(t / "ov");
    plan.overlay = t / "ov";
    plan.swaps.push_back({src, t / "patched.c", sha256_hex(read_file(src)), SwapKind::modify, 0644});
    plan.artifacts = {lib};
    plan.build_cmds = {{"make", "-C", inst.string()}};
    plan.build_cwd = inst;
    plan.state_dir = t / "state";
    TracedInput read;
    read.path = header.string();
    read.looked = kLookedMeta | kLookedContent;
    read.before = state_of(real_disk().info(header, Follow::yes));
    trace.inputs.push_back(read);
    TracedChange wrote;
    wrote.path = lib.string();
    wrote.before.type = FileType::regular;
    trace.changes.push_back(wrote);
  }

  std::vector<BuildInput> inputs(BuildStore& store) {
    std::vector<BuildInput> out;
    fs::create_directories(t / "backups");
    EXPECT_EQ(key_inputs(real_disk(), trace, t / "backups", {src.string()}, store.digests(), out), "");
    return out;
  }
};

}  // namespace

TEST(BuildStore, AKeptRecordIsFoundWhileItsInputsAreAsTheyWere) {
  StoreFixture f;
  BuildStore store(real_disk(), f.plan.state_dir);
  ASSERT_TRUE(store.enabled());
  EXPECT_FALSE(store.find(f.plan, {}).hit.has_value());  // nothing kept yet
  ASSERT_EQ(store.keep(f.plan, f.trace, f.inputs(store), "e1", {}), "");
  StoreLookup found = store.find(f.plan, {});
  ASSERT_TRUE(found.hit.has_value()) << found.miss;
  EXPECT_EQ(found.hit->entry, "e1");
  ASSERT_EQ(found.hit->changes.size(), 1u);
  EXPECT_EQ(found.hit->changes[0].path, f.lib.string());
  EXPECT_EQ(found.hit->changes[0].sha256, sha256_hex(read_file(f.lib)));
}

TEST(BuildStore, AChangedInputIsAMissThatNamesIt) {
  StoreFixture f;
  BuildStore store(real_disk(), f.plan.state_dir);
  ASSERT_EQ(store.keep(f.plan, f.trace, f.inputs(store), "e1", {}), "");
  write_file(f.header, "#define K 3\n");
  StoreLookup found = store.find(f.plan, {});
  EXPECT_FALSE(found.hit.has_value());
  EXPECT_NE(found.miss.find(f.header.string()), std::string::npos) << found.miss;
}

TEST(BuildStore, AnotherRecipeIsAMiss) {
  StoreFixture f;
  BuildStore store(real_disk(), f.plan.state_dir);
  ASSERT_EQ(store.keep(f.plan, f.trace, f.inputs(store), "e1", {}), "");
  f.plan.build_cmds = {{"make", "-j8", "-C", f.inst.string()}};
  EXPECT_FALSE(store.find(f.plan, {}).hit.has_value());
}

TEST(BuildStore, AServedRecordPutsTheBuildsBytesBack) {
  StoreFixture f;
  BuildStore store(real_disk(), f.plan.state_dir);
  ASSERT_EQ(store.keep(f.plan, f.trace, f.inputs(store), "e1", {}), "");
  std::string built = read_file(f.lib);
  StoreLookup found = store.find(f.plan, {});
  ASSERT_TRUE(found.hit.has_value()) << found.miss;
  write_file(f.lib, "the stock library\n");
  TraceRequest req;
  req.backups = f.t / "serve-backups";
  fs::create_directories(req.backups);
  TraceRecorder recorder(real_disk(), req, nullptr);
  EXPECT_EQ(store.serve(*found.hit, {}, recorder), "");
  EXPECT_EQ(read_file(f.lib), built);
  BuildTrace noted = recorder.take();
  ASSERT_EQ(noted.changes.size(), 1u);  // what serve replaced is kept, for revert
  EXPECT_EQ(noted.changes[0].path, f.lib.string());
  EXPECT_EQ(read_file(req.backups / noted.changes[0].backup), "the stock library\n");
}

TEST(BuildStore, ATornRecordIsNeverServedAndGoes) {
  StoreFixture f;
  BuildStore store(real_disk(), f.plan.state_dir);
  ASSERT_EQ(store.keep(f.plan, f.trace, f.inputs(store), "e1", {}), "");
  StoreLookup found = store.find(f.plan, {});
  ASSERT_TRUE(found.hit.has_value()) << found.miss;
  write_file(found.hit->where / found.hit->changes[0].blob, "flipped bytes\n", 0600);
  write_file(f.lib, "the stock library\n");
  TraceRequest req;
  req.backups = f.t / "serve-backups";
  TraceRecorder recorder(real_disk(), req, nullptr);
  EXPECT_NE(store.serve(*found.hit, {}, recorder), "");
  EXPECT_EQ(read_file(f.lib), "the stock library\n");  // nothing went in
  EXPECT_FALSE(store.find(f.plan, {}).hit.has_value());
}

TEST(BuildStore, AnIncompleteTraceIsNeverKept) {
  StoreFixture f;
  BuildStore store(real_disk(), f.plan.state_dir);
  f.trace.unobservable.push_back("a read through io_uring");
  std::string why = store.keep(f.plan, f.trace, {}, "e1", {});
  EXPECT_NE(why.find("io_uring"), std::string::npos) << why;
  EXPECT_FALSE(store.find(f.plan, {}).hit.has_value());
}

// What uname(2) returns is the machine's key: a `uname -r`-selected tree (DKMS-style modules)
// built before a reboot into another kernel is never served after it (issue 74).
TEST(BuildStore, TheMachineKeyHoldsWhatUnameReturns) {
  utsname u{};
  ASSERT_EQ(::uname(&u), 0);
  std::string key = machine_key(real_disk());
  for (const char* part : {u.machine, u.sysname, u.release, u.version})
    EXPECT_NE(key.find(part), std::string::npos) << part << " not in\n" << key;
}
