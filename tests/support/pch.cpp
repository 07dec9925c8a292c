// Only the precompiled header the test executables reuse is built from this target.
