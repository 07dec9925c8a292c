// Issue 24: a directory on a tracked path swapped for a symlink (or another directory) after
// add-native must not steer where revert, gc-stale, verify-native or status act. The repro of
// the issue through the real binary: add-native on inst/k/a.cu (artifact inst/k/a.so), then
// inst/k renamed to inst/k.real and replaced by a symlink to a decoy.
#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "test_util.hpp"

using namespace overlay::test;
using json = nlohmann::json;

namespace {

struct Redirect : ::testing::Test {
  TempDir t;
  fs::path inst = t / "inst", k = t / "inst/k", decoy = t / "evil";
  std::string ov = (t / "ov").string();
  std::string original;

  Redirect() {
    write_file(k / "a.cu", "int a() { return 4; }\n");
    write_file(k / "a.so", "built from 4\n");
    write_file(k / "cache/jit.o", "jit of 4\n");
    write_file(t / "patched.cu", "int a() { return 7; }\n");
    fs::create_directories(decoy);
    original = tree_digest(inst);
  }
  Cmd add(const std::string& overlay = "") {
    return run_overlay({"add-native", "--overlay", overlay.empty() ? ov : overlay, "--target", (k / "a.cu").string(),
                        "--patched-file", (t / "patched.cu").string(), "--artifact", (k / "a.so").string(),
                        "--invalidate-cache", (k / "cache").string(), "--build-cwd", k.string(), "--build-cmd",
                        "sh -c 'echo built from 7 > a.so && mkdir cache && echo jit of 7 > cache/jit.o'"});
  }
  // The swap of the issue: the real directory moved away, a symlink to the decoy in its place.
  void swap_for_symlink() {
    fs::rename(k, t / "inst/k.real");
    fs::create_directory_symlink(decoy, k);
  }
  void swap_back() {
    fs::remove(k);
    fs::rename(t / "inst/k.real", k);
  }
  json natives() { return json::parse(read_file(t / "ov/_overlay_manifest.json"))["natives"]; }
};

}  // namespace

TEST_F(Redirect, RevertRefusesASwappedDirectoryAndWritesNothingThroughIt) {
  ASSERT_EQ(add().rc, 0);
  std::string patched = tree_digest(t / "inst/k");
  swap_for_symlink();
  Cmd r = run_overlay({"revert", "--overlay", ov});
  EXPECT_EQ(r.rc, 1);
  for (const char* name : {"a.cu", "a.so", "cache"})
    EXPECT_NE(r.err.find("revert: cannot restore " + (k / name).string() +
                         ": its directory changed since add-native (now a symlink to " + decoy.string() + ")"),
              std::string::npos)
        << name << "\n"
        << r.err;
  EXPECT_TRUE(fs::is_empty(decoy));                    // nothing written outside
  EXPECT_EQ(tree_digest(t / "inst/k.real"), patched);  // the real directory untouched
  EXPECT_EQ(natives().size(), 1u);                     // the entry kept
  // The same for gc-stale (CI, as root, over shared roots) and for a dry run.
  Cmd gc = run_overlay({"gc-stale", "--root", t.path().string()});
  EXPECT_NE(gc.rc, 0);
  EXPECT_NE(gc.err.find("its directory changed since add-native"), std::string::npos) << gc.err;
  EXPECT_NE(run_overlay({"revert", "--dry-run", "--overlay", ov}).rc, 0);
  EXPECT_TRUE(fs::is_empty(decoy));
  EXPECT_EQ(tree_digest(t / "inst/k.real"), patched);
  // Once the real directory is back, revert finishes byte-exact.
  swap_back();
  Cmd ok = run_overlay({"revert", "--overlay", ov});
  ASSERT_EQ(ok.rc, 0) << ok.err;
  EXPECT_EQ(tree_digest(inst), original);
}

TEST_F(Redirect, AnotherRealDirectoryInItsPlaceIsRefusedToo) {
  ASSERT_EQ(add().rc, 0);
  fs::rename(k, t / "inst/k.real");
  fs::create_directories(k);  // same name, another inode
  Cmd r = run_overlay({"revert", "--overlay", ov});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("its directory changed since add-native (another directory now stands at " + k.string()),
            std::string::npos)
      << r.err;
  EXPECT_TRUE(fs::is_empty(k));
  fs::remove(k);
  fs::rename(t / "inst/k.real", k);
  EXPECT_EQ(run_overlay({"revert", "--overlay", ov}).rc, 0);
  EXPECT_EQ(tree_digest(inst), original);
}

TEST_F(Redirect, VerifyAndStatusNameTheRedirectionInsteadOfJudgingTheDecoy) {
  ASSERT_EQ(add().rc, 0);
  swap_for_symlink();
  write_file(decoy / "a.so", "built from 4\n");  // the decoy even holds the original bytes
  Cmd v = run_overlay({"verify-native", "--overlay", ov});
  EXPECT_EQ(v.rc, 2);
  EXPECT_NE(
      v.out.find("FRESH_BUILD_FAIL redirected " + (k / "a.so").string() + " (its directory changed since add-native"),
      std::string::npos)
      << v.out;
  Cmd st = run_overlay({"status", "--overlay", ov, "--check-clean"});
  EXPECT_NE(st.rc, 0);
  EXPECT_NE(st.out.find("source    redirected   " + (k / "a.cu").string() +
                        "  (its directory changed since add-native (now a symlink to " + decoy.string() + "))"),
            std::string::npos)
      << st.out;
  Cmd sj = run_overlay({"--json", "status", "--overlay", ov});
  json files = json::parse(sj.out)["natives"][0]["files"];
  for (const auto& f : files) EXPECT_EQ(f["state"], "redirected") << f;
  swap_back();
  EXPECT_EQ(run_overlay({"revert", "--overlay", ov}).rc, 0);
  EXPECT_EQ(tree_digest(inst), original);
}

// A path that went through a symlink when add-native ran is followed as it was resolved then:
// re-pointing that symlink later does not move where revert writes.
TEST_F(Redirect, ASymlinkOnThePathAtAddNativeIsResolvedOnceAndPinned) {
  fs::create_directory_symlink(k, t / "link");
  Cmd a = run_overlay({"add-native", "--overlay", ov, "--target", (t / "link/a.cu").string(), "--patched-file",
                       (t / "patched.cu").string(), "--artifact", (t / "link/a.so").string(), "--build-cwd", k.string(),
                       "--build-cmd", "sh -c 'echo built from 7 > a.so'"});
  ASSERT_EQ(a.rc, 0) << a.err;
  json art = natives()[0]["artifacts"][0];
  EXPECT_EQ(art["path"], (t / "link/a.so").string());
  EXPECT_EQ(art["parent"]["path"], k.string());  // resolved once, recorded
  fs::remove(t / "link");
  fs::create_directory_symlink(decoy, t / "link");  // re-pointed at the decoy
  Cmd r = run_overlay({"revert", "--overlay", ov});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(fs::is_empty(decoy));
  EXPECT_EQ(tree_digest(inst), original);
}

// add-native --patch-root: a directory under the root that is a symlink must not carry the
// diff's changes out of the root.
TEST_F(Redirect, APatchRootDiffIsNotCarriedOutOfTheRootThroughASymlink) {
  write_file(decoy / "b.cu", "int b() { return 1; }\n");
  fs::create_directory_symlink(decoy, inst / "ext");
  write_file(t / "b.diff",
             "--- a/ext/b.cu\n+++ b/ext/b.cu\n@@ -1 +1 @@\n-int b() { return 1; }\n+int b() { return 2; }\n");
  std::string before = tree_digest(decoy);
  Cmd a =
      run_overlay({"add-native", "--overlay", ov, "--patch", (t / "b.diff").string(), "--patch-root", inst.string()});
  EXPECT_EQ(a.rc, 1);
  EXPECT_EQ(a.err, "add-native: file the diff changes leads out of the patch root through a symlink: " +
                       (inst / "ext/b.cu").string() + " is " + (decoy / "b.cu").string() + "\n");
  EXPECT_EQ(tree_digest(decoy), before);
  EXPECT_FALSE(fs::exists(t / "ov/_overlay_manifest.json"));
}

// gc-stale (CI runs it as root over shared roots) acts on an overlay only when no other user can
// swap a directory above it: otherwise the manifest it judged trusted could be traded, between
// the check and the revert, for one it would not trust. A world-writable directory above the
// overlay, or one another user owns, leaves the overlay applied and named; a sticky one (others
// cannot rename what is ours) does not; a root given through a symlink is walked as its real path.
TEST_F(Redirect, GcStaleLeavesAnOverlayWhosePathAnotherUserCouldSwap) {
  fs::path shared = t / "runs/shared";
  std::string ov2 = (shared / "ov").string();
  ASSERT_EQ(add(ov2).rc, 0);
  std::string patched = tree_digest(inst);
  auto gc = [&](const fs::path& root) { return run_overlay({"gc-stale", "--root", root.string()}); };

  fs::permissions(shared, fs::perms(0777));
  Cmd g = gc(t / "runs");
  EXPECT_EQ(g.rc, 0) << g.err;
  EXPECT_EQ(g.err, "gc-stale: skipped " + ov2 + ": directory " + shared.string() +
                       " above it is group- or world-writable (another user could swap it)\n");
  EXPECT_EQ(tree_digest(inst), patched);

  if (::geteuid() == 0) {
    fs::permissions(shared, fs::perms(0755));
    ASSERT_EQ(::chown(shared.c_str(), 65534, 65534), 0);
    g = gc(t / "runs");
    EXPECT_EQ(g.err, "gc-stale: skipped " + ov2 + ": directory " + shared.string() +
                         " above it is owned by another user (uid 65534)\n");
    EXPECT_EQ(tree_digest(inst), patched);
    ASSERT_EQ(::chown(shared.c_str(), 0, 0), 0);
  }

  fs::permissions(shared, fs::perms(01777));
  fs::create_directory_symlink(t / "runs", t / "runs-link");
  g = gc(t / "runs-link");
  EXPECT_EQ(g.rc, 0) << g.err;
  EXPECT_NE(g.out.find("gc-stale: reverted " + ov2 + "\n"), std::string::npos) << g.out << g.err;
  EXPECT_TRUE(settle_litter(inst));
  EXPECT_EQ(tree_digest(inst), original);
}
