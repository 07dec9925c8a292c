// The native subcommands through the real binary.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <set>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "test_util.hpp"

using namespace overlay::test;
using json = nlohmann::json;

namespace {

struct Cli : ::testing::Test {
  TempDir t;
  Install in = make_install(t / "inst");
  std::string before = tree_digest(in.root);
  std::string ov = (t / "ov").string();

  Cli() { write_file(t / "patched.cpp", "int kernel() { return 7; }\n"); }

  Cmd add(std::vector<std::string> extra) {
    std::vector<std::string> a{
        "add-native", "--overlay", ov, "--target", in.source.string(), "--patched-file", (t / "patched.cpp").string()};
    a.insert(a.end(), extra.begin(), extra.end());
    return run_overlay(a);
  }
  Cmd revert() { return run_overlay({"revert", "--overlay", ov}); }
  json manifest() { return json::parse(read_file(t / "ov/_overlay_manifest.json")); }
};

int lines(const std::string& s) { return static_cast<int>(std::count(s.begin(), s.end(), '\n')); }

}  // namespace

TEST_F(Cli, ApplyRebuildVerifyRevertByteExact) {
  Cmd a = add({"--artifact", in.artifact.string(), "--invalidate-cache", in.cache.string(), "--build-cwd",
               in.root.string(), "--build-cmd",
               "sh -c 'test ! -e cache && echo rebuilt > lib/libk.so && mkdir cache && echo new > cache/f'"});
  ASSERT_EQ(a.rc, 0) << a.err;
  EXPECT_EQ(a.out, "OVERLAY_DIR=" + ov + "\nadd-native " + in.source.string() +
                       "  (sources=1 artifacts=1 caches=1 build=yes)\n");
  EXPECT_EQ(read_file(in.source), "int kernel() { return 7; }\n");
  EXPECT_EQ(read_file(in.artifact), "rebuilt\n");
  Cmd v = run_overlay({"verify-native", "--overlay", ov});
  EXPECT_EQ(v.rc, 0);
  EXPECT_EQ(v.out, "FRESH_BUILD_OK (checked 1)\n");
  Cmd r = revert();
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "revert: restored native changes in " + ov + "\n");
  EXPECT_EQ(tree_digest(in.root), before);
  EXPECT_TRUE(manifest()["natives"].empty());
}

// Issue 15: on XFS with reflink and btrfs the artifact's backup is a clone (it shares the
// artifact's blocks, so it costs no copy); elsewhere a copy. The build rewrites the artifact in
// place, which a clone must survive (copy-on-write), and revert puts the original back.
TEST_F(Cli, ArtifactBackupIsACloneWhereTheFilesystemCanBe) {
  std::string big(5 * (1 << 20) + 11, 'a');
  for (std::size_t i = 0; i < big.size(); i += 512) big[i] = static_cast<char>(i / 512);
  write_file(in.artifact, big, 0755);
  before = tree_digest(in.root);
  bool cow = can_clone_in(t.path());
  ino_t original = inode_of(in.artifact);
  Cmd a = add({"--artifact", in.artifact.string(), "--build-cwd", in.root.string(), "--build-cmd",
               "sh -c 'printf rebuilt | dd of=lib/libk.so bs=1 seek=4096 conv=notrunc status=none'"});
  ASSERT_EQ(a.rc, 0) << a.err;
  std::string backup = (t / "ov" / manifest()["natives"][0]["artifacts"][0]["backup"].get<std::string>()).string();
  EXPECT_EQ(shares_blocks(backup), cow) << "copy-on-write here: " << cow;
  EXPECT_EQ(read_file(backup), big);  // the in-place rewrite did not reach the backup
  EXPECT_NE(read_file(in.artifact), big);
  // With a clone, the two traded places: the backup is the original inode, the build wrote into
  // the clone.
  EXPECT_EQ(inode_of(backup) == original, cow);
  EXPECT_EQ(run_overlay({"verify-native", "--overlay", ov}).out, "FRESH_BUILD_OK (checked 1)\n");
  Cmd r = revert();
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(tree_digest(in.root), before);
  if (cow) {
    EXPECT_EQ(inode_of(in.artifact), original);  // the very inode is back
  }
}

// What the trade leaves in the install, before any build: the same bytes, mode, owner and
// modification time (to the nanosecond: what incremental builds compare), another inode. A file
// with extended attributes (which a clone would lose: SELinux labels, ACLs) is never traded.
TEST_F(Cli, ATradedArtifactLooksUnchangedAndOneWithExtendedAttributesIsNotTraded) {
  if (!can_clone_in(t.path())) GTEST_SKIP() << "no copy-on-write clones in " << t.path();
  std::string big(3 * (1 << 20) + 7, 'z');
  write_file(in.artifact, big, 0751);
  fs::path tagged = in.root / "lib/tagged.so";
  write_file(tagged, big, 0755);
  ASSERT_EQ(::setxattr(tagged.c_str(), "user.overlay-test", "1", 1, 0), 0) << "user xattrs refused here";
  before = tree_digest(in.root);
  struct stat a0 {
  }, t0{};
  ASSERT_EQ(::stat(in.artifact.c_str(), &a0), 0);
  ASSERT_EQ(::stat(tagged.c_str(), &t0), 0);
  ASSERT_EQ(add({"--artifact", in.artifact.string(), "--artifact", tagged.string()}).rc, 0);
  struct stat a1 {
  }, t1{};
  ASSERT_EQ(::stat(in.artifact.c_str(), &a1), 0);
  ASSERT_EQ(::stat(tagged.c_str(), &t1), 0);
  EXPECT_NE(a1.st_ino, a0.st_ino);
  EXPECT_EQ(read_file(in.artifact), big);
  EXPECT_EQ(a1.st_mode, a0.st_mode);
  EXPECT_EQ(a1.st_uid, a0.st_uid);
  EXPECT_EQ(a1.st_mtim.tv_sec, a0.st_mtim.tv_sec);
  EXPECT_EQ(a1.st_mtim.tv_nsec, a0.st_mtim.tv_nsec);
  EXPECT_EQ(t1.st_ino, t0.st_ino);  // not traded: its attribute stays where it is
  Cmd r = revert();
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(tree_digest(in.root), before);
  EXPECT_EQ(inode_of(in.artifact), a0.st_ino);
  char v = 0;
  EXPECT_EQ(::getxattr(tagged.c_str(), "user.overlay-test", &v, 1), 1);
}

TEST_F(Cli, VerifyReportsEachFailureKind) {
  ASSERT_EQ(add({"--artifact", in.artifact.string(), "--artifact", (in.root / "lib/never.so").string(), "--artifact",
                 (in.root / "lib/gone.so").string()})
                .rc,
            0);
  Cmd v = run_overlay({"verify-native", "--overlay", ov});
  EXPECT_EQ(v.rc, 2);
  EXPECT_NE(v.out.find("FRESH_BUILD_FAIL unchanged " + in.artifact.string() + "\n"), std::string::npos);
  EXPECT_NE(v.out.find("FRESH_BUILD_FAIL not-created " + (in.root / "lib/never.so").string() + "\n"),
            std::string::npos);
  EXPECT_TRUE(v.out.ends_with("FRESH_BUILD_FAIL (checked 3)\n"));
  fs::remove(in.artifact);
  v = run_overlay({"verify-native", "--overlay", ov});
  EXPECT_NE(v.out.find("FRESH_BUILD_FAIL missing-after-build " + in.artifact.string()), std::string::npos);
  EXPECT_EQ(revert().rc, 0);
  EXPECT_EQ(tree_digest(in.root), before);
}

TEST_F(Cli, CreatedArtifactRemovedAndDoubleRevertHarmless) {
  fs::path created = in.root / "lib/new.so";
  ASSERT_EQ(add({"--artifact", created.string(), "--build-cmd", "touch " + created.string()}).rc, 0);
  EXPECT_TRUE(fs::exists(created));
  EXPECT_EQ(run_overlay({"verify-native", "--overlay", ov}).out, "FRESH_BUILD_OK (checked 1)\n");
  EXPECT_EQ(revert().rc, 0);
  EXPECT_FALSE(fs::exists(created));
  Cmd again = revert();
  EXPECT_EQ(again.rc, 0);
  EXPECT_EQ(tree_digest(in.root), before);
}

TEST_F(Cli, RevertWithoutManifestAndWithoutBuild) {
  Cmd none = run_overlay({"revert", "--overlay", (t / "nothing").string()});
  EXPECT_EQ(none.rc, 0);
  EXPECT_EQ(none.out, "revert: no manifest; nothing to do\n");
  EXPECT_FALSE(fs::exists(t / "nothing"));
  Cmd a = add({"--artifact", in.artifact.string(), "--invalidate-cache", in.cache.string()});
  ASSERT_EQ(a.rc, 0);
  EXPECT_NE(a.out.find("build=no"), std::string::npos);
  EXPECT_FALSE(fs::exists(in.cache));
  EXPECT_EQ(revert().rc, 0);
  EXPECT_EQ(tree_digest(in.root), before);
}

TEST_F(Cli, BuildCmdIsNotRunThroughAShell) {
  ASSERT_EQ(add({"--build-cwd", t.path().string(), "--build-cmd", "touch 'a b' c;d"}).rc, 0);
  EXPECT_TRUE(fs::exists(t / "a b"));
  EXPECT_TRUE(fs::exists(t / "c;d"));
  EXPECT_FALSE(fs::exists(t / "a"));
  EXPECT_EQ(manifest()["natives"][0]["build_cmds"], json::parse(R"([["touch", "a b", "c;d"]])"));
}

TEST_F(Cli, FailingBuildReportsRcAndStaysRevertable) {
  Cmd a = add({"--artifact", in.artifact.string(), "--build-cmd", "sh -c 'echo compiling; exit 3'"});
  EXPECT_EQ(a.rc, 1);
  EXPECT_NE(a.err.find("add-native: build failed (sh -c 'echo compiling; exit 3') rc=3"), std::string::npos) << a.err;
  EXPECT_NE(a.err.find("compiling"), std::string::npos);  // build output streamed to stderr
  std::string log = manifest()["natives"][0]["build_log"];
  EXPECT_EQ(read_file(t / "ov" / log), "compiling\n");
  EXPECT_EQ(revert().rc, 0);
  EXPECT_EQ(tree_digest(in.root), before);
}

TEST_F(Cli, TamperedBackupRefusedByNameOthersRestored) {
  ASSERT_EQ(add({"--artifact", in.artifact.string(), "--invalidate-cache", in.cache.string(), "--build-cmd",
                 "sh -c 'echo rebuilt > " + in.artifact.string() + "'"})
                .rc,
            0);
  std::string art_backup = manifest()["natives"][0]["artifacts"][0]["backup"];
  write_file(t / "ov" / art_backup, "evil bytes");
  Cmd r = revert();
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("revert: cannot restore " + in.artifact.string() + ": backup " + art_backup + " is corrupt"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(read_file(in.source), "int kernel() { return 4; }\n");  // the rest was restored
  EXPECT_TRUE(fs::exists(in.cache / "a/b/deep.bin"));
  EXPECT_EQ(read_file(in.artifact), "rebuilt\n");  // never the tampered bytes
  EXPECT_EQ(manifest()["natives"].size(), 1u);     // the entry stays
}

TEST_F(Cli, BackupPathEscapingOverlayRefused) {
  ASSERT_EQ(add({}).rc, 0);
  json m = manifest();
  m["natives"][0]["sources"][0]["backup"] = "../../etc/passwd";
  write_file(t / "ov/_overlay_manifest.json", m.dump());
  std::string ovd = tree_digest(t / "ov");
  Cmd r = revert();
  EXPECT_NE(r.rc, 0);
  EXPECT_EQ(lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("escapes the overlay"), std::string::npos) << r.err;
  EXPECT_EQ(read_file(in.source), "int kernel() { return 7; }\n");
  EXPECT_EQ(tree_digest(t / "ov"), ovd);
}

TEST_F(Cli, MalformedManifestsGiveCleanErrors) {
  const char* bad[] = {"{oops",
                       "[1,2]",
                       R"({"natives": null, "modules": 5})",
                       R"({"natives": [null]})",
                       R"({"natives": [{"sources": [{"install_path": null}]}]})",
                       R"({"natives": [{"artifacts": [{"path": "/x", "existed": true, "backup": 3}]}]})",
                       R"({"natives": [{"caches": [{"dir": "relative", "existed": false}]}]})",
                       R"({"natives": [{"sources": "nope"}]})",
                       "\"just a string\"",
                       ""};
  fs::create_directories(t / "ov");
  for (const char* text : bad) {
    write_file(t / "ov/_overlay_manifest.json", text);
    for (const char* sub : {"revert", "verify-native"}) {
      Cmd r = run_overlay({sub, "--overlay", ov});
      EXPECT_GT(r.rc, 0) << text;
      EXPECT_LT(r.rc, 128) << text;
      EXPECT_EQ(lines(r.err), 1) << text << " -> " << r.err;
      EXPECT_EQ(r.err.rfind(std::string(sub) + ": manifest", 0), 0u) << r.err;
    }
    Cmd a = add({});
    EXPECT_EQ(a.rc, 1) << text;
    EXPECT_EQ(read_file(t / "ov/_overlay_manifest.json"), text);
  }
  EXPECT_EQ(tree_digest(in.root), before);
}

TEST_F(Cli, BadInvocationsChangeNothing) {
  fs::create_directories(t / "adir");
  write_file(t / "bad.diff", "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-no such line\n+y\n");
  std::string s = in.source.string(), p = (t / "patched.cpp").string();
  std::vector<std::vector<std::string>> cases = {
      {"add-native", "--overlay", ov, "--target", (t / "missing.cpp").string(), "--patched-file", p},
      {"add-native", "--overlay", ov, "--target", (t / "adir").string(), "--patched-file", p},
      {"add-native", "--overlay", ov, "--target", s, "--patched-file", (t / "missing").string()},
      {"add-native", "--overlay", ov, "--target", s, "--patched-file", (t / "adir").string()},
      {"add-native", "--overlay", ov, "--target", s},
      {"add-native", "--overlay", ov, "--target", s, "--patch", (t / "bad.diff").string()},
      {"add-native", "--overlay", ov, "--target", s, "--patch", (t / "missing.diff").string()},
      {"add-native", "--overlay", ov, "--target", s, "--patched-file", p, "--artifact", (t / "adir").string()},
      {"add-native", "--overlay", ov, "--target", s, "--patched-file", p, "--invalidate-cache", s},
      {"add-native", "--overlay", ov, "--target", s, "--patched-file", p, "--build-cmd", "echo 'unterminated"},
      {"add-native", "--overlay", ov, "--target", s, "--patched-file", p, "--build-cmd", "make", "--build-cwd",
       (t / "nodir").string()},
      {"add-native", "--overlay", s, "--target", s, "--patched-file", p},
      {"add-native", "--overlay", ov, "--target", s, "--patched-file", p, "--no-such-flag"},
      {"add-native", "--overlay", ov, "--target", s, "--patched-file", p, "--owner-pid", "999999999"},
      {"add-native", "--target", s, "--patched-file", p},
      {"revert"},
      {"verify-native", "--overlay", ov},
      {"gc-stale", "--root", (t / "nope").string()},
      {"gc-stale", "--root", t.path().string(), "--min-age", "soon"},
      {"frobnicate"},
  };
  expect_refused_unchanged(cases, t.path(), [](const std::vector<std::string>& c) { return run_overlay(c); });
  Cmd missing = run_overlay(cases[0]);
  EXPECT_EQ(missing.err, "add-native: target source does not exist: " + (t / "missing.cpp").string() + "\n");
}

TEST_F(Cli, PatchAppliesAndFailingPatchLeavesNoTrace) {
  write_file(
      t / "good.diff",
      "--- a/kernel.cpp\n+++ b/kernel.cpp\n@@ -1 +1 @@\n-int kernel() { return 4; }\n+int kernel() { return 5; }\n");
  write_file(
      t / "bad.diff",
      "--- a/kernel.cpp\n+++ b/kernel.cpp\n@@ -1 +1 @@\n-int kernel() { return 8; }\n+int kernel() { return 5; }\n");
  Cmd bad = run_overlay(
      {"add-native", "--overlay", ov, "--target", in.source.string(), "--patch", (t / "bad.diff").string()});
  EXPECT_EQ(bad.rc, 1);
  EXPECT_NE(bad.err.find("does not apply"), std::string::npos) << bad.err;
  EXPECT_EQ(tree_digest(in.root), before);
  EXPECT_FALSE(fs::exists(t / "ov"));
  Cmd good = run_overlay(
      {"add-native", "--overlay", ov, "--target", in.source.string(), "--patch", (t / "good.diff").string()});
  ASSERT_EQ(good.rc, 0) << good.err;
  EXPECT_EQ(read_file(in.source), "int kernel() { return 5; }\n");
  EXPECT_EQ(std::distance(fs::directory_iterator(in.source.parent_path()), fs::directory_iterator()), 1);
  EXPECT_EQ(revert().rc, 0);
  EXPECT_EQ(tree_digest(in.root), before);
}

// A run killed during --patch (kill -9, power loss) leaves its private copy in $TMPDIR; the next
// --patch run removes such dirs: ours, named by a PID that no longer runs, older than 10 minutes.
TEST_F(Cli, PatchSweepsPrivateDirsOfDeadRunsOnly) {
  fs::path tmp = t / "tmp";
  fs::create_directories(tmp);
  pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  ::waitpid(dead, nullptr, 0);
  auto make = [&](const std::string& name, bool old) {
    fs::create_directories(tmp / name / "src");
    write_file(tmp / name / "src/kernel.cpp", "copy\n");
    if (old) {
      timespec then[2] = {{::time(nullptr) - 3600, 0}, {::time(nullptr) - 3600, 0}};
      ::utimensat(AT_FDCWD, (tmp / name).c_str(), then, 0);
    }
  };
  std::string dead_old = "overlay-patch-" + std::to_string(dead) + "-aaaaaa";
  std::string dead_young = "overlay-patch-" + std::to_string(dead) + "-bbbbbb";
  std::string live_old = "overlay-patch-" + std::to_string(::getpid()) + "-cccccc";
  std::string not_ours = "overlay-patch-unnamed";
  make(dead_old, true);
  make(dead_young, false);
  make(live_old, true);
  make(not_ours, true);
  write_file(
      t / "good.diff",
      "--- a/kernel.cpp\n+++ b/kernel.cpp\n@@ -1 +1 @@\n-int kernel() { return 4; }\n+int kernel() { return 5; }\n");
  Cmd a = run_overlay(
      {"add-native", "--overlay", ov, "--target", in.source.string(), "--patch", (t / "good.diff").string()}, {},
      {"TMPDIR=" + tmp.string()});
  ASSERT_EQ(a.rc, 0) << a.err;
  std::set<std::string> left;
  for (const auto& e : fs::directory_iterator(tmp)) left.insert(e.path().filename().string());
  EXPECT_EQ(left, (std::set<std::string>{dead_young, live_old, not_ours}));  // its own private dir gone too
  EXPECT_EQ(revert().rc, 0);
  EXPECT_EQ(tree_digest(in.root), before);
}

TEST_F(Cli, GcStaleFindsAndReverts) {
  ASSERT_EQ(add({"--artifact", in.artifact.string()}).rc, 0);
  Cmd dry = run_overlay({"gc-stale", "--root", t.path().string(), "--dry-run"});
  EXPECT_EQ(dry.rc, 0);
  EXPECT_NE(dry.out.find("gc-stale: would revert " + ov), std::string::npos);
  EXPECT_EQ(read_file(in.source), "int kernel() { return 7; }\n");
  Cmd g = run_overlay({"gc-stale", "--root", t.path().string()});
  EXPECT_EQ(g.rc, 0) << g.err;
  EXPECT_TRUE(g.out.ends_with("gc-stale: reverted 1 stale native overlay(s) under " + t.path().string() + "\n"))
      << g.out;
  EXPECT_EQ(tree_digest(in.root), before);
  Cmd again = run_overlay({"gc-stale", "--root", t.path().string()});
  EXPECT_TRUE(again.out.ends_with("gc-stale: reverted 0 stale native overlay(s) under " + t.path().string() + "\n"));
}

TEST_F(Cli, OwnerPidFromEnvironmentSparesLiveRun) {
  ASSERT_EQ(run_overlay({"add-native", "--overlay", ov, "--target", in.source.string(), "--patched-file",
                         (t / "patched.cpp").string(), "--owner-pid", std::to_string(::getpid())})
                .rc,
            0);
  Cmd g = run_overlay({"gc-stale", "--root", t.path().string()});
  EXPECT_NE(g.err.find("owner pid " + std::to_string(::getpid()) + " is still running"), std::string::npos) << g.err;
  EXPECT_EQ(read_file(in.source), "int kernel() { return 7; }\n");
  EXPECT_EQ(revert().rc, 0);  // the owner itself may always revert
}

TEST_F(Cli, VersionAndHelp) {
  Cmd v = run_overlay({"--version"});
  EXPECT_EQ(v.rc, 0);
  EXPECT_EQ(v.out.rfind("overlay ", 0), 0u);
  Cmd h = run_overlay({"add-native", "--help"});
  EXPECT_EQ(h.rc, 0);
  for (const char* flag : {"--overlay", "--target", "--patched-file", "--patch", "--artifact", "--invalidate-cache",
                           "--build-cmd", "--build-cwd"})
    EXPECT_NE(h.out.find(flag), std::string::npos) << flag;
  EXPECT_NE(run_overlay({"--help"}).out.find("gc-stale"), std::string::npos);
}

TEST_F(Cli, SecondOverlayRefusedOnAHeldFileUnlessForced) {
  std::vector<std::string> env{"OVERLAY_STATE_DIR=" + (t / "state").string()};
  auto add_to = [&](const std::string& o, std::vector<std::string> extra) {
    std::vector<std::string> a{
        "add-native", "--overlay", o, "--target", in.source.string(), "--patched-file", (t / "patched.cpp").string()};
    a.insert(a.end(), extra.begin(), extra.end());
    return run_overlay(a, {}, env);
  };
  ASSERT_EQ(add_to(ov, {}).rc, 0);
  std::string other = (t / "ov2").string();
  Cmd refused = add_to(other, {});
  EXPECT_EQ(refused.rc, 1);
  EXPECT_EQ(refused.err, "add-native: " + in.source.string() + " is held by overlay " + ov +
                             " (revert it first, stack on it with --over " + ov + ", or pass --force)\n");
  EXPECT_FALSE(fs::exists(t / "ov2"));
  EXPECT_EQ(add_to(ov, {}).rc, 0);  // the same overlay may stack
  Cmd forced = add_to(other, {"--force"});
  EXPECT_EQ(forced.rc, 0) << forced.err;
  EXPECT_EQ(run_overlay({"revert", "--overlay", other}, {}, env).rc, 0);
  EXPECT_EQ(run_overlay({"revert", "--overlay", ov}, {}, env).rc, 0);
  EXPECT_EQ(tree_digest(in.root), before);
  // Once reverted, the file is free again.
  EXPECT_EQ(add_to(other, {}).rc, 0);
  EXPECT_EQ(run_overlay({"revert", "--overlay", other}, {}, env).rc, 0);
  EXPECT_TRUE(fs::is_empty(t / "state/holds"));
}

TEST_F(Cli, CacheSnapshotModesRoundTrip) {
  for (std::string mode : {"tar", "move", "auto", "aside"}) {
    Cmd a = add({"--invalidate-cache", in.cache.string(), "--cache-snapshot", mode, "--build-cwd", in.root.string(),
                 "--build-cmd", "sh -c 'mkdir cache && echo new > cache/f'"});
    ASSERT_EQ(a.rc, 0) << mode << ": " << a.err;
    json caches = manifest()["natives"][0]["caches"];
    json c = caches.back();
    // A moved cache is one overlay_setup.py cannot put back: its guard comes first.
    EXPECT_EQ(caches.size(), mode == "tar" ? 1u : 2u) << caches;
    EXPECT_EQ(caches[0].value("python_tool_guard", false), mode != "tar") << caches;
    if (mode == "tar") {
      EXPECT_TRUE(c["backup_tar"].is_string()) << c;
      EXPECT_TRUE(fs::is_regular_file(t / "ov" / c["backup_tar"].get<std::string>()));
    } else {  // none moves a cache into the overlay: an overlay root holds sources only
      EXPECT_TRUE(c["backup_tar"].is_null()) << c;
      EXPECT_FALSE(c.contains("backup_dir")) << c;
      EXPECT_TRUE(fs::is_directory(c["aside"]["path"].get<std::string>()));  // renamed beside itself, not copied
      EXPECT_EQ(fs::path(c["aside"]["path"].get<std::string>()).parent_path(), in.cache.parent_path());
    }
    EXPECT_EQ(read_file(in.cache / "f"), "new\n");
    Cmd r = revert();
    ASSERT_EQ(r.rc, 0) << mode << ": " << r.err;
    EXPECT_EQ(tree_digest(in.root), before) << mode;
    EXPECT_TRUE(fs::is_empty(t / "ov/_native_backup")) << mode;
  }
  Cmd bad = add({"--invalidate-cache", in.cache.string(), "--cache-snapshot", "copy"});
  EXPECT_EQ(bad.rc, 2);
}

// setuptools compares whole-second mtimes: a source swapped in the second its artifact was built
// would not be rebuilt. The swapped source must land in a later second than every artifact.
TEST_F(Cli, SwappedSourceNewerThanArtifactsInWholeSeconds) {
  for (int round = 0; round < 3; ++round) {
    ASSERT_EQ(run({"touch", in.artifact.string()}).rc, 0);  // "just built"
    ASSERT_EQ(add({"--artifact", in.artifact.string()}).rc, 0);
    struct stat src {
    }, art{};
    ASSERT_EQ(::stat(in.source.c_str(), &src), 0);
    ASSERT_EQ(::stat(in.artifact.c_str(), &art), 0);
    EXPECT_GT(src.st_mtim.tv_sec, art.st_mtim.tv_sec) << "round " << round;
    ASSERT_EQ(run_overlay({"revert", "--overlay", ov}).rc, 0);
  }
}
