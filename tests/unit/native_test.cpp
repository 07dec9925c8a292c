#include "overlay/native.hpp"

#include <cstdlib>

#include <gtest/gtest.h>

#include "overlay/discover.hpp"
#include "overlay/error.hpp"
#include "overlay/holds.hpp"
#include "overlay/manifest.hpp"
#include "overlay/stack.hpp"
#include "overlay/status.hpp"

#include "faulty_disk.hpp"
#include "test_util.hpp"

using namespace overlay;
using namespace overlay::test;

namespace {

enum class Change { one_file, multi_file_diff };

struct Fixture {
  TempDir t;
  Install in = make_install(t / "inst");
  std::string before = with_header_to_delete();

  std::string with_header_to_delete() {
    write_file(in.root / "src/old.h", "#define OLD 1\n");
    return tree_digest(in.root);
  }

  // one_file: --target/--patched-file. multi_file_diff: --patch-root with a diff that modifies
  // the source, creates src/new.h and deletes src/old.h.
  AddNativeRequest request(Change change = Change::one_file) {
    write_file(t / "patched.cpp", "int kernel() { return 7; }\n");
    write_file(t / "multi.diff",
               "--- a/src/kernel.cpp\n+++ b/src/kernel.cpp\n@@ -1 +1 @@\n-int kernel() { return 4; }\n+int kernel() { "
               "return 7; }\n"
               "--- /dev/null\n+++ b/src/new.h\n@@ -0,0 +1 @@\n+#define NEW 1\n"
               "--- a/src/old.h\n+++ /dev/null\n@@ -1 +0,0 @@\n-#define OLD 1\n");
    AddNativeRequest r;
    r.overlay = t / "ov";
    if (change == Change::one_file) {
      r.targets = {in.source};
      r.patched_files = {t / "patched.cpp"};
    } else {
      r.patch = t / "multi.diff";
      r.patch_root = in.root;
    }
    r.artifacts = {in.artifact, in.root / "lib/created.so"};
    r.caches = {in.cache};
    r.build_cmds = {
        "sh -c 'echo rebuilt > lib/libk.so; touch lib/created.so; mkdir -p cache/new; echo x > cache/new/f'"};
    r.build_cwd = in.root;
    r.lock_timeout = 5;
    return r;
  }
};

void apply_and_build(Disk& disk, const AddNativeRequest& r) {
  NativePlan plan = plan_add_native(disk, r);
  AppliedEntry e = apply_native(disk, plan);
  EXPECT_TRUE(run_native_build(real_disk(), plan, e).ok);
}

}  // namespace

TEST(Native, ApplyVerifyRevertByteExact) {
  Fixture f;
  apply_and_build(real_disk(), f.request());
  EXPECT_EQ(read_file(f.in.source), "int kernel() { return 7; }\n");
  VerifyReport v = verify_native(real_disk(), f.t / "ov");
  EXPECT_TRUE(v.ok());
  ASSERT_EQ(v.items.size(), 2u);
  EXPECT_EQ(v.items[0].state, ArtifactState::rebuilt);
  EXPECT_EQ(v.items[1].state, ArtifactState::created);
  RevertReport r = revert_natives(real_disk(), f.t / "ov", {});
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(r.entries_reverted, 1u);
  EXPECT_EQ(tree_digest(f.in.root), f.before);
  EXPECT_TRUE(load_manifest(real_disk(), f.t / "ov")->natives.empty());
  EXPECT_TRUE(fs::is_empty(f.t / "ov/_native_backup"));
}

TEST(Native, PlanTouchesNothing) {
  Fixture f;
  AddNativeRequest r = f.request();
  r.targets = {f.in.root / "missing.cpp"};
  EXPECT_THROW(plan_add_native(real_disk(), r), Error);
  EXPECT_FALSE(fs::exists(f.t / "ov"));
  EXPECT_EQ(tree_digest(f.in.root), f.before);
}

// Every mutating disk operation of add-native fails in turn; after each failure, revert
// (with a healthy disk) must bring the install back exactly. Both cache snapshot kinds.
long sweep_add(CacheSnapshot mode, Change change = Change::one_file) {
  FaultyDisk counter(real_disk());
  {
    Fixture g;
    AddNativeRequest r = g.request(change);
    r.cache_snapshot = mode;
    apply_and_build(counter, r);
  }
  long ops = counter.count();
  EXPECT_GT(ops, 20);
  for (long n = 1; n <= ops; ++n) {
    Fixture h;
    AddNativeRequest req = h.request(change);
    req.cache_snapshot = mode;
    FaultyDisk disk(real_disk());
    disk.fail_at(n, n % 2 ? ENOSPC : EIO);
    try {
      apply_and_build(disk, req);
    } catch (const Error&) {
    }
    RevertReport r = revert_natives(real_disk(), h.t / "ov", {});
    EXPECT_TRUE(r.ok()) << "fault at op " << n << ": "
                        << (r.problems.empty() ? "" : r.problems[0].path + ": " + r.problems[0].reason);
    EXPECT_TRUE(settle_litter(h.in.root)) << "fault at op " << n;
    EXPECT_EQ(tree_digest(h.in.root), h.before) << "fault at op " << n;
  }
  return ops;
}

TEST(Native, FaultSweepDuringAdd) {
  long tarred = sweep_add(CacheSnapshot::tar), aside = sweep_add(CacheSnapshot::aside);
  long multi = sweep_add(CacheSnapshot::move, Change::multi_file_diff);  // move: kept aside too
  std::printf(
      "fault sweep (add-native): %ld faults injected (ENOSPC/EIO), one per disk operation (%ld with a tar, %ld with "
      "a cache renamed aside, %ld with a multi-file diff creating and deleting files)\n",
      tarred + aside + multi, tarred, aside, multi);
}

// Every mutating disk operation of revert fails in turn; a second revert must finish the job.
// MovedIn::yes: the record as versions before issue 62 wrote a moved cache (in the overlay).
enum class MovedIn { no, yes };
long sweep_revert(CacheSnapshot mode, Change change = Change::one_file, MovedIn moved_in = MovedIn::no) {
  auto applied = [&](Fixture& f) {
    AddNativeRequest r = f.request(change);
    r.cache_snapshot = mode;
    apply_and_build(real_disk(), r);
    if (moved_in == MovedIn::yes) record_caches_as_moved_in(f.t / "ov");
  };
  long ops = 0;
  {
    Fixture f;
    applied(f);
    FaultyDisk counter(real_disk());
    revert_natives(counter, f.t / "ov", {});
    ops = counter.count();
  }
  EXPECT_GT(ops, 10);
  for (long n = 1; n <= ops; ++n) {
    Fixture f;
    applied(f);
    FaultyDisk disk(real_disk());
    disk.fail_at(n, EACCES);
    try {
      revert_natives(disk, f.t / "ov", {});
    } catch (const Error&) {
    }
    RevertReport r = revert_natives(real_disk(), f.t / "ov", {});
    EXPECT_TRUE(r.ok()) << "fault at op " << n << ": " << (r.problems.empty() ? "" : r.problems[0].reason);
    EXPECT_TRUE(settle_litter(f.in.root)) << "fault at op " << n;
    EXPECT_EQ(tree_digest(f.in.root), f.before) << "fault at op " << n;
  }
  return ops;
}

TEST(Native, FaultSweepDuringRevert) {
  long moved = sweep_revert(CacheSnapshot::aside, Change::one_file, MovedIn::yes);
  long tarred = sweep_revert(CacheSnapshot::tar), aside = sweep_revert(CacheSnapshot::aside);
  long multi = sweep_revert(CacheSnapshot::aside, Change::multi_file_diff, MovedIn::yes);
  std::printf(
      "fault sweep (revert): %ld faults injected (EACCES), one per disk operation (%ld with a moved cache, %ld with a "
      "tar, %ld with a cache renamed aside, %ld with a multi-file diff)\n",
      moved + tarred + aside + multi, moved, tarred, aside, multi);
}

TEST(Native, NewestFirstAcrossStackedEntries) {
  Fixture f;
  AddNativeRequest r = f.request();
  r.build_cmds.clear();
  apply_and_build(real_disk(), r);
  write_file(f.t / "patched2.cpp", "int kernel() { return 9; }\n");
  r.patched_files = {f.t / "patched2.cpp"};
  apply_and_build(real_disk(), r);
  EXPECT_EQ(read_file(f.in.source), "int kernel() { return 9; }\n");
  EXPECT_TRUE(revert_natives(real_disk(), f.t / "ov", {}).ok());
  EXPECT_TRUE(settle_litter(f.in.root));
  EXPECT_EQ(tree_digest(f.in.root), f.before);
}

TEST(Native, DryRunChangesNothing) {
  Fixture f;
  apply_and_build(real_disk(), f.request());
  std::string applied = tree_digest(f.in.root);
  std::string ov = tree_digest(f.t / "ov");
  RevertOptions dry;
  dry.dry_run = true;
  dry.lock_timeout = 5;
  RevertReport r = revert_natives(real_disk(), f.t / "ov", dry);
  EXPECT_TRUE(r.ok());
  EXPECT_EQ(r.actions.size(), 4u);
  EXPECT_EQ(tree_digest(f.in.root), applied);
  EXPECT_EQ(tree_digest(f.t / "ov"), ov);
}

// Found by the claims checker (issue 49, seed 1222697785): the accepted overlay deleted (rm -rf by
// the harness) between a stacked candidate's hold claim, which took the files as layers on it,
// and the candidate's lock on it; the candidate went on as a plain add and backed up the accepted
// overlay's build as the original. Refused there, nothing changed, the holds given back.
TEST(Native, ALowerDeletedWhileItsFilesAreClaimedAsLayersRefusesWithNothingChanged) {
  Fixture f;
  AddNativeRequest acc = f.request();
  acc.overlay = f.t / "acc";
  acc.caches.clear();
  acc.state_dir = f.t / "state";
  apply_and_build(real_disk(), acc);
  const std::string lib = read_file(f.in.artifact), src = read_file(f.in.source);
  write_file(f.t / "cand.cpp", "int kernel() { return 9; }\n");
  AddNativeRequest cand = acc;
  cand.overlay = f.t / "cand";
  cand.patched_files = {f.t / "cand.cpp"};
  cand.over = acc.overlay;
  FaultyDisk disk(real_disk());
  bool deleted = false;
  disk.before_op = [&](const char*, const fs::path& p) {
    if (!deleted && p.string().rfind(cand.overlay.string(), 0) == 0) deleted = true, fs::remove_all(acc.overlay);
  };
  NativePlan plan = plan_add_native(disk, cand);
  try {
    (void)apply_native(disk, plan);
    FAIL() << "stacked on a lower that was deleted under the claim";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no longer records a change to it"), std::string::npos) << e.what();
  }
  ASSERT_TRUE(deleted);
  EXPECT_EQ(read_file(f.in.source), src);
  EXPECT_EQ(read_file(f.in.artifact), lib);
  auto m = load_manifest(real_disk(), cand.overlay);
  EXPECT_TRUE(!m || m->natives.empty());
  EXPECT_EQ(HoldRegistry(real_disk(), f.t / "state").holder(f.in.source), acc.overlay)
      << "the claim was not given back";
}

// The stack reads the lower's record once per add-native --over (issue 64): the plan parses it
// (a malformed one refused up front), the claim and the lower's lock read the bytes again and
// parse them only where they changed. Before, the claim parsed it again for every file it judged.
TEST(Native, AStackedAddNativeParsesTheLowersRecordOnce) {
  Fixture f;
  AddNativeRequest acc = f.request(Change::multi_file_diff);
  acc.overlay = f.t / "acc";
  acc.caches.clear();
  acc.state_dir = f.t / "state";
  apply_and_build(real_disk(), acc);
  write_file(f.t / "cand.cpp", "int kernel() { return 9; }\n");
  AddNativeRequest cand = f.request();
  cand.overlay = f.t / "cand";
  cand.patched_files = {f.t / "cand.cpp"};
  cand.caches.clear();
  cand.state_dir = acc.state_dir;
  cand.over = acc.overlay;
  struct ReadCounting : FaultyDisk {
    using FaultyDisk::FaultyDisk;
    fs::path watched;
    int reads = 0;
    std::unique_ptr<ReadHandle> open_read(const At& p) override {
      if (p.full() == watched) ++reads;
      return FaultyDisk::open_read(p);
    }
  } disk(real_disk());
  disk.watched = acc.overlay / kManifestName;
  NativePlan plan = plan_add_native(disk, cand);
  AppliedEntry e = apply_native(disk, plan);
  auto m = load_manifest(real_disk(), cand.overlay);
  ASSERT_TRUE(m);
  std::size_t layered = 0;
  for (const auto& path : tracked_paths(m->natives.at(0)))
    layered += layer_of(m->natives.at(0), path) != nullptr ? 1 : 0;
  EXPECT_EQ(layered, 3u) << "the source and both artifacts stack on the accepted overlay";
  EXPECT_EQ(plan.records->parses(acc.overlay.string()), 1u);
  EXPECT_EQ(disk.reads, 3) << "the plan, the claim after its path locks, the lower's lock";
  EXPECT_TRUE(revert_natives(real_disk(), cand.overlay, {}).ok());
  (void)e;
}

// Found by the claims checker (seed 2072967200): the artifact taken by another overlay since (this
// one moved, the package reinstalled, another candidate built it): verify says whose it is, never
// FRESH_BUILD_OK over that build.
TEST(Native, AnArtifactAnotherOverlayHoldsNowIsNotThisEntrysBuild) {
  Fixture f;
  const std::string own_state = std::getenv("OVERLAY_STATE_DIR") ? std::getenv("OVERLAY_STATE_DIR") : "";
  ::setenv("OVERLAY_STATE_DIR", (f.t / "state").c_str(), 1);
  AddNativeRequest r = f.request();
  r.caches.clear();
  r.state_dir = f.t / "state";
  apply_and_build(real_disk(), r);
  ASSERT_TRUE(verify_native(real_disk(), r.overlay).ok());
  // Another overlay records a change to the artifact and holds it: taken from the overlay's old
  // path (moved since), so this one is no layer under it.
  HoldRegistry holds(real_disk(), f.t / "state");
  fs::remove_all(f.t / "state/holds");
  (void)claim_files(holds, {HeldFile(f.in.artifact, std::nullopt, true)}, f.t / "other", false, 1);
  Manifest other;
  NativeEntry e;
  ArtifactItem a;
  a.path = f.in.artifact.string();
  a.existed = true;
  a.sha256 = std::string(64, 'b');
  a.backup = "_native_backup/x/a";
  e.artifacts.push_back(a);
  other.natives.push_back(e);
  fs::create_directories(f.t / "other");
  save_manifest(real_disk(), f.t / "other", other);
  VerifyReport v = verify_native(real_disk(), r.overlay);
  if (own_state.empty())
    ::unsetenv("OVERLAY_STATE_DIR");
  else
    ::setenv("OVERLAY_STATE_DIR", own_state.c_str(), 1);
  EXPECT_FALSE(v.ok());
  ASSERT_FALSE(v.items.empty());
  EXPECT_EQ(v.items[0].state, ArtifactState::superseded);
  EXPECT_NE(v.items[0].why.find((f.t / "other").string()), std::string::npos) << v.items[0].why;
}

// A revert's report writes its own JSON (issue 64): what `revert --json` prints beyond the flags
// the caller echoes, each list as long as the report's.
TEST(Native, ARevertReportWritesItsOwnJson) {
  Fixture f;
  apply_and_build(real_disk(), f.request());
  RevertReport r = revert_natives(real_disk(), f.t / "ov", {});
  ASSERT_TRUE(r.ok());
  nlohmann::json j = r.to_json();
  EXPECT_EQ(j["had_manifest"], true);
  EXPECT_EQ(j["entries"], 1u);
  EXPECT_EQ(j["entries_reverted"], 1u);
  ASSERT_EQ(j["actions"].size(), r.actions.size());
  ASSERT_FALSE(r.actions.empty());
  EXPECT_EQ(j["actions"][0]["path"], r.actions[0].path);
  EXPECT_EQ(j["actions"][0]["action"], r.actions[0].action);
  EXPECT_TRUE(j["problems"].empty());
  EXPECT_TRUE(j["still_running"].empty());
  ASSERT_EQ(j["mtimes"].size(), r.times.size());
  for (std::size_t i = 0; i < r.times.size(); ++i) {
    EXPECT_EQ(j["mtimes"][i]["entry"], r.times[i].entry);
    EXPECT_EQ(j["mtimes"][i]["original"], r.times[i].original);
  }
}

// And verify's, the entry's and its build's (issue 64): add-native, apply and exec print these.
TEST(Native, VerifyApplyAndBuildReportsWriteTheirOwnJson) {
  Fixture f;
  AddNativeRequest req = f.request();
  NativePlan plan = plan_add_native(real_disk(), req);
  AppliedEntry e = apply_native(real_disk(), plan);
  nlohmann::json applied = e.to_json(plan);
  EXPECT_EQ(applied["entry"], e.id);
  ASSERT_EQ(applied["files"].size(), 1u);
  EXPECT_EQ(applied["files"][0]["path"], f.in.source.string());
  EXPECT_EQ(applied["files"][0]["change"], "modify");
  EXPECT_EQ(applied["counts"]["sources"], e.sources);
  EXPECT_EQ(applied["counts"]["artifacts"], e.artifacts);
  EXPECT_EQ(applied["counts"]["caches"], e.caches);
  EXPECT_FALSE(applied.contains("over"));

  BuildOutcome b = run_native_build(real_disk(), plan, e);
  ASSERT_TRUE(b.ok);
  nlohmann::json built = b.to_json(e.log_path);
  EXPECT_EQ(built["ran"], b.served_from.empty());
  EXPECT_EQ(built["ok"], true);
  EXPECT_EQ(built["rc"], 0);
  EXPECT_EQ(built["log"], e.log_path.string());
  EXPECT_EQ(built["store"]["state"], b.store);
  EXPECT_EQ(built["changes"], b.changes);
  EXPECT_FALSE(built.contains("failed_cmd"));
  BuildOutcome served = b;
  served.served_from = "a-record";
  EXPECT_TRUE(served.to_json(e.log_path)["rc"].is_null()) << "a served build ran no command";
  EXPECT_EQ(served.to_json(e.log_path)["ran"], false);
  b.ok = false;
  b.failed_cmd = {"sh", "-c", "exit 3"};
  nlohmann::json failed = b.to_json(e.log_path);
  EXPECT_EQ(failed["failed_cmd"], nlohmann::json(b.failed_cmd));
  EXPECT_EQ(failed["interrupted"], false);

  VerifyReport v = verify_native(real_disk(), f.t / "ov");
  nlohmann::json verified = v.to_json();
  EXPECT_EQ(verified["result"], "FRESH_BUILD_OK");
  ASSERT_EQ(verified["artifacts"].size(), v.items.size());
  for (std::size_t i = 0; i < v.items.size(); ++i) {
    EXPECT_EQ(verified["artifacts"][i]["path"], v.items[i].path);
    EXPECT_EQ(verified["artifacts"][i]["state"], to_string(v.items[i].state));
  }
  EXPECT_FALSE(verified.contains("error"));
  v.items[0].state = ArtifactState::unchanged;
  EXPECT_EQ(v.to_json()["result"], "FRESH_BUILD_FAIL");
  EXPECT_TRUE(v.to_json().contains("error"));
  EXPECT_TRUE(revert_natives(real_disk(), f.t / "ov", {}).ok());
}

// The verbs that only read are given the reading half of the disk (issue 64): status, verify and
// discover run over a DiskReader that has no call to change anything, and answer as they do over
// the real Disk. One of them taking a Disk again does not compile here.
TEST(Native, StatusVerifyAndDiscoverReadThroughTheReadingHalfOnly) {
  Fixture f;
  apply_and_build(real_disk(), f.request());
  struct ReaderOnly final : DiskReader {
    DiskReader& d = real_disk();
    FileInfo info(const At& p, Follow f) override { return d.info(p, f); }
    std::unique_ptr<ReadHandle> open_read(const At& p) override { return d.open_read(p); }
    std::vector<DirEntry> list_dir(const At& p) override { return d.list_dir(p); }
    std::string read_link(const At& p) override { return d.read_link(p); }
    fs::path real_path(const fs::path& p) override { return d.real_path(p); }
    std::unique_ptr<DirHandle> open_dir(const At& p) override { return d.open_dir(p); }
    bool can_write(const fs::path& p) override { return d.can_write(p); }
    bool has_xattrs(const fs::path& p) override { return d.has_xattrs(p); }
    Xattrs xattrs(const At& p) override { return d.xattrs(p); }
    std::uint64_t fs_type(const fs::path& p) override { return d.fs_type(p); }
  } reader;
  const fs::path ov = f.t / "ov";
  const std::string before = tree_digest(f.t.path());
  StatusReport mine = overlay_status(reader, ov), real = overlay_status(real_disk(), ov);
  ASSERT_EQ(mine.natives.size(), 1u);
  EXPECT_EQ(mine.to_json()["natives"][0]["files"], real.to_json()["natives"][0]["files"]);
  EXPECT_EQ(mine.clean(), real.clean());
  EXPECT_EQ(verify_native(reader, ov).to_json(), verify_native(real_disk(), ov).to_json());
  DiscoverRequest d;
  d.target = f.in.source;
  d.root = f.t.path();
  d.default_cache_roots = false;
  DiscoverReport found = discover(reader, d), found_real = discover(real_disk(), d);
  EXPECT_EQ(found.searched, found_real.searched);
  ASSERT_EQ(found.candidates.size(), found_real.candidates.size());
  for (std::size_t i = 0; i < found.candidates.size(); ++i)
    EXPECT_EQ(found.candidates[i].kind, found_real.candidates[i].kind);
  EXPECT_EQ(tree_digest(f.t.path()), before) << "a verb that only reads changed the tree";
  EXPECT_TRUE(revert_natives(real_disk(), ov, {}).ok());
}

// So does a status report (issue 64): every file of every entry with the state the report gives it.
TEST(Native, AStatusReportWritesItsOwnJson) {
  Fixture f;
  apply_and_build(real_disk(), f.request());
  StatusReport r = overlay_status(real_disk(), f.t / "ov");
  nlohmann::json j = r.to_json();
  EXPECT_EQ(j["overlay"], (f.t / "ov").string());
  EXPECT_EQ(j["clean"], r.clean());
  EXPECT_EQ(j["not_original"], r.not_original());
  ASSERT_EQ(j["natives"].size(), 1u);
  ASSERT_EQ(j["natives"][0]["files"].size(), r.natives[0].files.size());
  for (std::size_t i = 0; i < r.natives[0].files.size(); ++i) {
    EXPECT_EQ(j["natives"][0]["files"][i]["path"], r.natives[0].files[i].path);
    EXPECT_EQ(j["natives"][0]["files"][i]["state"], to_string(r.natives[0].files[i].state));
  }
  EXPECT_TRUE(revert_natives(real_disk(), f.t / "ov", {}).ok());
}
