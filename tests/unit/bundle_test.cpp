// read_bundle on its own (issue 64): a bundle written by hand reads back whole, and each way a
// bundle can point out of its root or its directory, or carry bytes other than it says, is
// refused with the problem named. The binary's tests drive export and replay end to end.
#include "overlay/bundle.hpp"

#include <functional>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "overlay/error.hpp"
#include "overlay/hash.hpp"

#include "test_util.hpp"

using namespace overlay;
using namespace overlay::test;
using nlohmann::json;

namespace {

const std::string kPatched = "int k(void) { return 2; }\n";

// A valid one-entry bundle: src/kernel.c modified, its build run in build/ to make lib/k.so.
struct BundleFixture {
  TempDir t;
  fs::path dir = t / "bundle";
  json doc;

  BundleFixture() {
    write_file(dir / "files/0/root/src/kernel.c", kPatched);
    json file = {{"path", "src/kernel.c"},
                 {"change", "modify"},
                 {"pristine_sha256", sha256_hex("int k(void) { return 1; }\n")},
                 {"patched_sha256", sha256_hex(kPatched)},
                 {"file", "files/0/root/src/kernel.c"}};
    json entry = {{"from_entry", "n1700000000-abcd"},
                  {"files", json::array({file})},
                  {"artifacts", json::array({"lib/k.so"})},
                  {"caches", json::array()},
                  {"build_cmds", json::array({json::array({"make", "-C", "{root}/build"})})},
                  {"build_cwd", "build"}};
    doc = {{"format", "overlay-bundle"},
           {"version", 1},
           {"root", "/opt/pkg"},
           {"created_at", 1700000000},
           {"entries", json::array({entry})}};
  }

  void write() { write_file(dir / kBundleFile, doc.dump(2)); }

  // The Error read_bundle throws for the bundle as `edit` leaves it ("" when it reads).
  std::string refusal(const std::function<void(json&)>& edit) {
    edit(doc);
    write();
    try {
      read_bundle(real_disk(), dir);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
};

}  // namespace

TEST(Bundle, AWellFormedBundleReadsBackWhole) {
  BundleFixture f;
  f.write();
  Bundle b = read_bundle(real_disk(), f.dir);
  EXPECT_EQ(b.root, fs::path("/opt/pkg"));
  ASSERT_EQ(b.entries.size(), 1u);
  const BundleEntry& e = b.entries[0];
  EXPECT_EQ(e.from_entry, "n1700000000-abcd");
  ASSERT_EQ(e.files.size(), 1u);
  EXPECT_EQ(e.files[0].path, "src/kernel.c");
  EXPECT_EQ(e.files[0].patched_sha256, sha256_hex(kPatched));
  EXPECT_EQ(e.artifacts, std::vector<std::string>{"lib/k.so"});
  ASSERT_EQ(e.build_cmds.size(), 1u);
  EXPECT_EQ(e.build_cmds[0].back(), "{root}/build");
  EXPECT_EQ(e.build_cwd, std::optional<std::string>("build"));
}

TEST(Bundle, APathOutOfTheRootIsRefused) {
  for (const char* bad : {"../etc/passwd", "/etc/passwd", "src/../../etc/passwd"}) {
    BundleFixture f;
    std::string why = f.refusal([&](json& d) { d["entries"][0]["files"][0]["path"] = bad; });
    EXPECT_NE(why.find(bad), std::string::npos) << bad << ": " << why;
  }
  for (const char* key : {"artifacts", "caches"}) {
    BundleFixture f;
    std::string why = f.refusal([&](json& d) { d["entries"][0][key] = json::array({"../outside"}); });
    EXPECT_NE(why.find("../outside"), std::string::npos) << key << ": " << why;
  }
  BundleFixture f;
  std::string why = f.refusal([&](json& d) { d["entries"][0]["build_cwd"] = "/tmp/agent-task"; });
  EXPECT_NE(why.find("/tmp/agent-task"), std::string::npos) << why;
}

TEST(Bundle, AFileOutsideTheBundleIsRefused) {
  BundleFixture f;
  write_file(f.t / "elsewhere.c", kPatched);
  std::string why = f.refusal([](json& d) { d["entries"][0]["files"][0]["file"] = "../elsewhere.c"; });
  EXPECT_NE(why.find("../elsewhere.c"), std::string::npos) << why;
}

TEST(Bundle, BytesOtherThanTheirDigestAreRefused) {
  BundleFixture f;
  write_file(f.dir / "files/0/root/src/kernel.c", "int k(void) { return 3; }\n");
  std::string why = f.refusal([](json&) {});
  EXPECT_NE(why.find("src/kernel.c"), std::string::npos) << why;
}

TEST(Bundle, AMissingFileIsRefused) {
  BundleFixture f;
  fs::remove(f.dir / "files/0/root/src/kernel.c");
  std::string why = f.refusal([](json&) {});
  EXPECT_NE(why.find("src/kernel.c"), std::string::npos) << why;
}

TEST(Bundle, ADigestThatIsNotHexIsRefused) {
  BundleFixture f;
  std::string why = f.refusal([](json& d) { d["entries"][0]["files"][0]["pristine_sha256"] = "not-a-digest"; });
  EXPECT_NE(why, "");
}

TEST(Bundle, AnotherFormatOrVersionIsRefused) {
  BundleFixture f;
  EXPECT_NE(f.refusal([](json& d) { d["version"] = 2; }), "");
  BundleFixture g;
  EXPECT_NE(g.refusal([](json& d) { d["format"] = "tarball"; }), "");
}
