#pragma once
// Native apply-back, one header per step of the crash-safety protocol (docs/design.md):
// plan (validation), apply (back up, record, swap, invalidate, build), verify, revert.
#include "overlay/native_apply.hpp"
#include "overlay/native_build.hpp"
#include "overlay/native_plan.hpp"
#include "overlay/native_revert.hpp"
#include "overlay/native_verify.hpp"
