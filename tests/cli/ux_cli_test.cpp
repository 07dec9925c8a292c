// Operator experience through the real binary: status and --check-clean, --json on every
// subcommand, --revert-on-failure, multi-file diffs with --patch-root, the progress line and
// NO_COLOR on a real pseudo-terminal.
#include <algorithm>
#include <map>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "test_util.hpp"

using namespace overlay::test;
using json = nlohmann::json;

namespace {

struct Ux : ::testing::Test {
  TempDir t;
  Install in = make_install(t / "inst");
  std::string before = tree_digest(in.root);
  std::string ov = (t / "ov").string();
  std::vector<std::string> env{"OVERLAY_STATE_DIR=" + (t / "state").string()};

  Ux() { write_file(t / "patched.cpp", "int kernel() { return 7; }\n"); }

  Cmd ovl(const std::vector<std::string>& args) { return run_overlay(args, t.path(), env); }
  Cmd add(std::vector<std::string> extra) {
    std::vector<std::string> a{
        "add-native", "--overlay", ov, "--target", in.source.string(), "--patched-file", (t / "patched.cpp").string()};
    a.insert(a.end(), extra.begin(), extra.end());
    return ovl(a);
  }
  // The one JSON document a --json run printed; fails the test when stdout holds anything else.
  static json doc(const Cmd& c) {
    json j = json::parse(c.out, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << "stdout is not one JSON document:\n" << c.out;
    return j;
  }
  // path -> state, from `status --json`.
  std::map<std::string, std::string> states() {
    Cmd s = ovl({"status", "--overlay", ov, "--json"});
    std::map<std::string, std::string> out;
    json j = doc(s);
    for (const auto& e : j["natives"])
      for (const auto& f : e["files"]) out[f["path"].get<std::string>()] = f["state"].get<std::string>();
    return out;
  }
};

// Every --json document carries these, consistent with the exit status.
void expect_envelope(const json& j, const std::string& command, int rc) {
  EXPECT_EQ(j.value("schema", 0), 1);
  EXPECT_EQ(j.value("command", ""), command);
  EXPECT_EQ(j.value("exit", -1), rc);
  EXPECT_EQ(j.value("ok", rc != 0), rc == 0);
  if (rc != 0) {
    EXPECT_TRUE(j.contains("error") && j["error"].is_string()) << j.dump();
  }
}

void expect_keys(const json& j, const std::vector<std::string>& keys) {
  for (const auto& k : keys) EXPECT_TRUE(j.contains(k)) << "missing key " << k << " in " << j.dump();
}

const std::string kRebuild = "sh -c 'echo rebuilt > lib/libk.so && mkdir -p cache && echo new > cache/f'";

}  // namespace

TEST_F(Ux, StatusReportsEachStateAndCheckCleanExitCodes) {
  Cmd a = add({"--artifact", in.artifact.string(), "--invalidate-cache", in.cache.string(), "--build-cwd",
               in.root.string(), "--build-cmd", kRebuild, "--owner-pid", std::to_string(::getpid())});
  ASSERT_EQ(a.rc, 0) << a.err;
  auto log_at = a.err.find("add-native: build log: ");
  ASSERT_NE(log_at, std::string::npos) << a.err;
  std::string log = a.err.substr(log_at + 23, a.err.find('\n', log_at) - log_at - 23);
  EXPECT_TRUE(fs::is_regular_file(log)) << log;
  auto st = states();
  EXPECT_EQ(st[in.source.string()], "patched");
  EXPECT_EQ(st[in.artifact.string()], "rebuilt");
  EXPECT_EQ(st[in.cache.string()], "rebuilt");

  Cmd table = ovl({"status", "--overlay", ov});
  EXPECT_EQ(table.rc, 0) << table.err;
  EXPECT_NE(table.out.find("owner pid " + std::to_string(::getpid()) + " (alive)"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("source    patched      " + in.source.string()), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("3 tracked path(s) not original"), std::string::npos) << table.out;
  Cmd dirty = ovl({"list", "--overlay", ov, "--check-clean"});
  EXPECT_EQ(dirty.rc, 1);
  EXPECT_NE(dirty.err.find("3 tracked path(s) not at their original bytes"), std::string::npos) << dirty.err;

  write_file(in.source, "someone else edited this\n");  // drift
  fs::remove(in.artifact);                              // gone
  fs::remove_all(in.cache);                             // invalidated, not rebuilt
  st = states();
  EXPECT_EQ(st[in.source.string()], "drifted");
  EXPECT_EQ(st[in.artifact.string()], "missing");
  EXPECT_EQ(st[in.cache.string()], "invalidated");

  ASSERT_EQ(ovl({"revert", "--overlay", ov}).rc, 0);
  EXPECT_EQ(tree_digest(in.root), before);
  Cmd clean = ovl({"status", "--overlay", ov, "--check-clean"});
  EXPECT_EQ(clean.rc, 0) << clean.err;
  EXPECT_NE(clean.out.find("install clean"), std::string::npos) << clean.out;
}

TEST_F(Ux, StatusOfAnOverlayWithoutManifest) {
  fs::create_directories(ov);
  Cmd s = ovl({"status", "--overlay", ov, "--check-clean"});
  EXPECT_EQ(s.rc, 0) << s.err;
  EXPECT_NE(s.out.find("(no manifest: nothing recorded)"), std::string::npos) << s.out;
  EXPECT_EQ(doc(ovl({"status", "--overlay", ov, "--json"}))["has_manifest"], false);
}

TEST_F(Ux, StatusOfAnEntryWhoseSourceIsBackAtItsOriginalBytes) {
  ASSERT_EQ(add({}).rc, 0);
  write_file(in.source, "int kernel() { return 4; }\n");  // restored by hand
  EXPECT_EQ(states()[in.source.string()], "original");
  EXPECT_EQ(ovl({"status", "--overlay", ov, "--check-clean"}).rc, 0);
  EXPECT_EQ(ovl({"revert", "--overlay", ov}).rc, 0);
}

TEST_F(Ux, JsonOnEveryNativeSubcommand) {
  Cmd a = add({"--artifact", in.artifact.string(), "--invalidate-cache", in.cache.string(), "--build-cwd",
               in.root.string(), "--build-cmd", kRebuild, "--json"});
  json ja = doc(a);
  expect_envelope(ja, "add-native", a.rc);
  expect_keys(ja, {"overlay", "entry", "files", "counts", "build"});
  EXPECT_EQ(ja["build"]["ok"], true);
  EXPECT_TRUE(fs::exists(ja["build"]["log"].get<std::string>()));
  EXPECT_EQ(ja["files"][0]["change"], "modify");
  EXPECT_NE(a.err.find("OVERLAY_DIR="), std::string::npos) << "human text moves to stderr";

  Cmd v = ovl({"verify-native", "--overlay", ov, "--json"});
  json jv = doc(v);
  expect_envelope(jv, "verify-native", v.rc);
  EXPECT_EQ(jv["result"], "FRESH_BUILD_OK");
  EXPECT_EQ(jv["artifacts"][0]["state"], "rebuilt");

  Cmd s = ovl({"status", "--overlay", ov, "--json"});
  json js = doc(s);
  expect_envelope(js, "status", 0);
  expect_keys(js, {"overlay", "clean", "not_original", "natives", "python"});
  expect_keys(js["natives"][0], {"id", "owner", "created_at", "age_s", "snapshot_bytes", "build_log", "files"});
  EXPECT_GT(js["natives"][0]["snapshot_bytes"].get<long>(), 100000);

  Cmd d = ovl({"revert", "--overlay", ov, "--dry-run", "--json"});
  json jd = doc(d);
  expect_envelope(jd, "revert", 0);
  EXPECT_EQ(jd["dry_run"], true);
  EXPECT_EQ(jd["actions"].size(), 3u);
  EXPECT_EQ(read_file(in.artifact), "rebuilt\n") << "a dry run changes nothing";

  Cmd r = ovl({"revert", "--overlay", ov, "--json"});
  json jr = doc(r);
  expect_envelope(jr, "revert", 0);
  EXPECT_EQ(jr["entries_reverted"], 1);
  EXPECT_EQ(tree_digest(in.root), before);

  Cmd g = ovl({"gc-stale", "--root", t.path().string(), "--dry-run", "--json"});
  json jg = doc(g);
  expect_envelope(jg, "gc-stale", 0);
  expect_keys(jg, {"root", "dry_run", "overlays", "reverted", "would_revert"});
}

TEST_F(Ux, JsonOnFailuresAndUsageErrors) {
  Cmd missing = ovl({"add-native", "--overlay", ov, "--target", (t / "nope.cpp").string(), "--patched-file",
                     (t / "patched.cpp").string(), "--json"});
  expect_envelope(doc(missing), "add-native", 1);
  EXPECT_NE(doc(missing)["error"].get<std::string>().find("does not exist"), std::string::npos);
  Cmd usage = ovl({"revert", "--json"});
  EXPECT_EQ(usage.rc, 2);
  expect_envelope(doc(usage), "revert", 2);
  Cmd bad_flag = ovl({"status", "--overlay", ov, "--frobnicate", "--json"});
  EXPECT_EQ(bad_flag.rc, 2);
  expect_envelope(doc(bad_flag), "status", 2);
  Cmd no_overlay = ovl({"status", "--overlay", (t / "absent").string(), "--json"});
  expect_envelope(doc(no_overlay), "status", 1);
  Cmd verify_fail = ovl({"verify-native", "--overlay", ov, "--json"});  // no manifest
  expect_envelope(doc(verify_fail), "verify-native", 1);
  EXPECT_FALSE(fs::exists(ov));
  // Refusals that are not exceptions carry an error too.
  ASSERT_EQ(add({"--artifact", in.artifact.string()}).rc, 0);  // no build: the artifact stays unchanged
  Cmd not_rebuilt = ovl({"verify-native", "--overlay", ov, "--json"});
  EXPECT_EQ(not_rebuilt.rc, 2);
  expect_envelope(doc(not_rebuilt), "verify-native", 2);
  EXPECT_EQ(doc(not_rebuilt)["artifacts"][0]["state"], "unchanged");
  Cmd dirty = ovl({"status", "--overlay", ov, "--check-clean", "--json"});
  expect_envelope(doc(dirty), "status", 1);
  EXPECT_NE(doc(dirty)["error"].get<std::string>().find("not at their original bytes"), std::string::npos);
  EXPECT_EQ(ovl({"revert", "--overlay", ov}).rc, 0);
}

// Issue 62: a verb this version lacked (the fork's add-triton-launch-probe, which it now has) was
// answered "A subcommand is required", which named nothing; it names the word now, past the
// global flags.
TEST_F(Ux, AnUnknownVerbNamesItself) {
  Cmd plain = ovl({"frobnicate", "--overlay", ov});
  EXPECT_EQ(plain.rc, 2);
  EXPECT_NE(plain.err.find("unknown subcommand 'frobnicate' (overlay --help lists them)"), std::string::npos)
      << plain.err;
  Cmd flagged = ovl({"--lock-timeout", "3", "--json", "add-triton-warmup-probe", "--overlay", ov});
  EXPECT_EQ(flagged.rc, 2);
  expect_envelope(doc(flagged), "overlay", 2);
  EXPECT_EQ(doc(flagged)["error"], "unknown subcommand 'add-triton-warmup-probe' (overlay --help lists them)");
  EXPECT_NE(ovl({}).err.find("A subcommand is required"), std::string::npos);
  EXPECT_FALSE(fs::exists(ov));
}

TEST_F(Ux, JsonOnEveryPythonSubcommand) {
  write_file(t / "site/pkg/__init__.py", "");
  write_file(t / "site/pkg/sub.py", "def value():\n    return 'original'\n");
  write_file(t / "sub.py", "def value():\n    return 'patched'\n");
  write_file(t / "impl.py", "def fast():\n    return 'fast'\n");
  env.push_back("PYTHONPATH=" + (t / "site").string());
  Cmd m =
      ovl({"add-module", "--overlay", ov, "--module", "pkg.sub", "--patched-file", (t / "sub.py").string(), "--json"});
  expect_envelope(doc(m), "add-module", 0);
  expect_keys(doc(m), {"overlay", "summary", "sitecustomize", "pythonpath"});
  Cmd b = ovl({"add-rebind", "--overlay", ov, "--target", "pkg.sub:value", "--impl-module", "impl", "--impl-attr",
               "fast", "--impl-file", (t / "impl.py").string(), "--json"});
  expect_envelope(doc(b), "add-rebind", 0);
  Cmd c = ovl({"add-capture", "--overlay", ov, "--target", "pkg.sub:value", "--out", (t / "cap").string(), "--json"});
  expect_envelope(doc(c), "add-capture", 0);
  EXPECT_TRUE(doc(c)["capture_file"].is_null()) << c.out;  // the binary's own hook
  EXPECT_EQ(read_file(fs::path(ov) / "capture_shapes.py"),
            read_file(fs::path(OVERLAY_SOURCE_DIR) / "share/overlay/capture_shapes.py"));
  Cmd k = ovl({"check", "--module", "pkg.sub", "--json"});
  expect_envelope(doc(k), "check", 0);
  EXPECT_EQ(doc(k)["source"], "install");
  Cmd s = ovl({"status", "--overlay", ov, "--json"});
  json js = doc(s);
  ASSERT_EQ(js["python"].size(), 3u);
  EXPECT_EQ(js["python"][0]["kind"], "module");
  EXPECT_EQ(js["python"][0]["present"], true);
  EXPECT_EQ(js["clean"], true) << "Python entries never change the install";
}

TEST_F(Ux, RevertOnFailureUndoesTheEntryAtOnce) {
  Cmd a =
      add({"--artifact", in.artifact.string(), "--invalidate-cache", in.cache.string(), "--build-cwd", in.root.string(),
           "--build-cmd", "sh -c 'echo half > lib/libk.so; exit 3'", "--revert-on-failure", "--json"});
  EXPECT_EQ(a.rc, 1);
  json j = doc(a);
  expect_envelope(j, "add-native", 1);
  EXPECT_EQ(j["reverted_on_failure"], true);
  EXPECT_EQ(j["build"]["rc"], 3);
  EXPECT_EQ(tree_digest(in.root), before);
  EXPECT_TRUE(json::parse(read_file(t / "ov/_overlay_manifest.json"))["natives"].empty());
  // Without the flag the entry stays for an explicit revert.
  Cmd b = add({"--build-cmd", "false"});
  EXPECT_EQ(b.rc, 1);
  EXPECT_EQ(read_file(in.source), "int kernel() { return 7; }\n");
  EXPECT_EQ(ovl({"revert", "--overlay", ov}).rc, 0);
  EXPECT_EQ(tree_digest(in.root), before);
}

TEST_F(Ux, MultiTargetEntryRoundTrips) {
  write_file(in.root / "src/other.cpp", "int other() { return 1; }\n");
  std::string before2 = tree_digest(in.root);
  write_file(t / "other_patched.cpp", "int other() { return 2; }\n");
  Cmd a = add({"--target", (in.root / "src/other.cpp").string(), "--patched-file", (t / "other_patched.cpp").string()});
  ASSERT_EQ(a.rc, 0) << a.err;
  EXPECT_EQ(read_file(in.root / "src/other.cpp"), "int other() { return 2; }\n");
  EXPECT_EQ(read_file(in.source), "int kernel() { return 7; }\n");
  EXPECT_EQ(states().size(), 2u);
  ASSERT_EQ(ovl({"revert", "--overlay", ov}).rc, 0);
  EXPECT_EQ(tree_digest(in.root), before2);
}

namespace {
// A git-style diff that modifies src/kernel.cpp, creates src/new/ok.h (in an existing dir)
// and deletes src/old.h.
std::string multi_diff() {
  return "diff --git a/src/kernel.cpp b/src/kernel.cpp\n"
         "--- a/src/kernel.cpp\n+++ b/src/kernel.cpp\n@@ -1 +1 @@\n-int kernel() { return 4; }\n+int kernel() { return "
         "7; }\n"
         "diff --git a/src/new.h b/src/new.h\nnew file mode 100644\n"
         "--- /dev/null\n+++ b/src/new.h\n@@ -0,0 +1,2 @@\n+-- not a header line\n+#define NEW 1\n"
         "diff --git a/src/old.h b/src/old.h\ndeleted file mode 100644\n"
         "--- a/src/old.h\n+++ /dev/null\n@@ -1,2 +0,0 @@\n---- looks like a header\n-#define OLD 1\n";
}
}  // namespace

TEST_F(Ux, PatchRootMultiFileDiffCreatesDeletesAndRoundTrips) {
  write_file(in.root / "src/old.h", "--- looks like a header\n#define OLD 1\n");
  std::string before2 = tree_digest(in.root);
  write_file(t / "multi.diff", multi_diff());
  Cmd a = ovl({"add-native", "--overlay", ov, "--patch", (t / "multi.diff").string(), "--patch-root", in.root.string(),
               "--json"});
  ASSERT_EQ(a.rc, 0) << a.err;
  json j = doc(a);
  std::map<std::string, std::string> change;
  for (const auto& f : j["files"]) change[f["path"].get<std::string>()] = f["change"].get<std::string>();
  EXPECT_EQ(change[in.source.string()], "modify");
  EXPECT_EQ(change[(in.root / "src/new.h").string()], "create");
  EXPECT_EQ(change[(in.root / "src/old.h").string()], "delete");
  EXPECT_EQ(read_file(in.source), "int kernel() { return 7; }\n");
  EXPECT_EQ(read_file(in.root / "src/new.h"), "-- not a header line\n#define NEW 1\n");
  EXPECT_FALSE(fs::exists(in.root / "src/old.h"));
  auto st = states();
  EXPECT_EQ(st[(in.root / "src/new.h").string()], "patched");
  EXPECT_EQ(st[(in.root / "src/old.h").string()], "patched");
  Cmd dry = ovl({"revert", "--overlay", ov, "--dry-run"});
  EXPECT_NE(dry.out.find("would remove " + (in.root / "src/new.h").string()), std::string::npos) << dry.out;
  EXPECT_FALSE(fs::exists(in.root / "src/old.h")) << "a dry run changes nothing";
  ASSERT_EQ(ovl({"revert", "--overlay", ov}).rc, 0);
  EXPECT_EQ(tree_digest(in.root), before2);
}

TEST_F(Ux, PatchRootRefusalsChangeNothing) {
  write_file(t / "multi.diff", multi_diff());  // src/old.h does not exist: does not apply
  write_file(t / "rename.diff", "--- a/src/kernel.cpp\n+++ b/src/renamed.cpp\n@@ -1 +1 @@\n-x\n+y\n");
  write_file(t / "escape.diff", "--- a/../etc/passwd\n+++ b/../etc/passwd\n@@ -1 +1 @@\n-x\n+y\n");
  write_file(t / "newdir.diff", "--- /dev/null\n+++ b/nodir/x.h\n@@ -0,0 +1 @@\n+x\n");
  write_file(t / "empty.diff", "not a diff at all\n");
  std::string p = (t / "multi.diff").string(), root = in.root.string();
  expect_refused_unchanged(
      {
          {"add-native", "--overlay", ov, "--patch", p, "--patch-root", root},
          {"add-native", "--overlay", ov, "--patch", (t / "rename.diff").string(), "--patch-root", root},
          {"add-native", "--overlay", ov, "--patch", (t / "escape.diff").string(), "--patch-root", root},
          {"add-native", "--overlay", ov, "--patch", (t / "newdir.diff").string(), "--patch-root", root},
          {"add-native", "--overlay", ov, "--patch", (t / "empty.diff").string(), "--patch-root", root},
          {"add-native", "--overlay", ov, "--patch", p, "--patch-root", (t / "absent").string()},
          {"add-native", "--overlay", ov, "--patch-root", root},
          {"add-native", "--overlay", ov, "--patch", p, "--patch-root", root, "--target", in.source.string()},
          {"add-native", "--overlay", ov, "--patch", p, "--patch-root", root, "-p", "99"},
          {"add-native", "--overlay", ov, "--target", in.source.string(), "--patch", p, "-p", "0"},
      },
      t.path(), [&](const std::vector<std::string>& a) { return ovl(a); });
}

TEST_F(Ux, ProgressLineOnlyOnATerminalAndNoColorHonoured) {
  if (run({"script", "-qfec", "true", "/dev/null"}).rc != 0)
    GTEST_SKIP() << "script(1) cannot give the binary a terminal here";
  write_file(in.artifact, std::string(24u << 20, 'x'));
  std::string cmd = std::string(overlay_binary()) + " add-native --overlay " + ov + " --target " + in.source.string() +
                    " --patched-file " + (t / "patched.cpp").string() + " --artifact " + in.artifact.string();
  // On a terminal: a progress line for the 24 MiB copy, erased again.
  Cmd tty = run({"script", "-qfec", cmd, "/dev/null"}, t.path(), env);
  ASSERT_EQ(tty.rc, 0) << tty.out << tty.err;
  EXPECT_NE(tty.out.find("copy libk.so"), std::string::npos) << tty.out;
  EXPECT_NE(tty.out.find("\r\033[K"), std::string::npos);
  ASSERT_EQ(ovl({"revert", "--overlay", ov}).rc, 0);
  // Not a terminal: no progress line at all.
  Cmd pipe = run({"sh", "-c", cmd}, t.path(), env);
  ASSERT_EQ(pipe.rc, 0) << pipe.err;
  EXPECT_EQ(pipe.err.find("copy libk.so"), std::string::npos) << pipe.err;
  EXPECT_EQ(pipe.err.find('\r'), std::string::npos);
  // Log levels are coloured on a terminal unless NO_COLOR is set.
  std::string warn = std::string(overlay_binary()) + " -v revert --overlay " + ov;
  Cmd coloured = run({"script", "-qfec", warn, "/dev/null"}, t.path(), env);
  EXPECT_NE(coloured.out.find("\033[32m"), std::string::npos) << coloured.out;
  ASSERT_EQ(add({"--artifact", in.artifact.string()}).rc, 0);
  std::vector<std::string> plain = env;
  plain.push_back("NO_COLOR=1");
  Cmd uncoloured = run({"script", "-qfec", warn, "/dev/null"}, t.path(), plain);
  EXPECT_NE(uncoloured.out.find("restore"), std::string::npos) << uncoloured.out;
  EXPECT_EQ(uncoloured.out.find("\033[3"), std::string::npos) << uncoloured.out;
  // Tar snapshots and their restore report progress too.
  std::string tar_add = std::string(overlay_binary()) + " add-native --overlay " + ov + " --target " +
                        in.source.string() + " --patched-file " + (t / "patched.cpp").string() +
                        " --invalidate-cache " + in.cache.string() + " --cache-snapshot tar";
  Cmd snap = run({"script", "-qfec", tar_add, "/dev/null"}, t.path(), env);
  ASSERT_EQ(snap.rc, 0) << snap.out;
  EXPECT_NE(snap.out.find("snapshot " + in.cache.string()), std::string::npos) << snap.out;
  Cmd restore =
      run({"script", "-qfec", std::string(overlay_binary()) + " revert --overlay " + ov, "/dev/null"}, t.path(), env);
  ASSERT_EQ(restore.rc, 0) << restore.out;
  EXPECT_NE(restore.out.find("restore cache_0.tar"), std::string::npos) << restore.out;
}
