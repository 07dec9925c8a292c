// A candidate built once is not built again (issue 51): add-native keeps what a successful build
// made in the build store, and applying the same candidate again puts it back instead of
// building. Every input that decides the build is part of the key; each test here changes one and
// makes a wrong hit visible in what the program prints. Through the real binary, real CMake and
// Ninja, a compiler wrapper that counts compiles.
#include <unistd.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "test_util.hpp"

using namespace overlay::test;
using json = nlohmann::json;

namespace {

struct BuildStoreCli : ::testing::Test {
  TempDir t;
  fs::path proj = t / "proj", bdir = t / "proj/build", state = t / "state";
  std::string ov = (t / "ov").string();
  std::vector<std::string> env = {"OVERLAY_STATE_DIR=" + (t / "state").string()};
  std::vector<std::string> flags;
  std::string stock = "4";  // what the stock code prints

  // A compiler at `path` that logs each compile and passes `extra` before its arguments.
  void wrapper(const fs::path& path, const std::string& extra) {
    write_file(path,
               "#!/bin/sh\ncase \" $* \" in *\" -c \"*) echo c >> " + (t / "compiles").string() + ";; esac\nexec c++ " +
                   extra + " \"$@\"\n",
               0755);
  }
  void configure(const std::vector<std::string>& extra = {}) {
    std::vector<std::string> argv = {
        "cmake",       "-S", proj.string(), "-B",
        bdir.string(), "-G", "Ninja",       "-DCMAKE_CXX_COMPILER=" + (t / "cxx").string()};
    argv.insert(argv.end(), extra.begin(), extra.end());
    Cmd c = run(argv);
    ASSERT_EQ(c.rc, 0) << c.err;
    Cmd b = run({"ninja", "-C", bdir.string()});
    ASSERT_EQ(b.rc, 0) << b.out << b.err;
  }
  void SetUp() override {
    if (!have({"cmake", "--version"}) || !have({"ninja", "--version"}))
      GTEST_SKIP() << "needs cmake and ninja (Debian: cmake ninja-build)";
    write_file(
        proj / "CMakeLists.txt",
        "cmake_minimum_required(VERSION 3.16)\nproject(p CXX)\nadd_library(kern SHARED src/kern.cpp src/other.cpp)\n"
        "target_include_directories(kern PRIVATE include)\nadd_executable(run src/main.cpp)\ntarget_link_libraries(run "
        "kern)\n");
    write_file(proj / "include/bias.h", "#define BIAS 0\n");  // outside the dirs the build watch pictures
    const std::string kern =
        "#include \"bias.h\"\n#ifndef EXTRA\n#define EXTRA 0\n#endif\nint value() { return VALUE + BIAS + EXTRA; }\n";
    write_file(proj / "src/kern.cpp", "#define VALUE 4\n" + kern);
    write_file(t / "cand/A/kern.cpp", "#define VALUE 7\n" + kern);
    write_file(t / "cand/B/kern.cpp", "#define VALUE 9\n" + kern);
    write_file(proj / "src/other.cpp", "int other() { return 1; }\n");
    write_file(proj / "src/main.cpp",
               "#include <cstdio>\nint value();\nint main() { std::printf(\"%d\\n\", value()); }\n");
    wrapper(t / "cxx", "");
    configure();
    Cmd d = run_overlay(
        {"--json", "discover", "--target", (proj / "src/kern.cpp").string(), "--root", t.path().string()}, {}, env);
    ASSERT_EQ(d.rc, 0) << d.err;
    json c = json::parse(d.out)["candidates"];
    ASSERT_FALSE(c.empty()) << d.out;
    for (const auto& a : c[0]["add_native_args"]) flags.push_back(a.get<std::string>());
  }
  int compiles() {
    if (!fs::exists(t / "compiles")) return 0;
    std::string log = read_file(t / "compiles");
    return static_cast<int>(std::count(log.begin(), log.end(), '\n'));
  }
  std::string value() {
    Cmd c = run({(bdir / "run").string()});
    return c.rc == 0 ? c.out.substr(0, c.out.find('\n')) : "error: " + c.err;
  }
  Cmd add(const std::string& cand, const std::vector<std::string>& extra = {},
          const std::vector<std::string>& more_env = {}) {
    std::vector<std::string> a = {"--json", "add-native",     "--overlay",
                                  ov,       "--patched-file", (t / "cand" / cand / "kern.cpp").string()};
    a.insert(a.end(), flags.begin(), flags.end());
    a.insert(a.end(), extra.begin(), extra.end());
    std::vector<std::string> e = env;
    e.insert(e.end(), more_env.begin(), more_env.end());
    return run_overlay(a, {}, e);
  }
  void revert() {
    Cmd r = run_overlay({"revert", "--overlay", ov}, {}, env);
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_EQ(value(), stock);
  }
  // Applies `cand`, checks whether it was served and what it prints, reverts.
  void cycle(const std::string& cand, bool served, const std::string& prints,
             const std::vector<std::string>& extra = {}, const std::vector<std::string>& more_env = {}) {
    int before = compiles();
    Cmd a = add(cand, extra, more_env);
    ASSERT_EQ(a.rc, 0) << a.err;
    json b = json::parse(a.out)["build"];
    EXPECT_EQ(b["served_from_store"].is_string(), served) << a.err;
    EXPECT_EQ(b["ran"], !served);
    // A served build ran no command: no exit status to give.
    EXPECT_EQ(b["rc"].is_null(), served) << b.dump();
    EXPECT_EQ(compiles() == before, served) << "compiles " << before << " -> " << compiles() << "\n" << a.err;
    EXPECT_EQ(value(), prints);
    revert();
  }
};

}  // namespace

TEST_F(BuildStoreCli, ARepeatedCandidateIsServedNotBuilt) {
  Cmd first = add("A");
  ASSERT_EQ(first.rc, 0) << first.err;
  EXPECT_TRUE(json::parse(first.out)["build"]["served_from_store"].is_null());
  std::string built = file_sha256(bdir / "libkern.so");
  revert();
  cycle("B", false, "9");
  int before = compiles();
  Cmd a = add("A");
  ASSERT_EQ(a.rc, 0) << a.err;
  EXPECT_EQ(compiles(), before);
  EXPECT_NE(a.err.find("add-native: store: hit (record "), std::string::npos) << a.err;
  // Issue 63: the summary says no command ran (it said build=yes).
  EXPECT_NE(a.err.find(" build=store)"), std::string::npos) << a.err;
  EXPECT_EQ(first.err.find(" build=store)"), std::string::npos) << first.err;
  json j = json::parse(a.out);
  EXPECT_EQ(j["build"]["ran"], false);
  std::string record = j["build"]["served_from_store"].get<std::string>();
  EXPECT_EQ(json::parse(read_file(t / "ov/_overlay_manifest.json"))["natives"][0]["build_served_from"], record);
  EXPECT_EQ(file_sha256(bdir / "libkern.so"), built);
  EXPECT_EQ(value(), "7");
  // The install's build agrees: nothing to redo with the served outputs in place.
  Cmd n = run({"ninja", "-C", bdir.string(), "-n", "-d", "explain"});
  EXPECT_NE(n.out.find("no work to do"), std::string::npos) << n.out << n.err;
  Cmd v = run_overlay({"verify-native", "--overlay", ov}, {}, env);
  EXPECT_NE(v.out.find("FRESH_BUILD_OK"), std::string::npos) << v.out;
  Cmd s = run_overlay({"status", "--overlay", ov}, {}, env);
  EXPECT_NE(s.out.find("served from the build store (" + record + ")"), std::string::npos) << s.out;
  EXPECT_NE(s.out.find("  revert    gives back the original mtimes (the install's build then has nothing more to redo "
                       "than before the apply)"),
            std::string::npos)
      << s.out;
  json sj = json::parse(run_overlay({"--json", "status", "--overlay", ov}, {}, env).out)["natives"][0];
  EXPECT_EQ(sj["served_from_store"], record);
  EXPECT_EQ(sj["revert_mtimes"], json({{"rule", "original"}}));
  Cmd r = run_overlay({"revert", "--overlay", ov}, {}, env);
  EXPECT_NE(r.err.find("original mtimes back"), std::string::npos) << r.err;
  EXPECT_EQ(value(), "4");
  // --rebuild builds all the same.
  cycle("A", false, "7", {"--rebuild"});
}

TEST_F(BuildStoreCli, AChangedHeaderOutsideTheWatchedDirsIsAMiss) {
  cycle("A", false, "7");
  write_file(proj / "include/bias.h", "#define BIAS 100\n");  // read by kern.cpp: Ninja's deps log names it
  ASSERT_EQ(run({"ninja", "-C", bdir.string()}).rc, 0);
  EXPECT_EQ(value(), stock = "104");
  cycle("A", false, "107");
  cycle("A", true, "107");
}

TEST_F(BuildStoreCli, AChangedFlagIsAMiss) {
  cycle("A", false, "7");
  configure({"-DCMAKE_CXX_FLAGS=-DEXTRA=1000"});
  EXPECT_EQ(value(), stock = "1004");
  cycle("A", false, "1007");
  cycle("A", true, "1007");
}

TEST_F(BuildStoreCli, AChangedCompilerPathIsAMiss) {
  cycle("A", false, "7");
  // The same compiler by another path, one that adds a definition: a hit would print 7.
  wrapper(t / "cxx2", "-DEXTRA=50");
  configure({"-DCMAKE_CXX_COMPILER=" + (t / "cxx2").string()});
  EXPECT_EQ(value(), stock = "54");
  cycle("A", false, "57");
}

TEST_F(BuildStoreCli, AChangedEnvironmentIsAMissAndATerminalsIsNot) {
  cycle("A", false, "7");
  cycle("A", false, "7", {}, {"CCACHE_DISABLE=1"});
  cycle("A", true, "7", {}, {"CCACHE_DISABLE=1", "TERM=dumb-" + std::to_string(::getpid())});
}

TEST_F(BuildStoreCli, ATornRecordIsNeverServed) {
  cycle("A", false, "7");
  // A copy that is not what the record says (a torn write, a disk's bit flip): built instead.
  std::vector<fs::path> blobs;
  for (const auto& e : fs::recursive_directory_iterator(state / "builds"))
    if (e.is_regular_file() && e.path().filename() != "record.json") blobs.push_back(e.path());
  ASSERT_FALSE(blobs.empty());
  for (const auto& b : blobs) {
    fs::permissions(b, fs::perms::owner_all);
    write_file(b, "torn");
  }
  Cmd a = add("A");
  ASSERT_EQ(a.rc, 0) << a.err;
  EXPECT_TRUE(json::parse(a.out)["build"]["served_from_store"].is_null());
  EXPECT_NE(a.err.find("the build store could not serve this build"), std::string::npos) << a.err;
  EXPECT_EQ(value(), "7");
  revert();
  // A record cut short: a miss (the build just kept a whole one again, so remove that first).
  cycle("A", true, "7");
  for (const auto& e : fs::recursive_directory_iterator(state / "builds"))
    if (e.path().filename() == "record.json") write_file(e.path(), "{\"recipe\":");
  cycle("A", false, "7");
  // A keep killed before its rename leaves a temporary dir: never looked at.
  fs::remove_all(state / "builds");
  cycle("A", false, "7");
  fs::path kept;
  for (const auto& e : fs::directory_iterator(state / "builds")) kept = e.path();
  fs::rename(kept, state / "builds/.tmp-killed");
  cycle("A", false, "7");
}

TEST_F(BuildStoreCli, TheStoreStaysUnderItsCapLeastRecentlyUsedOut) {
  std::vector<std::string> one = {"OVERLAY_BUILD_STORE_BYTES=1"};  // room for no record: each goes after its keep
  cycle("A", false, "7", {}, one);
  cycle("A", false, "7", {}, one);
  EXPECT_TRUE(!fs::exists(state / "builds") || [&] {
    for (const auto& e : fs::directory_iterator(state / "builds"))
      if (!fs::is_empty(e.path())) return false;
    return true;
  }());
  Cmd big = add("A", {}, one);
  EXPECT_NE(big.err.find("not kept in the build store: its outputs ("), std::string::npos) << big.err;
  revert();
  std::vector<std::string> off = {"OVERLAY_BUILD_STORE_BYTES=0"};
  cycle("B", false, "9", {}, off);
  cycle("B", false, "9", {}, off);
  // Room for about one: B kept after A pushes A out; B is served, A is built again.
  cycle("A", false, "7");
  std::uintmax_t bytes = 0;
  for (const auto& e : fs::recursive_directory_iterator(state / "builds"))
    if (e.is_regular_file()) bytes += e.file_size();
  std::vector<std::string> cap = {"OVERLAY_BUILD_STORE_BYTES=" + std::to_string(bytes * 3 / 2)};
  cycle("B", false, "9", {}, cap);
  cycle("B", true, "9", {}, cap);
  cycle("A", false, "7", {}, cap);
}

TEST_F(BuildStoreCli, AnotherUsersRecordIsNeverUsed) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (to give the record to nobody)";
  cycle("A", false, "7");
  ASSERT_EQ(run({"chown", "-R", "nobody", (state / "builds").string()}).rc, 0);
  cycle("A", false, "7");
}

TEST_F(BuildStoreCli, AChangedCMakeListsOutsideTheWatchedDirsIsAMiss) {
  cycle("A", false, "7");
  // Read by the build's regeneration step only (build.ninja's own inputs), in no watched dir.
  write_file(proj / "CMakeLists.txt", read_file(proj / "CMakeLists.txt") + "add_compile_definitions(EXTRA=300)\n");
  cycle("A", false, "307");  // revert puts back the stock build made before the change: 4
  cycle("A", true, "307");
}

// Shapes an adversarial review found served wrongly by the first version, each on a Makefile
// build whose depfile names the compile's headers by paths relative to where the compiler ran.
struct BuildStoreMake : ::testing::Test {
  TempDir t;
  fs::path p = t / "p";
  std::string ov = (t / "ov").string();
  std::vector<std::string> env = {"OVERLAY_STATE_DIR=" + (t / "state").string()};
  const std::string body =
      "#include <stdio.h>\n#include \"h.h\"\n#ifndef Y\n#define Y 0\n#endif\nint main(void) { printf(\"%d %d %d\\n\", "
      "V, H, Y); return 0; }\n";

  void SetUp() override {
    write_file(p / "Makefile",
               "prog: foo.c\n\tcc $(CFLAGS) -I../inc1 -I../inc2 -MD -MF obj/prog.d -o prog $(CURDIR)/foo.c\n-include "
               "obj/prog.d\n");
    fs::create_directories(p / "obj");
    fs::create_directories(t / "inc1");
    write_file(t / "inc2/h.h", "#define H 1\n");
    write_file(p / "foo.c", "#define V 4\n" + body);
    write_file(t / "cand.c", "#define V 7\n" + body);
    ASSERT_EQ(run({"make", "-C", p.string()}).rc, 0);
  }
  std::string value() {
    Cmd c = run({(p / "prog").string()});
    return c.rc == 0 ? c.out.substr(0, c.out.find('\n')) : "error: " + c.err;
  }
  // Applies the candidate: whether it was served and what it prints; then reverts.
  std::pair<bool, std::string> cycle(const std::vector<std::string>& more_env = {}) {
    std::vector<std::string> e = env;
    e.insert(e.end(), more_env.begin(), more_env.end());
    Cmd a = run_overlay(
        {"add-native", "--overlay", ov, "--target", (p / "foo.c").string(), "--patched-file", (t / "cand.c").string(),
         "--artifact", (p / "prog").string(), "--build-cmd", "make", "--build-cwd", p.string()},
        {}, e);
    EXPECT_EQ(a.rc, 0) << a.err;
    std::pair<bool, std::string> got{a.err.find("store: hit") != std::string::npos, value()};
    EXPECT_EQ(run_overlay({"revert", "--overlay", ov}, {}, env).rc, 0);
    return got;
  }
};

TEST_F(BuildStoreMake, EveryChangeTheCompileWouldSeeIsAMiss) {
  EXPECT_EQ(cycle(), std::make_pair(false, std::string("7 1 0")));
  EXPECT_EQ(cycle(), std::make_pair(true, std::string("7 1 0")));  // nothing changed: served
  // The header, named "../inc2/h.h" in the depfile (relative to the compiler's cwd, not the
  // depfile's dir): changed, a miss.
  write_file(t / "inc2/h.h", "#define H 2\n");
  EXPECT_EQ(cycle(), std::make_pair(false, std::string("7 2 0")));
  // Same size, mtime set back (touch -r, cp -p, tar): its ctime still tells.
  ASSERT_EQ(run({"cp", "-p", (t / "inc2/h.h").string(), (t / "h.bak").string()}).rc, 0);
  write_file(t / "inc2/h.h", "#define H 3\n");
  ASSERT_EQ(run({"touch", "-r", (t / "h.bak").string(), (t / "inc2/h.h").string()}).rc, 0);
  EXPECT_EQ(cycle(), std::make_pair(false, std::string("7 3 0")));
  // A header of the same name added to an include dir searched earlier.
  write_file(t / "inc1/h.h", "#define H 9\n");
  EXPECT_EQ(cycle(), std::make_pair(false, std::string("7 9 0")));
  EXPECT_EQ(cycle(), std::make_pair(true, std::string("7 9 0")));
  // A variable override carried by MAKEFLAGS (its -j words alone are no change).
  EXPECT_EQ(cycle({"MAKEFLAGS=-j2"}), std::make_pair(true, std::string("7 9 0")));
  EXPECT_EQ(cycle({"MAKEFLAGS=CFLAGS=-DY=2"}), std::make_pair(false, std::string("7 9 2")));
}
