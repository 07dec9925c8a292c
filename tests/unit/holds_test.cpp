#include "overlay/holds.hpp"

#include <gtest/gtest.h>

#include "overlay/error.hpp"
#include "overlay/manifest.hpp"
#include "test_util.hpp"

using namespace overlay;
using namespace overlay::test;

namespace {
// An overlay whose manifest records a native change to `path` (what makes a hold live).
void record_change(const fs::path& ov, const fs::path& path) {
  Manifest m;
  NativeEntry e;
  SourceItem s;
  s.install_path = path.string();
  s.backup = "_native_backup/x";
  s.sha256 = std::string(64, 'a');
  e.sources.push_back(s);
  m.natives.push_back(e);
  fs::create_directories(ov);
  save_manifest(real_disk(), ov, m);
}
}  // namespace

TEST(HoldRegistry, LiveHoldRefusesOthersStaleHoldDoesNot) {
  TempDir t;
  HoldRegistry reg(real_disk(), t / "state");
  fs::path file = t / "inst/k.cu";
  reg.acquire({file}, t / "ov1", false, 1);
  EXPECT_EQ(*reg.holder(file), t / "ov1");
  // ov1 records nothing yet: the hold is stale and another overlay may take it.
  reg.acquire({file}, t / "ov2", false, 1);
  record_change(t / "ov2", file);
  try {
    reg.acquire({file}, t / "ov1", false, 1);
    FAIL() << "a live hold was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("held by overlay " + (t / "ov2").string()), std::string::npos) << e.what();
  }
  reg.acquire({file}, t / "ov2", false, 1);  // the holder itself may stack
  reg.acquire({file}, t / "ov1", true, 1);   // --force
  EXPECT_EQ(*reg.holder(file), t / "ov1");
}

TEST(HoldRegistry, ReleaseDropsOnlyOwnHoldsOnceNotRecorded) {
  TempDir t;
  HoldRegistry reg(real_disk(), t / "state");
  fs::path a = t / "a", b = t / "b";
  reg.acquire({a, b}, t / "ov", false, 1);
  record_change(t / "ov", b);
  Manifest recorded = *load_manifest(real_disk(), t / "ov");
  reg.release({a, b}, t / "other", recorded, 1);  // not its holds
  EXPECT_TRUE(reg.holder(a));
  reg.release({a, b}, t / "ov", recorded, 1);
  EXPECT_FALSE(reg.holder(a));  // no longer recorded: dropped
  EXPECT_TRUE(reg.holder(b));   // still recorded by the overlay: kept
}
