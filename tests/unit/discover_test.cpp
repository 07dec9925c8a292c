#include "overlay/discover.hpp"

#include <gtest/gtest.h>

#include "overlay/error.hpp"

#include "test_util.hpp"

using namespace overlay;
using namespace overlay::test;

namespace {

DiscoverReport look(const fs::path& target, const fs::path& root) {
  DiscoverRequest r;
  r.target = target;
  r.root = root;
  r.default_cache_roots = false;
  return discover(real_disk(), r);
}

}  // namespace

TEST(DiscoverLib, TaskConfigCommandForms) {
  TempDir t;
  write_file(t / "k.cpp", "int k;\n");
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"compile_command: make -C build  # the usual\n", {"make", "-C", "build"}},
      {"name: x\ncompile_command: \"bash -c \\\"make all\\\"\"\n", {"bash", "-c", "make all"}},
      {"compile_command: 'python3 setup.py build_ext --inplace'\n", {"python3", "setup.py", "build_ext", "--inplace"}},
      {"compile_command: >\n  cmake --build\n  out\nnext: 1\n", {"cmake", "--build", "out"}},
  };
  for (const auto& [yaml, argv] : cases) {
    write_file(t / "config.yaml", yaml);
    DiscoverReport r = look(t / "k.cpp", t.path());
    ASSERT_EQ(r.candidates.size(), 1u) << yaml;
    EXPECT_EQ(r.candidates[0].kind, "config");
    ASSERT_EQ(r.candidates[0].build_cmds.size(), 1u);
    EXPECT_EQ(r.candidates[0].build_cmds[0], argv) << yaml;
    EXPECT_EQ(r.candidates[0].build_cwd, t.path());
  }
  write_file(t / "config.yaml", "  compile_command: nested, not top-level\nother: 1\n");
  EXPECT_TRUE(look(t / "k.cpp", t.path()).candidates.empty());
}

TEST(DiscoverLib, AddNativeArgs) {
  BuildCandidate c;
  c.artifacts = {"/b/k.o", "/b/lib k.so"};
  c.caches = {"/jit/k"};
  EXPECT_EQ(c.add_native_args("/s/k.cpp"),
            (std::vector<std::string>{"--target", "/s/k.cpp", "--artifact", "/b/k.o", "--artifact", "/b/lib k.so",
                                      "--invalidate-cache", "/jit/k"}));
  c.build_cmds = {{"cmake", "--build", "/b dir"}};
  c.build_cwd = "/b dir";
  auto a = c.add_native_args("/s/k.cpp");
  EXPECT_EQ(std::vector<std::string>(a.end() - 4, a.end()),
            (std::vector<std::string>{"--build-cmd", "cmake --build '/b dir'", "--build-cwd", "/b dir"}));
}

TEST(DiscoverLib, RefusesMissingOrNonRegularTarget) {
  TempDir t;
  EXPECT_THROW(look(t / "nope.cpp", t.path()), Error);
  EXPECT_THROW(look(t.path(), t.path()), Error);
}

TEST(DiscoverLib, StopsAtRoot) {
  TempDir t;
  write_file(t / "config.yaml", "compile_command: make\n");
  write_file(t / "a/b/k.cpp", "int k;\n");
  DiscoverReport r = look(t / "a/b/k.cpp", t / "a");
  EXPECT_TRUE(r.candidates.empty());
  EXPECT_EQ(r.searched, (std::vector<std::string>{(t / "a/b").string(), (t / "a").string()}));
  EXPECT_EQ(look(t / "a/b/k.cpp", t.path()).candidates.size(), 1u);
}
