// The optimised candidate: a different value, so the swap is visible end to end.
extern "C" float kernel_value() { return 7.0f; }
