// What the build read and wrote, observed (issue 61): the shapes where a guess of it made the tool
// print FRESH_BUILD_OK, "install clean" or "nothing to redo" over a build that was stale or
// broken. Each runs the real binary on a real build (Make, CMake + Ninja, a generator script) and
// checks the claim against what the program then prints and what the install's own build does.
#include <signal.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "test_util.hpp"

using namespace overlay::test;
using json = nlohmann::json;

namespace {

struct Traced : ::testing::Test {
  TempDir t;
  std::string ov = (t / "ov").string();
  std::vector<std::string> env = {"OVERLAY_STATE_DIR=" + (t / "state").string()};

  void SetUp() override {
    if (::geteuid() != 0 && !have({"sh", "-c", "exit 0"})) GTEST_SKIP() << "needs sh";
  }
  Cmd overlay(std::vector<std::string> args, const fs::path& cwd = {}) { return run_overlay(args, cwd, env); }
  // add-native with `args`; the JSON document of its result (rc checked).
  json add(std::vector<std::string> args, const fs::path& cwd = {}) {
    args.insert(args.begin(), {"--json", "add-native", "--overlay", ov});
    Cmd a = overlay(args, cwd);
    EXPECT_EQ(a.rc, 0) << a.err;
    json j = json::parse(a.out.empty() ? "{}" : a.out);
    j["stderr"] = a.err;
    return j;
  }
  static std::string store_of(const json& j) { return j["build"]["store"]["state"].get<std::string>(); }
  std::string revert() {
    Cmd r = overlay({"revert", "--overlay", ov});
    EXPECT_EQ(r.rc, 0) << r.err;
    return r.err;
  }
  void expect_clean() {
    Cmd s = overlay({"status", "--overlay", ov, "--check-clean"});
    EXPECT_EQ(s.rc, 0) << s.out << s.err;
  }
  static std::string out_of(const fs::path& prog) {
    Cmd c = run({prog.string()});
    return c.rc == 0 ? c.out.substr(0, c.out.find('\n')) : "error: " + c.err;
  }
  void require(const std::vector<std::string>& tool, const char* package) {
    if (!have(tool)) GTEST_SKIP() << "needs " << tool[0] << " (Debian: " << package << ")";
  }
  // A C project at `src` (its CMakeLists.txt `lists`, its sources `files` by name) configured
  // into `b` with Ninja (and `extra` flags) and built: the install a test applies candidates to.
  static void cmake_install(const fs::path& src, const fs::path& b, const std::string& lists,
                            const std::vector<std::pair<std::string, std::string>>& files,
                            const std::vector<std::string>& extra = {}) {
    write_file(src / "CMakeLists.txt", "cmake_minimum_required(VERSION 3.16)\nproject(p C)\n" + lists);
    for (const auto& [name, text] : files) write_file(src / name, text);
    std::vector<std::string> argv = {"cmake", "-S", src.string(), "-B", b.string(), "-G", "Ninja"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    ASSERT_EQ(run(argv).rc, 0);
    ASSERT_EQ(run({"ninja", "-C", b.string()}).rc, 0);
  }
  void require_cmake() {
    require({"cmake", "--version"}, "cmake");
    require({"ninja", "--version"}, "ninja-build");
  }
};

const char* kMain = "#include <stdio.h>\nint value(void);\nint main(void) { printf(\"%d\\n\", value()); return 0; }\n";

}  // namespace

// README's form of a Make install (--build-cmd "make -C DIR", no --build-cwd, run from the agent's
// task dir): a flag changed in the Makefile after the first apply is a miss, named, and the
// candidate is built with the new flag.
TEST_F(Traced, AMakefileFlagChangedSinceIsAMissNamed) {
  require({"make", "--version"}, "make");
  fs::path p = t / "pkg", task = t / "task";
  fs::create_directories(task);
  write_file(p / "Makefile", "VAL = 1\nprog: k.c main.c\n\tcc -DVAL=$(VAL) -o prog k.c main.c\n");
  write_file(p / "k.c", "int value(void) { return 40 + VAL; }\n");
  write_file(p / "main.c", kMain);
  write_file(t / "k7.c", "int value(void) { return 70 + VAL; }\n");
  ASSERT_EQ(run({"make", "-s", "-C", p.string()}).rc, 0);
  std::vector<std::string> args = {"--target",   (p / "k.c").string(),  "--patched-file", (t / "k7.c").string(),
                                   "--artifact", (p / "prog").string(), "--build-cmd",    "make -C " + p.string()};
  json a = add(args, task);
  EXPECT_EQ(store_of(a), "miss");
  EXPECT_EQ(out_of(p / "prog"), "71");
  revert();
  EXPECT_EQ(out_of(p / "prog"), "41");
  write_file(p / "Makefile", "VAL = 2\nprog: k.c main.c\n\tcc -DVAL=$(VAL) -o prog k.c main.c\n");
  ASSERT_EQ(run({"make", "-s", "-B", "-C", p.string()}).rc, 0);  // the Makefile is no prerequisite: rebuilt by hand
  EXPECT_EQ(out_of(p / "prog"), "42");
  json b = add(args, task);
  EXPECT_EQ(store_of(b), "miss") << b["stderr"];
  EXPECT_NE(b["build"]["store"]["why"].get<std::string>().find(p.string() + "/Makefile"), std::string::npos)
      << b["build"]["store"];
  EXPECT_EQ(out_of(p / "prog"), "72");
  revert();
  json c = add(args, task);
  EXPECT_EQ(store_of(c), "hit") << c["stderr"];
  EXPECT_EQ(out_of(p / "prog"), "72");
  revert();
  EXPECT_EQ(out_of(p / "prog"), "42");
  expect_clean();
}

// A header beside the source gets new bytes of the same size with its mtime set back (cp -p,
// rsync -a, a tarball): its bytes are the key, not its stamp. And a quiet Make build (@cc, no
// depfile) meets a header added to an include dir searched first: the probe that found nothing
// there is in the key.
TEST_F(Traced, ASameSizeHeaderAndAShadowingHeaderAreMisses) {
  require({"make", "--version"}, "make");
  fs::path p = t / "pkg";
  fs::create_directories(t / "inc1");
  write_file(p / "Makefile", "prog: k.c main.c\n\t@cc -I../inc1 -I../inc2 -o prog k.c main.c\n");
  write_file(p / "h.h", "#define H 1\n");
  write_file(t / "inc2/g.h", "#define G 10\n");
  const std::string body = "#include \"h.h\"\n#include \"g.h\"\nint value(void) { return V + H + G; }\n";
  write_file(p / "k.c", "#define V 400\n" + body);
  write_file(t / "k7.c", "#define V 700\n" + body);
  write_file(p / "main.c", kMain);
  ASSERT_EQ(run({"make", "-s", "-C", p.string()}).rc, 0);
  std::vector<std::string> args = {"--target",       (p / "k.c").string(),
                                   "--patched-file", (t / "k7.c").string(),
                                   "--artifact",     (p / "prog").string(),
                                   "--build-cmd",    "make",
                                   "--build-cwd",    p.string()};
  add(args);
  EXPECT_EQ(out_of(p / "prog"), "711");
  revert();
  EXPECT_EQ(store_of(add(args)), "hit");
  revert();
  // Same size, mtime set back: only the bytes tell.
  ASSERT_EQ(run({"cp", "-p", (p / "h.h").string(), (t / "h.old").string()}).rc, 0);
  write_file(p / "h.h", "#define H 2\n");
  ASSERT_EQ(run({"touch", "-r", (t / "h.old").string(), (p / "h.h").string()}).rc, 0);
  json a = add(args);
  EXPECT_EQ(store_of(a), "miss");
  EXPECT_NE(a["build"]["store"]["why"].get<std::string>().find("h.h: its bytes changed"), std::string::npos)
      << a["build"]["store"];
  EXPECT_EQ(out_of(p / "prog"), "712");
  revert();
  // A g.h of its own in the dir searched first: nothing changed in the dir where g.h was found.
  write_file(t / "inc1/g.h", "#define G 50\n");
  json b = add(args);
  EXPECT_EQ(store_of(b), "miss");
  EXPECT_NE(b["build"]["store"]["why"].get<std::string>().find((t / "inc1/g.h").string()), std::string::npos)
      << b["build"]["store"];
  EXPECT_EQ(out_of(p / "prog"), "752");
  revert();
  expect_clean();
}

// A compiler named by its absolute path, on no PATH, upgraded in place (same path, same size,
// mtime set back): what runs is keyed by its real path and bytes. And a tool the build never ran
// appearing on PATH (a package install) changes nothing: a hit, which exec's JSON says.
TEST_F(Traced, AnAbsolutePathCompilerUpgradedInPlaceIsAMissAndAToolNotRunIsNot) {
  require_cmake();
  fs::path src = t / "src", b = t / "build", cc = t / "tc/bin/mycc";
  write_file(cc, "#!/bin/sh\nexec cc -DEXTRA=0 \"$@\"\n", 0755);
  const std::string body = "int value(void) { return V + EXTRA; }\n";
  write_file(t / "k7.c", "#define V 7\n" + body);
  cmake_install(src, b, "add_library(k SHARED k.c)\nadd_executable(run main.c)\ntarget_link_libraries(run k)\n",
                {{"k.c", "#define V 4\n" + body}, {"main.c", kMain}}, {"-DCMAKE_C_COMPILER=" + cc.string()});
  std::vector<std::string> args = {"--target",       (src / "k.c").string(),
                                   "--patched-file", (t / "k7.c").string(),
                                   "--artifact",     (b / "libk.so").string(),
                                   "--build-cmd",    "ninja -C " + b.string(),
                                   "--build-cwd",    b.string()};
  add(args);
  EXPECT_EQ(out_of(b / "run"), "7");
  revert();
  ASSERT_EQ(run({"cp", "-p", cc.string(), (t / "mycc.old").string()}).rc, 0);
  write_file(cc, "#!/bin/sh\nexec cc -DEXTRA=50 \"$@\"\n", 0755);
  ASSERT_EQ(run({"touch", "-r", (t / "mycc.old").string(), cc.string()}).rc, 0);
  json a = add(args);
  EXPECT_EQ(store_of(a), "miss");
  EXPECT_NE(a["build"]["store"]["why"].get<std::string>().find(cc.string()), std::string::npos) << a["build"]["store"];
  EXPECT_EQ(out_of(b / "run"), "57");
  revert();
  // A meson of its own now first on PATH: nothing the build runs.
  write_file(t / "bin/meson", "#!/bin/sh\nexit 0\n", 0755);
  env.push_back("PATH=" + (t / "bin").string() + ":" + std::getenv("PATH"));
  std::vector<std::string> exec = {"--json", "exec", "--overlay", ov};
  exec.insert(exec.end(), args.begin(), args.end());
  exec.insert(exec.end(), {"--", (b / "run").string()});
  // The PATH itself is the recipe's (it is in the environment): the record is made under it once.
  Cmd e1 = overlay(exec);
  ASSERT_EQ(e1.rc, 0) << e1.err;
  write_file(t / "bin/cmake", "#!/bin/sh\nexit 1\n", 0755);  // and another tool the build never runs
  Cmd e2 = overlay(exec);
  ASSERT_EQ(e2.rc, 0) << e2.err;
  json j = json::parse(e2.out);
  EXPECT_EQ(j["apply"]["build"]["store"]["state"], "hit") << e2.out;
  EXPECT_NE(e2.err.find("store: hit"), std::string::npos) << e2.err;
  expect_clean();
}

// A unity translation unit (all.c #includes the patched k.c, as GoogleTest's gtest-all.cc does
// every src/*.cc): revert puts back the object the candidate's build left, so the install's next
// build has nothing to relink, and the install never holds the patched code again.
TEST_F(Traced, AUnityTranslationUnitDoesNotBringThePatchBack) {
  require_cmake();
  fs::path src = t / "src", b = t / "build";
  write_file(t / "k7.c", "int value(void) { return 7; }\n");
  cmake_install(src, b, "add_library(k STATIC all.c)\nadd_executable(run main.c)\ntarget_link_libraries(run k)\n",
                {{"all.c", "#include \"k.c\"\n#include \"m.c\"\n"},
                 {"k.c", "int value(void) { return 4; }\n"},
                 {"m.c", "int other(void) { return 1; }\n"},
                 {"main.c", kMain}});
  std::string lib = file_sha256(b / "libk.a");
  add({"--target", (src / "k.c").string(), "--patched-file", (t / "k7.c").string(), "--artifact",
       (b / "libk.a").string(), "--artifact", (b / "run").string(), "--build-cmd", "ninja -C " + b.string()});
  EXPECT_EQ(out_of(b / "run"), "7");
  Cmd v = overlay({"verify-native", "--overlay", ov});
  EXPECT_NE(v.out.find("FRESH_BUILD_OK"), std::string::npos) << v.out;
  std::string r = revert();
  EXPECT_NE(r.find("original mtimes back"), std::string::npos) << r;
  EXPECT_EQ(file_sha256(b / "libk.a"), lib);
  Cmd n = run({"ninja", "-C", b.string(), "-n", "-d", "explain"});
  EXPECT_NE(n.out.find("no work to do"), std::string::npos) << n.out << n.err;
  ASSERT_EQ(run({"ninja", "-C", b.string()}).rc, 0);
  EXPECT_EQ(out_of(b / "run"), "4") << "the install's next build brought the candidate back";
  EXPECT_EQ(file_sha256(b / "libk.a"), lib);
  expect_clean();
}

// The build's bookkeeping goes back with its outputs. A candidate drops k.c's include of k.h; after
// its revert Ninja's deps log must name k.h for k.c's object again, so the next candidate, a
// change to k.h, rebuilds both objects that include it (discover names both too).
TEST_F(Traced, NinjasDepsLogComesBackSoTheNextHeaderChangeRebuildsEverything) {
  require_cmake();
  fs::path src = t / "src", b = t / "build";
  write_file(t / "k-noinclude.c", "int kv(void) { return 5; }\n");
  write_file(t / "k6.h", "#define K 6\n");
  cmake_install(
      src, b, "add_library(k SHARED k.c m.c)\nadd_executable(run main.c)\ntarget_link_libraries(run k)\n",
      {{"k.h", "#define K 5\n"},
       {"k.c", "#include \"k.h\"\nint kv(void) { return K; }\n"},
       {"m.c", "#include \"k.h\"\nint mv(void) { return 10 * K; }\n"},
       {"main.c",
        "#include <stdio.h>\nint kv(void);\nint mv(void);\nint main(void) { printf(\"%d %d\\n\", kv(), mv()); }\n"}});
  std::string build = "ninja -C " + b.string();
  add({"--target", (src / "k.c").string(), "--patched-file", (t / "k-noinclude.c").string(), "--artifact",
       (b / "libk.so").string(), "--build-cmd", build});
  revert();
  Cmd deps = run({"ninja", "-C", b.string(), "-t", "deps", "CMakeFiles/k.dir/k.c.o"});
  EXPECT_NE(deps.out.find("k.h"), std::string::npos) << deps.out;
  Cmd n = run({"ninja", "-C", b.string(), "-n"});
  EXPECT_NE(n.out.find("no work to do"), std::string::npos) << n.out;
  Cmd d = overlay({"--json", "discover", "--target", (src / "k.h").string(), "--root", t.path().string()});
  EXPECT_NE(d.out.find("k.c.o"), std::string::npos) << d.out;
  EXPECT_NE(d.out.find("m.c.o"), std::string::npos) << d.out;
  add({"--target", (src / "k.h").string(), "--patched-file", (t / "k6.h").string(), "--artifact",
       (b / "libk.so").string(), "--build-cmd", build});
  EXPECT_EQ(out_of(b / "run"), "6 60") << "a library half built from the old header";
  revert();
  EXPECT_EQ(out_of(b / "run"), "5 50");
  expect_clean();
}

// Two agents on one CMake + Ninja install whose gen.h a custom command (a restat rule) makes from
// gen.txt, which changed since the last build. A's candidate does not compile, but its build
// regenerated gen.h first; B's build of the other library wrote Ninja's log after. Reverted A then
// B (not newest first), gen.h went back to the old header while the log kept A's build's record
// of it: Ninja judged gen.h by that record and never made it again, so every later build compiled
// the stale header (the claims checker's seed 502486540). Now the records of what a revert puts
// back go from a log it cannot put back with them, and the next build remakes gen.h.
TEST_F(Traced, AGeneratedHeaderPutBackIsRemadeThoughAnotherBuildWroteNinjasLog) {
  require_cmake();
  fs::path src = t / "src", b = t / "build";
  write_file(src / "gen.txt", "1\n");
  write_file(src / "gen.sh", "printf '#define G %s\\n' \"$(cat \"$1\")\" > \"$2\"\n");
  cmake_install(src, b,
                "add_custom_command(OUTPUT ${CMAKE_BINARY_DIR}/gen.h COMMAND sh ${CMAKE_SOURCE_DIR}/gen.sh "
                "${CMAKE_SOURCE_DIR}/gen.txt ${CMAKE_BINARY_DIR}/gen.h DEPENDS ${CMAKE_SOURCE_DIR}/gen.txt)\n"
                "include_directories(${CMAKE_BINARY_DIR})\n"
                "add_library(ka SHARED ka.c ${CMAKE_BINARY_DIR}/gen.h)\n"
                "add_library(kb SHARED kb.c ${CMAKE_BINARY_DIR}/gen.h)\n"
                "add_executable(run main.c)\ntarget_link_libraries(run ka kb)\n",
                {{"ka.c", "#include \"gen.h\"\nint ka(void) { return G; }\n"},
                 {"kb.c", "#include \"gen.h\"\nint kb(void) { return 10 * G; }\n"},
                 {"main.c",
                  "#include <stdio.h>\nint ka(void);\nint kb(void);\n"
                  "int main(void) { printf(\"%d %d\\n\", ka(), kb()); }\n"}});
  ASSERT_EQ(out_of(b / "run"), "1 10");
  ::sleep(1);  // gen.txt newer than gen.h by the filesystem's clock
  write_file(src / "gen.txt", "2\n");
  write_file(t / "ka-broken.c", "int ka(void) { return NOT_DECLARED; }\n");
  write_file(t / "kb-new.c", "#include \"gen.h\"\nint kb(void) { return 100 * G; }\n");
  std::string a = (t / "a").string(), bo = (t / "b").string();
  Cmd fails = overlay({"add-native", "--overlay", a, "--target", (src / "ka.c").string(), "--patched-file",
                       (t / "ka-broken.c").string(), "--artifact", (b / "libka.so").string(), "--build-cmd",
                       "ninja -C " + b.string() + " libka.so"});
  ASSERT_NE(fails.rc, 0) << fails.err;
  ASSERT_EQ(read_file(b / "gen.h"), "#define G 2\n") << "the failed build did not regenerate gen.h first";
  Cmd builds = overlay({"add-native", "--overlay", bo, "--target", (src / "kb.c").string(), "--patched-file",
                        (t / "kb-new.c").string(), "--artifact", (b / "libkb.so").string(), "--build-cmd",
                        "ninja -C " + b.string() + " libkb.so"});
  ASSERT_EQ(builds.rc, 0) << builds.err;
  for (const std::string& o : {a, bo}) {
    Cmd r = overlay({"revert", "--overlay", o});
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_EQ(r.err.find("may hold patched code"), std::string::npos) << "Ninja's log holds no code\n" << r.err;
  }
  EXPECT_EQ(read_file(b / "gen.h"), "#define G 1\n") << "gen.h is not the one from before A's build";
  ASSERT_EQ(run({"ninja", "-C", b.string()}).rc, 0);
  EXPECT_EQ(read_file(b / "gen.h"), "#define G 2\n") << "Ninja did not remake gen.h after gen.txt changed";
  EXPECT_EQ(out_of(b / "run"), "2 20");
}

// The same with Ninja's deps log: A's candidate of ka.c does without k.h, B's build of kb.c wrote
// the deps log after, and the two were reverted oldest first. ka.o went back, but the deps log
// would have kept A's record of it (no k.h) with a newer mtime than the restored object, so a
// later change of k.h would not recompile ka.o. Its records go instead, and Ninja remakes it.
TEST_F(Traced, AnObjectPutBackIsRemadeThoughAnotherBuildWroteNinjasDepsLog) {
  require_cmake();
  fs::path src = t / "src", b = t / "build";
  cmake_install(src, b,
                "add_library(ka SHARED ka.c)\nadd_library(kb SHARED kb.c)\n"
                "add_executable(run main.c)\ntarget_link_libraries(run ka kb)\n",
                {{"k.h", "#define K 1\n"},
                 {"ka.c", "#include \"k.h\"\nint ka(void) { return K; }\n"},
                 {"kb.c", "#include \"k.h\"\nint kb(void) { return 10 * K; }\n"},
                 {"main.c",
                  "#include <stdio.h>\nint ka(void);\nint kb(void);\n"
                  "int main(void) { printf(\"%d %d\\n\", ka(), kb()); }\n"}});
  write_file(t / "ka-alone.c", "int ka(void) { return 7; }\n");
  write_file(t / "kb-new.c", "#include \"k.h\"\nint kb(void) { return 100 * K; }\n");
  std::string a = (t / "a").string(), bo = (t / "b").string();
  for (const auto& [o, lib, file, patched] :
       {std::tuple{a, "libka.so", "ka.c", "ka-alone.c"}, std::tuple{bo, "libkb.so", "kb.c", "kb-new.c"}}) {
    Cmd c = overlay({"add-native", "--overlay", o, "--target", (src / file).string(), "--patched-file",
                     (t / patched).string(), "--artifact", (b / lib).string(), "--build-cmd",
                     "ninja -C " + b.string() + " " + lib});
    ASSERT_EQ(c.rc, 0) << c.err;
  }
  ASSERT_EQ(out_of(b / "run"), "7 100");
  for (const std::string& o : {a, bo}) ASSERT_EQ(overlay({"revert", "--overlay", o}).rc, 0);
  ASSERT_EQ(run({"ninja", "-C", b.string()}).rc, 0);
  ASSERT_EQ(out_of(b / "run"), "1 10");
  Cmd deps = run({"ninja", "-C", b.string(), "-t", "deps", "CMakeFiles/ka.dir/ka.c.o"});
  EXPECT_NE(deps.out.find("k.h"), std::string::npos) << "ka.o's deps still A's\n" << deps.out;
  write_file(src / "k.h", "#define K 2\n");
  ASSERT_EQ(run({"ninja", "-C", b.string()}).rc, 0);
  EXPECT_EQ(out_of(b / "run"), "2 20") << "ka.o was not recompiled after k.h changed";
}

// The same with Make's -MMD depfiles, and a candidate diff that creates a header its source
// includes: after revert the depfile no longer names the header the revert removed, so the
// install's own build still runs and has nothing to do.
TEST_F(Traced, MakesDepfilesComeBackAndACreatedHeaderLeavesNoDanglingRule) {
  require({"make", "--version"}, "make");
  require({"patch", "--version"}, "patch");
  fs::path p = t / "pkg";
  write_file(p / "Makefile",
             "prog: src/k.o src/m.o main.o\n\tcc -o prog $^\n%.o: %.c\n\tcc -MMD -c -o $@ $<\n-include src/*.d *.d\n");
  write_file(p / "src/k.h", "#define K 5\n");
  write_file(p / "src/k.c", "#include \"k.h\"\nint kv(void) { return K; }\n");
  write_file(p / "src/m.c", "#include \"k.h\"\nint mv(void) { return 10 * K; }\n");
  write_file(
      p / "main.c",
      "#include <stdio.h>\nint kv(void);\nint mv(void);\nint main(void) { printf(\"%d %d\\n\", kv(), mv()); }\n");
  ASSERT_EQ(run({"make", "-s", "-C", p.string()}).rc, 0);
  std::string before = tree_digest(p);
  write_file(
      t / "tile.diff",
      "--- a/src/k.c\n+++ b/src/k.c\n@@ -1,2 +1,2 @@\n-#include \"k.h\"\n-int kv(void) { return K; }\n+#include "
      "\"tile.h\"\n+int kv(void) { return TILE; }\n--- /dev/null\n+++ b/src/tile.h\n@@ -0,0 +1 @@\n+#define TILE 8\n");
  add({"--patch", (t / "tile.diff").string(), "--patch-root", p.string(), "--artifact", (p / "prog").string(),
       "--build-cmd", "make", "--build-cwd", p.string()});
  EXPECT_EQ(out_of(p / "prog"), "8 50");
  revert();
  EXPECT_EQ(tree_digest(p), before) << "every file of the install as before, depfiles included";
  Cmd q = run({"make", "-q", "-C", p.string()});
  EXPECT_EQ(q.rc, 0) << "the install's build has work to do after revert: " << q.out << q.err;
  Cmd m = run({"make", "-C", p.string()});
  EXPECT_EQ(m.rc, 0) << m.out << m.err;
  write_file(t / "k6.h", "#define K 6\n");
  add({"--target", (p / "src/k.h").string(), "--patched-file", (t / "k6.h").string(), "--artifact",
       (p / "prog").string(), "--build-cmd", "make", "--build-cwd", p.string()});
  EXPECT_EQ(out_of(p / "prog"), "6 60");
  revert();
  EXPECT_EQ(tree_digest(p), before);
  expect_clean();
}

// A generating build (CUTLASS/CK-style instance generators) deletes an original generated file
// when the candidate's config drops it: revert brings it back, and nothing is left to redo.
TEST_F(Traced, AGeneratedFileTheBuildDeletedComesBack) {
  fs::path p = t / "pkg";
  write_file(p / "instances.txt", "a\nb\nc\n");
  write_file(
      p / "gen.sh",
      "#!/bin/sh\nset -e\ncd \"$(dirname \"$0\")\"\nmkdir -p gen\nfor f in gen/*.c; do [ -e \"$f\" ] || continue; "
      "n=$(basename \"$f\" .c); grep -qx \"$n\" instances.txt || rm \"$f\"; done\nwhile read -r n; do [ -f "
      "gen/$n.c ] || echo \"int inst_$n(void) { return 1; }\" > gen/$n.c; done < instances.txt\ncat gen/*.c > "
      "all.c\n",
      0755);
  ASSERT_EQ(run({"sh", (p / "gen.sh").string()}).rc, 0);
  ASSERT_TRUE(fs::exists(p / "gen/b.c"));
  std::string before = tree_digest(p);
  write_file(t / "instances.txt", "a\nc\n");
  add({"--target", (p / "instances.txt").string(), "--patched-file", (t / "instances.txt").string(), "--artifact",
       (p / "all.c").string(), "--build-cmd", "sh " + (p / "gen.sh").string(), "--build-cwd", p.string()});
  EXPECT_FALSE(fs::exists(p / "gen/b.c"));
  std::string r = revert();
  EXPECT_TRUE(fs::exists(p / "gen/b.c")) << r;
  EXPECT_EQ(tree_digest(p), before);
  expect_clean();
}

// The loop's end: two candidates accepted by fold into one overlay, then the pipeline's finalize
// (export, revert with its layers): the install's build has nothing to do, every byte original;
// the bundle's two entries, built the same way, replay with one build, and its revert leaves the
// build idle too.
TEST_F(Traced, TheLoopsEndLeavesTheBuildIdleAndATwoEntryReplayBuildsOnce) {
  require_cmake();
  fs::path root = t / "inst", src = root / "src", b = root / "build", builds = t / "builds";
  write_file(t / "ka7.c", "int ka(void) { return 7; }\n");
  write_file(t / "kb9.c", "int kb(void) { return 9; }\n");
  cmake_install(
      src, b, "add_library(k SHARED ka.c kb.c)\nadd_executable(run main.c)\ntarget_link_libraries(run k)\n",
      {{"ka.c", "int ka(void) { return 4; }\n"},
       {"kb.c", "int kb(void) { return 2; }\n"},
       {"main.c",
        "#include <stdio.h>\nint ka(void);\nint kb(void);\nint main(void) { printf(\"%d%d\\n\", ka(), kb()); }\n"}});
  std::string pristine = tree_digest(root);
  std::string acc = (t / "acc").string();
  json fold;
  auto candidate = [&](const std::string& cand, const fs::path& target, const fs::path& patched) {
    Cmd a =
        overlay({"add-native", "--overlay", cand, "--over", acc, "--target", target.string(), "--patched-file",
                 patched.string(), "--artifact", (b / "libk.so").string(), "--build-cmd",
                 "sh -c 'echo b >> " + builds.string() + "; ninja -C " + b.string() + "'", "--build-cwd", b.string()});
    ASSERT_EQ(a.rc, 0) << a.err;
    Cmd f = overlay({"--json", "fold", "--from", cand, "--into", acc});
    ASSERT_EQ(f.rc, 0) << f.err;
    fold = json::parse(f.out);
  };
  candidate((t / "c1").string(), src / "ka.c", t / "ka7.c");
  EXPECT_EQ(out_of(b / "run"), "72");
  candidate((t / "c2").string(), src / "kb.c", t / "kb9.c");
  EXPECT_EQ(out_of(b / "run"), "79");
  // The library both candidates rebuilt stays tracked (by the accepted overlay's item, which keeps
  // its original), and what both builds changed merged: the fold says so.
  EXPECT_EQ(fold["merged"], json::array({(b / "libk.so").string()})) << fold;
  EXPECT_FALSE(fold["outputs_merged"].empty()) << fold;
  ASSERT_EQ(overlay({"export", "--overlay", acc, "--out", (t / "bundle").string()}).rc, 0);
  Cmd r = overlay({"revert", "--overlay", acc, "--with-layers"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.err.find("sources dated now"), std::string::npos) << r.err;
  Cmd n = run({"ninja", "-C", b.string(), "-n", "-d", "explain"});
  EXPECT_NE(n.out.find("no work to do"), std::string::npos) << "finalize left the build work to do:\n"
                                                            << n.out << n.err;
  EXPECT_EQ(out_of(b / "run"), "42");
  ASSERT_TRUE(settle_litter(root));
  EXPECT_EQ(tree_digest(root), pristine);

  fs::remove(builds);
  Cmd p = overlay({"replay", "--bundle", (t / "bundle").string(), "--overlay", (t / "rep").string()});
  ASSERT_EQ(p.rc, 0) << p.err;
  EXPECT_NE(p.out.find("FRESH_BUILD_OK"), std::string::npos) << p.out;
  EXPECT_EQ(out_of(b / "run"), "79");
  EXPECT_EQ(read_file(builds), "b\n") << "a two-entry replay ran its build more than once";
  ASSERT_EQ(overlay({"revert", "--overlay", (t / "rep").string()}).rc, 0);
  Cmd n2 = run({"ninja", "-C", b.string(), "-n"});
  EXPECT_NE(n2.out.find("no work to do"), std::string::npos) << n2.out;
  ASSERT_TRUE(settle_litter(root));
  EXPECT_EQ(tree_digest(root), pristine);
  for (const auto& o : {acc, (t / "rep").string()})
    EXPECT_EQ(overlay({"status", "--overlay", o, "--check-clean"}).rc, 0) << o;
}

// add-native killed (-9) while its build runs: its record never says what the build changed, but
// the journal the tracer wrote as the build went does, and revert puts back all of it — the
// object it rewrote and the log it appended to — leaving the install as before.
TEST_F(Traced, ABuildKilledMidwayIsUndoneFromItsJournal) {
  fs::path p = t / "pkg";
  write_file(p / "k.c", "int k;\n");
  write_file(p / "k.o", "original object");
  write_file(p / ".ninja_log", "# ninja log v5\n");
  write_file(t / "k7.c", "int k = 7;\n");
  std::string before = tree_digest(p);
  pid_t pid = spawn_overlay({"add-native", "--overlay", ov, "--target", (p / "k.c").string(), "--patched-file",
                             (t / "k7.c").string(), "--build-cwd", p.string(), "--build-cmd",
                             "sh -c 'echo built > k.o; echo 1 >> .ninja_log; echo n > new.o; touch " +
                                 (t / "started").string() + "; sleep 100'"},
                            env);
  ASSERT_TRUE(until_ready_or_exited(pid, [&] { return fs::exists(t / "started"); }));
  ::kill(pid, SIGKILL);  // its tracer dies with it, and the build with the tracer
  EXPECT_EQ(wait_rc(pid), 128 + SIGKILL);
  EXPECT_EQ(read_file(p / "k.o"), "built\n");
  std::string r = revert();
  EXPECT_NE(r.find("its journal holds are put back"), std::string::npos) << r;
  EXPECT_NE(r.find("sources dated now"), std::string::npos) << r;  // what else it did is not known
  EXPECT_EQ(tree_digest(p), before);
}
