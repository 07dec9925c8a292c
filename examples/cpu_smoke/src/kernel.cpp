// The "installed" kernel: the value the driver prints.
extern "C" float kernel_value() { return 4.0f; }
