// Packaging: `cmake --install` into a temporary prefix, then the installed binary end to end
// (found its capture hook under the prefix, man page, bash completion); and the .deb CPack
// builds declares its runtime dependencies and runs from where it unpacks.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "test_util.hpp"

using namespace overlay::test;
using json = nlohmann::json;

namespace {

struct Installed : ::testing::Test {
  static inline TempDir* t = nullptr;
  static inline Cmd install;
  static void SetUpTestSuite() {
    t = new TempDir;
    install = run({"cmake", "--install", OVERLAY_BUILD_DIR, "--prefix", (t->path() / "prefix").string()});
  }
  static void TearDownTestSuite() { delete t; }
  fs::path prefix() const { return t->path() / "prefix"; }
  std::string bin() const { return (prefix() / "bin/overlay").string(); }
};

}  // namespace

TEST_F(Installed, LaysOutBinaryHookManPageAndCompletion) {
  ASSERT_EQ(install.rc, 0) << install.out << install.err;
  EXPECT_TRUE(fs::is_regular_file(prefix() / "bin/overlay"));
  EXPECT_TRUE(fs::is_regular_file(prefix() / "share/overlay/capture_shapes.py"));
  EXPECT_TRUE(fs::is_regular_file(prefix() / "share/overlay/seam_trace.py"));
  EXPECT_TRUE(fs::is_regular_file(prefix() / "share/overlay/overlay_setup.py"));
  EXPECT_TRUE(fs::is_regular_file(prefix() / "share/bash-completion/completions/overlay"));
#if OVERLAY_HAVE_MAN
  std::string man = read_file(prefix() / "share/man/man1/overlay.1");
  for (const char* want : {".SH SUBCOMMANDS", ".SS add-native", "--revert-on-failure", ".SH \"EXIT STATUS\"",
                           "NO_COLOR", ".SS discover", "--cache-root"})
    EXPECT_NE(man.find(want), std::string::npos) << "man page lacks " << want;
#else
  GTEST_SKIP() << "help2man not installed: no man page built";
#endif
}

TEST_F(Installed, InstalledBinaryRunsEndToEnd) {
  ASSERT_EQ(install.rc, 0) << install.err;
  TempDir w;
  Install in = make_install(w / "inst");
  std::string before = tree_digest(in.root);
  write_file(w / "patched.cpp", "int kernel() { return 7; }\n");
  std::vector<std::string> env{"OVERLAY_STATE_DIR=" + (w / "state").string()};
  std::string ov = (w / "ov").string();
  Cmd a = run({bin(), "add-native", "--overlay", ov, "--target", in.source.string(), "--patched-file",
               (w / "patched.cpp").string(), "--artifact", in.artifact.string(), "--build-cwd", in.root.string(),
               "--build-cmd", "sh -c 'echo new > lib/libk.so'"},
              {}, env);
  ASSERT_EQ(a.rc, 0) << a.err;
  EXPECT_EQ(run({bin(), "verify-native", "--overlay", ov}, {}, env).out, "FRESH_BUILD_OK (checked 1)\n");
  EXPECT_EQ(run({bin(), "status", "--overlay", ov, "--check-clean"}, {}, env).rc, 1);
  EXPECT_EQ(run({bin(), "revert", "--overlay", ov}, {}, env).rc, 0);
  EXPECT_EQ(run({bin(), "status", "--overlay", ov, "--check-clean"}, {}, env).rc, 0);
  EXPECT_EQ(tree_digest(in.root), before);
  // The default hooks are the binary's own copies of those it installs under its prefix.
  Cmd c = run({bin(), "add-capture", "--overlay", (w / "py").string(), "--target", "json:dumps", "--out",
               (w / "cap").string(), "--json"});
  ASSERT_EQ(c.rc, 0) << c.err;
  EXPECT_TRUE(json::parse(c.out)["capture_file"].is_null()) << c.out;
  EXPECT_EQ(read_file(w / "py/capture_shapes.py"), read_file(prefix() / "share/overlay/capture_shapes.py"));
  Cmd m = run({bin(), "add-marker", "--overlay", (w / "py").string(), "--target", "json:dumps"});
  ASSERT_EQ(m.rc, 0) << m.err;
  EXPECT_EQ(read_file(w / "py/seam_trace.py"), read_file(prefix() / "share/overlay/seam_trace.py"));
}

TEST_F(Installed, ShimRunsTheBinaryOfItsPrefix) {
  ASSERT_EQ(install.rc, 0) << install.err;
  TempDir w;
  // No OVERLAY_BIN and no overlay on PATH: the shim finds PREFIX/bin/overlay from PREFIX/share/overlay/.
  std::string path = "PATH=/usr/bin:/bin";
  Cmd v = run({"/usr/bin/python3", (prefix() / "share/overlay/overlay_setup.py").string(), "--version"}, {},
              {path, "OVERLAY_BIN="});
  EXPECT_EQ(v.rc, 0) << v.err;
  EXPECT_EQ(v.out, run({bin(), "--version"}).out);
  Cmd a = run({"/usr/bin/python3", (prefix() / "share/overlay/overlay_setup.py").string(), "add-rebind", "--overlay",
               (w / "ov").string(), "--target", "json:dumps", "--impl-module", "json", "--impl-attr", "loads"},
              {}, {path, "OVERLAY_BIN="});
  EXPECT_EQ(a.rc, 0) << a.err;
  EXPECT_EQ(a.out, "OVERLAY_DIR=" + (w / "ov").string() +
                       "\nadd-rebind json:dumps -> json.loads\nlaunch with: PYTHONPATH=" + (w / "ov").string() +
                       ":$PYTHONPATH\n");
}

TEST_F(Installed, CompletionOffersSubcommandsAndTheirFlags) {
  ASSERT_EQ(install.rc, 0) << install.err;
  if (run({"bash", "-c", "true"}).rc != 0) GTEST_SKIP() << "no bash";
  std::string comp = (prefix() / "share/bash-completion/completions/overlay").string();
  auto complete = [&](const std::string& words, int cword) {
    return run({"bash", "-c",
                "source " + comp + "; COMP_WORDS=(" + words + "); COMP_CWORD=" + std::to_string(cword) +
                    "; _overlay; echo \"${COMPREPLY[*]}\""})
        .out;
  };
  EXPECT_NE(complete(bin() + " st", 1).find("status"), std::string::npos);
  std::string flags = complete(bin() + " add-native --re", 2);
  EXPECT_NE(flags.find("--revert-on-failure"), std::string::npos) << flags;
  EXPECT_EQ(complete(bin() + " add-native --cache-snapshot ''", 3), "auto move aside tar\n");
  EXPECT_NE(complete(bin() + " disc", 1).find("discover"), std::string::npos);
  EXPECT_NE(complete(bin() + " discover --cache", 2).find("--cache-root"), std::string::npos);
}

TEST_F(Installed, DebPackageDeclaresDependenciesAndRuns) {
  if (run({"sh", "-c", "command -v cpack && command -v dpkg-deb"}).rc != 0) GTEST_SKIP() << "no cpack/dpkg-deb";
  TempDir pkg;
  Cmd p = run({"cpack", "-G", "DEB", "--config", std::string(OVERLAY_BUILD_DIR) + "/CPackConfig.cmake", "-B",
               pkg.path().string()});
  ASSERT_EQ(p.rc, 0) << p.out << p.err;
  fs::path deb;
  for (const auto& e : fs::directory_iterator(pkg.path()))
    if (e.path().extension() == ".deb") deb = e.path();
  ASSERT_FALSE(deb.empty()) << p.out;
  std::string depends = run({"dpkg-deb", "-f", deb.string(), "Depends"}).out;
  for (const char* want : {"libc6", "libarchive13", "patch"})
    EXPECT_NE(depends.find(want), std::string::npos) << depends;
  std::string files = run({"dpkg-deb", "-c", deb.string()}).out;
  for (const char* want : {"./usr/bin/overlay", "./usr/share/overlay/capture_shapes.py",
                           "./usr/share/bash-completion/completions/overlay"})
    EXPECT_NE(files.find(want), std::string::npos) << files;
  ASSERT_EQ(run({"dpkg-deb", "-x", deb.string(), (pkg.path() / "root").string()}).rc, 0);
  Cmd v = run({(pkg.path() / "root/usr/bin/overlay").string(), "--version"});
  EXPECT_EQ(v.rc, 0);
  EXPECT_EQ(v.out.rfind("overlay ", 0), 0u) << v.out;
}
