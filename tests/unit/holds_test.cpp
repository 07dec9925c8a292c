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
  (void)reg.acquire({file}, t / "ov1", false, 1);
  EXPECT_EQ(*reg.holder(file), t / "ov1");
  // ov1 records nothing yet: the hold is stale and another overlay may take it.
  (void)reg.acquire({file}, t / "ov2", false, 1);
  record_change(t / "ov2", file);
  try {
    (void)reg.acquire({file}, t / "ov1", false, 1);
    FAIL() << "a live hold was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("held by overlay " + (t / "ov2").string()), std::string::npos) << e.what();
  }
  (void)reg.acquire({file}, t / "ov2", false, 1);  // the holder itself may stack
  (void)reg.acquire({file}, t / "ov1", true, 1);   // --force
  EXPECT_EQ(*reg.holder(file), t / "ov1");
}

TEST(HoldRegistry, ReleaseDropsOnlyOwnHoldsOnceNotRecorded) {
  TempDir t;
  HoldRegistry reg(real_disk(), t / "state");
  fs::path a = t / "a", b = t / "b";
  (void)reg.acquire({a, b}, t / "ov", false, 1);
  record_change(t / "ov", b);
  Manifest recorded = *load_manifest(real_disk(), t / "ov");
  reg.release({a, b}, t / "other", recorded, 1);  // not its holds
  EXPECT_TRUE(reg.holder(a));
  reg.release({a, b}, t / "ov", recorded, 1);
  EXPECT_FALSE(reg.holder(a));  // no longer recorded: dropped
  EXPECT_TRUE(reg.holder(b));   // still recorded by the overlay: kept
}

TEST(HoldRegistry, AClaimInProgressMakesAnotherWaitThenGiveBackRestoresThePreviousHolder) {
  TempDir t;
  HoldRegistry reg(real_disk(), t / "state");
  fs::path file = t / "inst/k.cu";
  record_change(t / "ov0", file);
  (void)reg.acquire({file}, t / "ov0", false, 1);
  {
    HoldClaim forced = reg.acquire({file}, t / "ov1", true, 1);  // ov1 records nothing yet
    // Its hold looks stale (ov1's manifest names no change), yet while the claim lives no
    // other acquire may judge the path: it waits, here past its timeout.
    EXPECT_THROW((void)reg.acquire({file}, t / "ov2", false, 0.2), LockTimeout);
    reg.give_back(forced, t / "ov1", 1);  // ov1's add-native failed before recording
  }
  EXPECT_EQ(*reg.holder(file), t / "ov0");
  HoldClaim fresh = reg.acquire({t / "free"}, t / "ov3", false, 1);
  reg.give_back(fresh, t / "ov3", 1);
  EXPECT_FALSE(reg.holder(t / "free"));
}

// A cluster's shared home holds every node's registry: each host gets its own there (issue 42),
// and a local home keeps the one directory it always had.
TEST(HoldRegistry, StateDirIsPerHostOnlyOnANetworkFilesystem) {
  fs::path base = "/home/u/.local/state/overlay";
  EXPECT_EQ(HoldRegistry::per_host_state_dir(base, 0x6969, "node7"), base / "host-node7");        // NFS
  EXPECT_EQ(HoldRegistry::per_host_state_dir(base, 0x0BD00BD0, "node7"), base / "host-node7");    // Lustre
  EXPECT_EQ(HoldRegistry::per_host_state_dir(base, 0xEF53, "node7"), base);                       // ext4
  EXPECT_EQ(HoldRegistry::per_host_state_dir(base, 0x01021994, "node7"), base);                   // tmpfs
  EXPECT_EQ(HoldRegistry::per_host_state_dir(base, 0x6969, ""), base);
}
